"""What to run: one batch, a workload through the load driver, or a sweep; and sampling settings."""
from __future__ import annotations

import inspect
from dataclasses import replace
from pathlib import Path

from PySide6 import QtCore, QtWidgets

from backend.config import BatchRun, EngineConfig, PRECISION_DEFAULT, SamplingConfig, SweepSpec
from backend.errors import InputError
from backend.engine.scheduler import POLICIES
from backend.sweeps.parse import parse_dtypes
from backend.workload.spec import (ARRIVALS, PROMPT_SOURCES, RATE_ARRIVALS, LengthDist, WorkloadSpec, apply_overrides,
                              list_workloads, load_workload)

from gui.panels.fields import MAX_BATCH, ValidatedField, length, number, open_file, whole, whole_list

RUN_KINDS = (
    ("batch", "One batch: prefill, then decode"),
    ("load", "Workload through the load driver"),
    ("sweep-batch", "Batch-size sweep (decode)"),
    ("sweep-prompt", "Prompt-length sweep (prefill)"),
    ("sweep-precision", "Precision sweep (bytes per weight)"),
)
CUSTOM = "custom"
# the window's first preset, as before trace presets sorted ahead of it (a 200-request trace of 1,000-token
# prompts is long for a first run on a CPU; poisson-chat's normal() lengths cannot be edited under "custom")
DEFAULT_PRESET = "burst-64"
MAX_REPEATS = 1000
COMPARED_POLICIES = ("static", "continuous", "chunked", "disaggregated")   # what Compare policies runs, in this order
FORM_POLICIES = (*POLICIES, "disaggregated")   # the scheduler's policies, and prefill and decode engine processes


TRACE_KEYS = ("trace", "trace_speed", "think_ms")   # WorkloadSpec's --trace, --trace-speed, --think-ms


def trace_file(text: str) -> str:
    path = Path(text.strip()).expanduser()
    if not path.is_file():
        raise ValueError(f"trace: no such file {text.strip()!r}")
    return str(path)


def mean_length(dist: LengthDist) -> float:
    return {"fixed": dist.value, "uniform": (dist.low + dist.high) / 2}.get(dist.kind, dist.mean)


def precision_list(text: str) -> list[str]:
    """Comma-separated precisions (float32,q8_0,...) as `sweep precision --dtypes` takes them."""
    if not text.replace(",", "").strip():
        raise ValueError("precisions: give a comma-separated list such as float32,q8_0,q4_1")
    try:
        return parse_dtypes(text, "precisions")
    except InputError as exc:
        raise ValueError(str(exc)) from None


def one_precision(text: str) -> str:
    """One precision (q8_0, bfloat16, ...) for Compare policies' "also at dtype"."""
    try:
        names = parse_dtypes(text, "also at dtype")
    except InputError as exc:
        raise ValueError(str(exc)) from None
    if len(names) != 1:
        raise ValueError(f"also at dtype takes one precision, got {text.strip()!r}")
    return names[0]


