"""The sweeps' own rows: the step sweeps' pages (batch size, prompt length, precision), the depth sweep's
page, and the load
sweeps' axis (arrival rates, closed-loop users, prefill:decode splits), and the SweepSpec each builds
as the CLI's `sweep KIND` flags build it (backend/cli/tools.py sweep_config). Methods of RunForm."""
from __future__ import annotations

from PySide6 import QtWidgets

from backend.config import PRECISION_DEFAULT, RunKind, SweepKind, SweepSpec
from backend.errors import InputError
from backend.sweeps.parse import parse_depths, parse_dtypes, parse_rates

from gui.panels.fields import MAX_BATCH, ValidatedField, whole, whole_list

# the load sweeps: one whole load run of the workload page's settings per point (backend/sweeps/load.py,
# backend/sweeps/pd_ratio.py); each kind's axis field, its label and its tooltip
LOAD_SWEEPS = {
    RunKind.SWEEP_RATE: ("rates", "Rates (req/s)", "--rates: one load run at each arrival rate (Poisson unless the "
                   "Arrival is gamma); a trace is sped up or slowed to each rate"),
    RunKind.SWEEP_CONCURRENCY: ("concurrencies", "Users per point", "--concurrencies: one closed-loop load run with "
                          "each number of users"),
    RunKind.SWEEP_PD_RATIO: ("total_devices", "Total devices", "--total-devices: every prefill:decode split of this many "
                       "simulated devices under the disaggregated policy, on the GPU profile above"),
}


def precision_list(text: str) -> list[str]:
    """Comma-separated precisions (float32,q8_0,...) as `sweep precision --dtypes` takes them."""
    if not text.replace(",", "").strip():
        raise ValueError("precisions: give a comma-separated list such as float32,q8_0,q4_1")
    try:
        return parse_dtypes(text, "precisions")
    except InputError as exc:
        raise ValueError(str(exc)) from None


def rate_list(text: str) -> list[float]:
    """Comma-separated arrival rates (0.5,1,2), as `sweep rate --rates` takes them."""
    try:
        return parse_rates(text, "rates")
    except InputError as exc:
        raise ValueError(str(exc)) from None


def depth_list(text: str) -> list[int]:
    """Comma-separated context depths (0,4096,16384), as `sweep depth --depths` takes them."""
    try:
        return parse_depths(text, "depths")
    except InputError as exc:
        raise ValueError(str(exc)) from None


def form_layout(parent: QtWidgets.QWidget) -> QtWidgets.QFormLayout:
    """Every page's layout: label and field side by side, the fields as wide as the dock."""
    form = QtWidgets.QFormLayout(parent)
    form.setContentsMargins(0, 4, 0, 4)
    form.setFieldGrowthPolicy(QtWidgets.QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
    form.setRowWrapPolicy(QtWidgets.QFormLayout.RowWrapPolicy.DontWrapRows)
    return form


class SweepPages:
    """Mixed into RunForm: uses its `fields` and `kind()`."""

    def _sweep_batch_page(self) -> QtWidgets.QWidget:
        page = QtWidgets.QWidget()
        form = form_layout(page)
        f = self.fields[RunKind.SWEEP_BATCH] = {
            "batches": ValidatedField("1,2,4,8,16,32", whole_list("batch size", MAX_BATCH)),
            "context": ValidatedField("512", whole("context")),
            "steps": ValidatedField("8", whole("timed steps", 1, 10_000), tooltip="the point is their median"),
        }
        form.addRow("Batch sizes", f["batches"])
        form.addRow("Context tokens", f["context"])
        form.addRow("Steps per point", f["steps"])
        return page

    def _sweep_prompt_page(self) -> QtWidgets.QWidget:
        page = QtWidgets.QWidget()
        form = form_layout(page)
        f = self.fields[RunKind.SWEEP_PROMPT] = {
            "lengths": ValidatedField("32,64,128,256,512,1024", whole_list("prompt length")),
            "steps": ValidatedField("8", whole("timed prefills", 1, 10_000), tooltip="the point is their median"),
        }
        form.addRow("Prompt lengths", f["lengths"])
        form.addRow("Steps per point", f["steps"])
        return page

    def _sweep_precision_page(self) -> QtWidgets.QWidget:
        page = QtWidgets.QWidget()
        form = form_layout(page)
        f = self.fields[RunKind.SWEEP_PRECISION] = {
            "dtypes": ValidatedField(",".join(PRECISION_DEFAULT), precision_list,
                                     tooltip="the same model loaded at each: float32, bfloat16, float16, "
                                             "q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, f16, int8 "
                                             "(the Dtype above is not used)"),
            "prompt_len": ValidatedField("512", whole("prompt length"), tooltip="tokens in each prompt"),
            "output_len": ValidatedField("64", whole("output length"),
                                         tooltip="decode steps timed (their median is the TPOT)"),
            "batch": ValidatedField("1", whole("batch size", 1, MAX_BATCH),
                                    tooltip="requests prefilled and decoded together"),
            "steps": ValidatedField("3", whole("timed prefills", 1, 10_000), tooltip="their median is the TTFT"),
        }
        form.addRow("Precisions", f["dtypes"])
        form.addRow("Prompt tokens", f["prompt_len"])
        form.addRow("Output tokens", f["output_len"])
        form.addRow("Batch size", f["batch"])
        form.addRow("Prefills timed", f["steps"])
        return page

    def _sweep_depth_page(self) -> QtWidgets.QWidget:
        page = QtWidgets.QWidget()
        form = form_layout(page)
        f = self.fields[RunKind.SWEEP_DEPTH] = {
            "depths": ValidatedField("0,512,2048", depth_list,
                                     tooltip="--depths: tokens already in the context when pp is prefilled and tg "
                                             "decoded (llama-bench's -d); on the engine or against the server above"),
            "prompt_len": ValidatedField("128", whole("prompt length"),
                                         tooltip="pp: tokens whose prefill is timed at each depth"),
            "output_len": ValidatedField("32", whole("output length"), tooltip="tg: decode steps timed at each depth"),
            "steps": ValidatedField("3", whole("repetitions", 1, 1000),
                                    tooltip="pairs of requests per depth; the point is their median"),
        }
        form.addRow("Depths (tokens)", f["depths"])
        form.addRow("Prompt tokens (pp)", f["prompt_len"])
        form.addRow("Output tokens (tg)", f["output_len"])
        form.addRow("Repetitions", f["steps"])
        return page

    def _load_sweep_fields(self) -> dict[str, ValidatedField]:
        """The load sweeps' axes: one field each, on the workload page above its settings."""
        parsers = {"rates": ("1,2,4,8", rate_list), "concurrencies": ("1,2,4,8,16", whole_list("users", 100_000)),
                   "total_devices": ("8", whole("total devices", 2, 1024))}
        fields = {}
        for key, label, tip in LOAD_SWEEPS.values():
            text, parse = parsers[key]
            fields[key] = ValidatedField(text, parse, tooltip=tip)
        return fields

    def is_load_sweep(self) -> bool:
        return self.kind() in LOAD_SWEEPS

    def sweep(self) -> SweepSpec | None:
        kind = self.kind()
        if kind is RunKind.SWEEP_BATCH:
            f = self.fields[kind]
            return SweepSpec(kind=SweepKind.BATCH, batches=sorted(set(f["batches"].value)), context=f["context"].value,
                             steps=f["steps"].value)
        if kind is RunKind.SWEEP_PROMPT:
            f = self.fields[kind]
            return SweepSpec(kind=SweepKind.PROMPT, lengths=sorted(set(f["lengths"].value)), steps=f["steps"].value)
        if kind is RunKind.SWEEP_PRECISION:   # as the CLI's `sweep precision` builds it (cli.tools.sweep_config)
            f = self.fields[kind]
            return SweepSpec(kind=SweepKind.PRECISION, steps=f["steps"].value, dtypes=list(f["dtypes"].value),
                             prompt_len=f["prompt_len"].value, output_len=f["output_len"].value,
                             batch=f["batch"].value)
        if kind is RunKind.SWEEP_DEPTH:   # as the CLI's `sweep depth` builds it (cli.depth.depth_config)
            f = self.fields[kind]
            return SweepSpec(SweepKind.DEPTH, depths=list(f["depths"].value), prompt_len=f["prompt_len"].value,
                             output_len=f["output_len"].value, steps=f["steps"].value)
        f = self.fields["load-sweep"]
        if kind is RunKind.SWEEP_RATE:
            return SweepSpec(SweepKind.RATE, rates=list(f["rates"].value))
        if kind is RunKind.SWEEP_CONCURRENCY:
            return SweepSpec(SweepKind.CONCURRENCY, concurrencies=sorted(set(f["concurrencies"].value)))
        if kind is RunKind.SWEEP_PD_RATIO:
            return SweepSpec(SweepKind.PD_RATIO, total_devices=f["total_devices"].value)
        return None