def _form(parent: QtWidgets.QWidget) -> QtWidgets.QFormLayout:
    form = QtWidgets.QFormLayout(parent)
    form.setContentsMargins(0, 4, 0, 4)
    form.setFieldGrowthPolicy(QtWidgets.QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
    form.setRowWrapPolicy(QtWidgets.QFormLayout.RowWrapPolicy.DontWrapRows)
    return form


class RunForm(QtWidgets.QWidget):
    """Emits changed whenever a value or its validity changes."""

    changed = QtCore.Signal()
    inputRejected = QtCore.Signal(str)   # a workload file that cannot be used, one line naming file and field

    def __init__(self, parent=None):
        super().__init__(parent)
        self.kind_combo = QtWidgets.QComboBox()
        self.kind_combo.setObjectName("runKindCombo")
        for key, title in RUN_KINDS:
            self.kind_combo.addItem(title, key)
        self.pages = QtWidgets.QStackedWidget()
        self.fields: dict[str, dict[str, ValidatedField]] = {}
        self._remote = False   # a remote server's workload: the server schedules it
        self._preset_lengths: dict[str, str] = {}   # a preset's normal() length, kept when its text is unchanged
        self._preset_trace = ""   # the trace file the chosen preset replays
        self.pages.addWidget(self._batch_page())
        self.pages.addWidget(self._load_page())
        self.pages.addWidget(self._sweep_batch_page())
        self.pages.addWidget(self._sweep_prompt_page())
        self.pages.addWidget(self._sweep_precision_page())
        self.fields["sampling"] = {
            "temperature": ValidatedField("0", number("temperature", 0.0, 10.0), tooltip="0 is greedy"),
            "seed": ValidatedField("0", whole("seed", 0, 2**31 - 1)),
        }
        self.fields["shared"] = {
            "repeats": ValidatedField("1", whole("repeats", 1, MAX_REPEATS),
                                      tooltip="the same settings run back to back, the model loaded once; "
                                              "the views show one repeat at a time, the end the mean ± 95% CI"),
        }
        self.ignore_eos = QtWidgets.QCheckBox("ignore EOS (fixed output length)")
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.kind_combo)
        layout.addWidget(self.pages)
        shared = QtWidgets.QWidget()
        _form(shared).addRow("Repeats", self.fields["shared"]["repeats"])
        layout.addWidget(shared)
        sampling = QtWidgets.QGroupBox("Sampling")
        form = _form(sampling)
        form.addRow("Temperature", self.fields["sampling"]["temperature"])
        form.addRow("Seed", self.fields["sampling"]["seed"])
        form.addRow(self.ignore_eos)
        layout.addWidget(sampling)
        self.kind_combo.currentIndexChanged.connect(self._kind_changed)
        for group in self.fields.values():
            for f in group.values():
                f.valueChanged.connect(self._field_changed)
        for combo in self.findChildren(QtWidgets.QComboBox):
            combo.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(10)
        self._apply_preset()
        self._kind_changed()

    # ---- pages -------------------------------------------------------------------------------

    def _batch_page(self) -> QtWidgets.QWidget:
        page = QtWidgets.QWidget()
        form = _form(page)
        self.prompt_edit = QtWidgets.QPlainTextEdit()
        self.prompt_edit.setObjectName("promptEdit")
        self.prompt_edit.setPlaceholderText("Prompt text (empty: random prompt tokens of the length below)")
        self.prompt_edit.setFixedHeight(60)
        self.chat_check = QtWidgets.QCheckBox("apply the model's chat template")
        f = self.fields["batch"] = {
            "prompt_len": ValidatedField("128", whole("prompt length")),
            "output_len": ValidatedField("64", whole("output length")),
            "batch": ValidatedField("1", whole("batch size", 1, MAX_BATCH)),
        }
        form.addRow(self.prompt_edit)
        form.addRow(self.chat_check)
        form.addRow("Prompt tokens", f["prompt_len"])
        form.addRow("Output tokens", f["output_len"])
        form.addRow("Batch size", f["batch"])
        self.prompt_edit.textChanged.connect(self._prompt_changed)
        self._prompt_changed()
        return page

    def _load_page(self) -> QtWidgets.QWidget:
        page = QtWidgets.QWidget()
        form = _form(page)
        self.preset_combo = QtWidgets.QComboBox()
        self.preset_combo.setObjectName("workloadCombo")
        self.preset_combo.addItems([*list_workloads(), CUSTOM])
        self.preset_combo.setCurrentText(DEFAULT_PRESET)   # where it is listed; else the first
        self.open_workload_button = QtWidgets.QPushButton("Open…")
        self.open_workload_button.setObjectName("openWorkloadButton")
        self.open_workload_button.setToolTip("Use a workload TOML file of your own")
        # the button under the list, not beside it: side by side they widen the dock past its width
        preset_row = QtWidgets.QHBoxLayout()
        preset_row.addWidget(self.open_workload_button)
        preset_row.addStretch(1)
        self.arrival_combo = QtWidgets.QComboBox()
        self.arrival_combo.addItems(ARRIVALS)
        self.arrival_combo.setPlaceholderText("the trace's times")
        self.source_combo = QtWidgets.QComboBox()
        self.source_combo.addItems(PROMPT_SOURCES)
        self.policy_combo = QtWidgets.QComboBox()
        self.policy_combo.setObjectName("policyCombo")
        self.policy_combo.addItems(FORM_POLICIES)
        self.policy_combo.setCurrentText(EngineConfig().policy)
        f = self.fields["load"] = {
            "requests": ValidatedField("32", whole("requests", 1, 1_000_000), allow_empty=True,
                                       placeholder="the preset's duration"),
            "rate": ValidatedField("4", number("rate", 0.0, 1e6, low_inclusive=False), tooltip="requests per second"),
            "burstiness": ValidatedField("1", number("burstiness", 0.0, 1e3, low_inclusive=False),
                                         tooltip="gamma shape: below 1 burstier than Poisson"),
            "concurrency": ValidatedField("8", whole("users", 1, 100_000)),
            "prompt_len": ValidatedField("128", self._length_parser("prompt_len", "prompt length")),
            "output_len": ValidatedField("64", self._length_parser("output_len", "output length")),
            "max_batch": ValidatedField("32", whole("max batch", 1, MAX_BATCH)),
            "chunk_tokens": ValidatedField("512", whole("chunk tokens")),
            "prefill_workers": ValidatedField("1", whole("prefill workers", 1, 64),
                                              tooltip="disaggregated: engine processes (simulated: devices) "
                                                      "that run prompts only"),
            "decode_workers": ValidatedField("1", whole("decode workers", 1, 64),
                                             tooltip="disaggregated: engine processes (simulated: devices) "
                                                     "that run decode steps only, the prompts' KV handed to them"),
            "compare_dtype": ValidatedField("", one_precision, allow_empty=True, placeholder="none (e.g. q8_0)",
                                            tooltip="one more run: the Policy above at this precision"),
            "compare_chunk": ValidatedField("", whole("second chunk tokens"), allow_empty=True,
                                            placeholder="none (e.g. 128)",
                                            tooltip="one more run: chunked at this chunk size"),
        }
        f["trace"] = ValidatedField("", trace_file, allow_empty=True, placeholder="none (the arrivals above)",
                                    tooltip="--trace: replay a trace's arrival times with its prompt and output "
                                            "lengths (CSV or JSONL: the Azure LLM inference trace's columns, "
                                            "Mooncake's JSONL, or a run's requests.csv) instead of the arrivals "
                                            "and lengths above")
        self.open_trace_button = QtWidgets.QToolButton()
        self.open_trace_button.setObjectName("openTraceButton")
        self.open_trace_button.setText("…")
        self.open_trace_button.setToolTip("Open a trace file")
        trace_row = QtWidgets.QHBoxLayout()
        trace_row.setContentsMargins(0, 0, 0, 0)
        trace_row.addWidget(f["trace"], 1)
        trace_row.addWidget(self.open_trace_button, 0, QtCore.Qt.AlignmentFlag.AlignTop)
        self.trace_speed_spin = QtWidgets.QDoubleSpinBox()
        self.trace_speed_spin.setObjectName("traceSpeedSpin")
        self.trace_speed_spin.setRange(0.01, 1000.0)
        self.trace_speed_spin.setDecimals(2)
        self.trace_speed_spin.setSingleStep(0.5)
        self.trace_speed_spin.setValue(1.0)
        self.trace_speed_spin.setSuffix("×")
        self.trace_speed_spin.setToolTip("--trace-speed: the trace's arrivals this many times faster (2: twice the rate)")
        self.think_spin = QtWidgets.QDoubleSpinBox()
        self.think_spin.setObjectName("thinkSpin")
        self.think_spin.setRange(0.0, 3_600_000.0)
        self.think_spin.setDecimals(0)
        self.think_spin.setSingleStep(100.0)
        self.think_spin.setSuffix(" ms")
        self.think_spin.setToolTip("--think-ms: closed loop, each user waits this long after an answer before "
                                   "sending the next request (users start staggered)")
        # the policies in the tooltip: on the box itself they made the dock 400 pixels wide
        self.compare_check = QtWidgets.QCheckBox("Compare policies")
        self.compare_check.setObjectName("compareCheck")
        self.compare_check.setToolTip(f"Run runs the workload under each policy in turn ({', '.join(COMPARED_POLICIES)}), "
                                      "each saved to its own folder and added as a reference; Stop cancels the rest")
        self.workload_error = QtWidgets.QLabel()
        self.workload_error.setStyleSheet("color: #c0392b;")
        self.workload_error.setWordWrap(True)
        form.addRow("Preset", self.preset_combo)
        form.addRow("", preset_row)
        form.addRow("Requests", f["requests"])
        form.addRow("Arrival", self.arrival_combo)
        form.addRow("Rate (req/s)", f["rate"])
        form.addRow("Burstiness", f["burstiness"])
        form.addRow("Users (closed)", f["concurrency"])
        form.addRow("Think time", self.think_spin)
        form.addRow("Trace", trace_row)
        form.addRow("Trace speed", self.trace_speed_spin)
        form.addRow("Prompt tokens", f["prompt_len"])
        form.addRow("Output tokens", f["output_len"])
        form.addRow("Prompts", self.source_combo)
        form.addRow("Policy", self.policy_combo)
        form.addRow("Max batch", f["max_batch"])
        form.addRow("Chunk tokens", f["chunk_tokens"])
        form.addRow("  prefill workers", f["prefill_workers"])
        form.addRow("  decode workers", f["decode_workers"])
        form.addRow(self.compare_check)
        form.addRow("  also at dtype", f["compare_dtype"])
        form.addRow("  also chunk tokens", f["compare_chunk"])
        form.addRow(self.workload_error)
        self.preset_combo.currentIndexChanged.connect(self._apply_preset)
        self.open_workload_button.clicked.connect(self._open_workload_dialog)
        self.open_trace_button.clicked.connect(self._open_trace_dialog)
        self.trace_speed_spin.valueChanged.connect(self._field_changed)
        self.think_spin.valueChanged.connect(self._field_changed)
        for combo in (self.arrival_combo, self.source_combo, self.policy_combo):
            combo.currentIndexChanged.connect(self._field_changed)
        self.compare_check.toggled.connect(self._field_changed)
        return page

    def _sweep_batch_page(self) -> QtWidgets.QWidget:
        page = QtWidgets.QWidget()
        form = _form(page)
        f = self.fields["sweep-batch"] = {
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
        form = _form(page)
        f = self.fields["sweep-prompt"] = {
            "lengths": ValidatedField("32,64,128,256,512,1024", whole_list("prompt length")),
            "steps": ValidatedField("8", whole("timed prefills", 1, 10_000), tooltip="the point is their median"),
        }
        form.addRow("Prompt lengths", f["lengths"])
        form.addRow("Steps per point", f["steps"])
        return page

    def _sweep_precision_page(self) -> QtWidgets.QWidget:
        page = QtWidgets.QWidget()
        form = _form(page)
        f = self.fields["sweep-precision"] = {
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

    def _length_parser(self, key: str, name: str):
        parse = length(name)

        def check(text: str) -> str:
            if text.strip() == self._preset_lengths.get(key):
                return text.strip()
            return parse(text)
        return check

    # ---- reactions ---------------------------------------------------------------------------

    def _kind_changed(self) -> None:
        index = self.kind_combo.currentIndex()
        self.pages.setCurrentIndex(index)
        # a stack is as tall as its tallest page: let hidden pages take no room
        for i in range(self.pages.count()):
            policy = QtWidgets.QSizePolicy.Policy.Preferred if i == index else QtWidgets.QSizePolicy.Policy.Ignored
            self.pages.widget(i).setSizePolicy(policy, policy)
        self.pages.adjustSize()
        self._field_changed()

    def set_remote(self, remote: bool) -> None:
        """A remote server takes workloads only, and schedules them itself (no policy, batch or chunk here)."""
        self._remote = remote
        kinds = self.kind_combo.model()
        for i, (key, _) in enumerate(RUN_KINDS):
            kinds.item(i).setEnabled(not remote or key == "load")
        if remote:
            self.set_kind("load")
        self._field_changed()

    def _prompt_changed(self) -> None:
        has_text = bool(self.prompt_edit.toPlainText().strip())
        self.chat_check.setEnabled(has_text)
        self.fields["batch"]["prompt_len"].setEnabled(not has_text)
        self.changed.emit()

    def _apply_preset(self) -> None:
        name = self.preset_combo.currentText()
        if name == CUSTOM:   # the fields as they are, less a trace the last preset brought
            if self._preset_trace and self.fields["load"]["trace"].text() == self._preset_trace:
                self.fields["load"]["trace"].setText("")
            self._field_changed()
            return
        try:
            spec = load_workload(name)
        except InputError as exc:   # a file chosen earlier and broken since: the reason shows, Run waits
            self.inputRejected.emit(str(exc))
            self._field_changed()
            return
        self._preset_lengths = {"prompt_len": spec.prompt_len.describe(), "output_len": spec.output_len.describe()}
        f = self.fields["load"]
        f["requests"].setText("" if spec.num_requests is None else str(spec.num_requests))
        f["rate"].setText("" if spec.rate is None else f"{spec.rate:g}")
        f["burstiness"].setText(f"{spec.burstiness:g}")
        f["concurrency"].setText(str(spec.concurrency or 8))
        f["prompt_len"].setText(spec.prompt_len.describe())
        f["output_len"].setText(spec.output_len.describe())
        self.arrival_combo.setCurrentText(spec.arrival)
        self.source_combo.setCurrentText(spec.prompt_source)
        self.think_spin.setValue(getattr(spec, "think_ms", 0.0) or 0.0)
        self._preset_trace = getattr(spec, "trace", None) or ""   # a preset that replays a trace: its file
        f["trace"].setText(self._preset_trace)
        self.trace_speed_spin.setValue(getattr(spec, "trace_speed", 1.0))
        self._field_changed()

    def _field_changed(self, *_) -> None:
        f = self.fields["load"]
        traced = bool(f["trace"].text().strip())   # a trace's rows bring their own times and lengths
        self._show_trace_arrival(traced)
        arrival = self.arrival_combo.currentText()
        f["rate"].setEnabled(arrival in RATE_ARRIVALS and not traced)
        f["burstiness"].setEnabled(arrival == "gamma" and not traced)
        f["concurrency"].setEnabled(arrival == "closed" and not traced)
        f["prompt_len"].setEnabled(not traced)
        f["output_len"].setEnabled(not traced)
        self.think_spin.setEnabled(arrival == "closed" and not traced)
        self.trace_speed_spin.setEnabled(traced)
        f["requests"].edit.setPlaceholderText("all the trace's rows" if traced else "the preset's duration")
        compare = self.compare_check.isChecked() and not self._remote
        f["chunk_tokens"].setEnabled((self.policy_combo.currentText() in ("chunked", "disaggregated") or compare)
                                     and not self._remote)
        for name in ("prefill_workers", "decode_workers"):
            f[name].setEnabled((self.policy_combo.currentText() == "disaggregated" or compare) and not self._remote)
        self.compare_check.setEnabled(not self._remote)
        f["compare_dtype"].setEnabled(compare)
        f["compare_chunk"].setEnabled(compare)
        f["max_batch"].setEnabled(not self._remote)
        self.policy_combo.setEnabled(not self._remote)
        error = ""
        if self.kind() == "load" and not self._field_errors():
            try:
                self.workload()
            except InputError as exc:
                error = str(exc)
        self.workload_error.setText(error)
        self.workload_error.setVisible(bool(error))
        self.changed.emit()

    def open_workload(self, path: str) -> None:
        """Add a workload TOML file to the presets and select it; InputError (file and field) when malformed."""
        load_workload(path)   # refused here, before it becomes a choice
        index = self.preset_combo.findText(path)
        if index < 0:
            index = self.preset_combo.count() - 1   # before "custom"
            self.preset_combo.insertItem(index, path)
        self.preset_combo.setCurrentIndex(index)

    def _show_trace_arrival(self, traced: bool) -> None:
        """A trace brings its own arrival times: the Arrival list says so (empty, its placeholder) and
        gets its choice back when the trace is cleared."""
        combo = self.arrival_combo
        combo.setEnabled(not traced)
        combo.blockSignals(True)
        if traced and combo.currentIndex() >= 0:
            self._arrival_before_trace = combo.currentText()
            combo.setCurrentIndex(-1)
        elif not traced and combo.currentIndex() < 0:
            combo.setCurrentText(getattr(self, "_arrival_before_trace", "poisson"))
        combo.blockSignals(False)
        trace = self.fields["load"]["trace"]
        if traced and not trace.edit.hasFocus():
            trace.edit.setCursorPosition(len(trace.text()))   # the file's name, not its folders

    def open_trace(self, path: str) -> None:
        """Replay this trace file: the Trace field set to it, Requests emptied (all its rows)."""
        self.fields["load"]["requests"].setText("")
        self.fields["load"]["trace"].setText(path)

    def _open_trace_dialog(self) -> None:
        open_file(self, "Open a trace", "Trace (*.csv *.jsonl *.json);;All files (*)", self.open_trace,
                  self.inputRejected)

    def _open_workload_dialog(self) -> None:
        open_file(self, "Open a workload file", "Workload (*.toml)", self.open_workload, self.inputRejected)

    # ---- reading -----------------------------------------------------------------------------

    def kind(self) -> str:
        return self.kind_combo.currentData()

    def set_kind(self, kind: str) -> None:
        self.kind_combo.setCurrentIndex([k for k, _ in RUN_KINDS].index(kind))

    def _active_fields(self) -> list[ValidatedField]:
        page = self.fields[self.kind()]
        return [f for f in (*page.values(), *self.fields["sampling"].values(), *self.fields["shared"].values())
                if f.isEnabled()]

    def _field_errors(self) -> list[str]:
        return [f.error for f in self._active_fields() if f.error]

    def errors(self) -> list[str]:
        """Why the settings cannot run now (empty when they can)."""
        errors = self._field_errors()
        if not errors and self.workload_error.text():
            errors.append(self.workload_error.text())
        return errors

    def batch_run(self) -> BatchRun:
        f = self.fields["batch"]
        prompt = self.prompt_edit.toPlainText().strip() or None
        return BatchRun(prompt=prompt, chat=prompt is not None and self.chat_check.isChecked(),
                        prompt_len=f["prompt_len"].value or 128, output_len=f["output_len"].value,
                        batch=f["batch"].value)

    def engine(self) -> EngineConfig:
        f = self.fields["load"]
        return EngineConfig(policy=self.policy_combo.currentText(), max_batch=f["max_batch"].value or 32,
                            chunk_tokens=f["chunk_tokens"].value or 512,
                            prefill_workers=f["prefill_workers"].value or 1, decode_workers=f["decode_workers"].value or 1)

    def repeats(self) -> int:
        return self.fields["shared"]["repeats"].value or 1

    def compare_policies(self) -> bool:
        """Whether Run runs the workload under each policy (Compare policies, a local load run only)."""
        return self.kind() == "load" and not self._remote and self.compare_check.isChecked()

    def compare_engines(self, engine: EngineConfig) -> list[tuple[str, EngineConfig, str | None]]:
        """The runs of Compare policies, as (name, engine, dtype or None for the form's): each policy,
        then the Policy at the second dtype and chunked at the second chunk size where they are given."""
        f = self.fields["load"]
        runs = [(policy, replace(engine, policy=policy), None) for policy in COMPARED_POLICIES]
        if f["compare_dtype"].value:
            runs.append((f"{engine.policy} {f['compare_dtype'].value}", engine, f["compare_dtype"].value))
        if f["compare_chunk"].value and f["compare_chunk"].value != engine.chunk_tokens:
            runs.append((f"chunked {f['compare_chunk'].value}",
                         replace(engine, policy="chunked", chunk_tokens=f["compare_chunk"].value), None))
        return runs

    def sampling(self) -> SamplingConfig:
        f = self.fields["sampling"]
        return SamplingConfig(temperature=f["temperature"].value, seed=f["seed"].value,
                              ignore_eos=self.ignore_eos.isChecked())

    def workload(self) -> WorkloadSpec:
        """The preset with the fields as typed, as `load`'s flags override a workload file; InputError
        names the field that does not fit. A trace replaces the arrivals and lengths (--trace)."""
        f = self.fields["load"]
        name = self.preset_combo.currentText()
        base = WorkloadSpec(CUSTOM) if name == CUSTOM else load_workload(name)
        trace = self._trace_values()
        if trace.get("trace"):   # its rows' times and lengths; a count given with it takes the first rows
            return self._overridden(base, num_requests=f["requests"].value, prompt_source=self.source_combo.currentText(),
                                    seed=self.fields["sampling"]["seed"].value, **trace)
        arrival = self.arrival_combo.currentText()

        def typed_length(key):
            text = f[key].value
            return None if text == self._preset_lengths.get(key) and name != CUSTOM else text
        return self._overridden(
            base, num_requests=f["requests"].value, arrival=arrival,
            rate=f["rate"].value if arrival in RATE_ARRIVALS else None,
            burstiness=f["burstiness"].value if arrival == "gamma" else None,
            concurrency=f["concurrency"].value if arrival == "closed" else None,
            prompt_len=typed_length("prompt_len"), output_len=typed_length("output_len"),
            prompt_source=self.source_combo.currentText(), seed=self.fields["sampling"]["seed"].value, **trace)

    def _trace_values(self) -> dict:
        """--trace and --trace-speed, or --think-ms of a closed loop, as the form has them."""
        trace = self.fields["load"]["trace"].value
        if trace:
            values = {"trace": trace, "trace_speed": self.trace_speed_spin.value()}
        elif self.arrival_combo.currentText() == "closed":
            values = {"think_ms": self.think_spin.value()}
        else:
            values = {}
        return values

    @staticmethod
    def _overridden(base: WorkloadSpec, **flags) -> WorkloadSpec:
        """apply_overrides with the flags it takes (it checks them as the CLI's); the rest set on the spec."""
        known = inspect.signature(apply_overrides).parameters
        spec = apply_overrides(base, **{k: v for k, v in flags.items() if k in known})
        rest = {k: v for k, v in flags.items() if k not in known}
        return replace(spec, **rest) if rest else spec

    def sweep(self) -> SweepSpec | None:
        kind = self.kind()
        if kind == "sweep-batch":
            f = self.fields[kind]
            return SweepSpec(kind="batch", batches=sorted(set(f["batches"].value)), context=f["context"].value,
                             steps=f["steps"].value)
        if kind == "sweep-prompt":
            f = self.fields[kind]
            return SweepSpec(kind="prompt", lengths=sorted(set(f["lengths"].value)), steps=f["steps"].value)
        if kind == "sweep-precision":   # as the CLI's `sweep precision` builds it (cli.tools.sweep_config)
            f = self.fields[kind]
            return SweepSpec(kind="precision", steps=f["steps"].value, dtypes=list(f["dtypes"].value),
                             prompt_len=f["prompt_len"].value, output_len=f["output_len"].value,
                             batch=f["batch"].value)
        return None

    def prediction_context(self) -> int:
        """The context the throughput plot's decode prediction assumes for this run."""
        kind = self.kind()
        if kind == "sweep-batch" and self.fields["sweep-batch"]["context"].value:
            return self.fields["sweep-batch"]["context"].value
        if kind == "load" and not self.errors():
            spec = self.workload()
            return max(1, round(mean_length(spec.prompt_len) + mean_length(spec.output_len) / 2))
        f = self.fields["batch"]
        return max(1, (f["prompt_len"].value or 128) + (f["output_len"].value or 0) // 2)
