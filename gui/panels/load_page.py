"""The workload page: the settings of a `load` run (a preset, its arrivals, lengths and prompts, its
conversations' turns and shared system prompt, the scheduling policy and the SLOs), which the load
sweeps (`sweep rate`, `sweep concurrency`, `sweep pd-ratio`) run at each point of their axis, shown at
the page's top. Methods of RunForm."""
from __future__ import annotations

import inspect
from dataclasses import replace

from PySide6 import QtCore, QtWidgets

from backend.config import EngineConfig, RunKind
from backend.engine.scheduler import POLICIES
from backend.errors import InputError
from backend.workload.spec import (ARRIVALS, MAX_TOKENS, MAX_TURNS, PROMPT_SOURCES, RATE_ARRIVALS, LengthDist,
                                   WorkloadSpec, apply_overrides, list_workloads, load_workload)

from gui.panels.fields import MAX_BATCH, ValidatedField, length, number, open_file, whole
from gui.panels.sweep_pages import LOAD_SWEEPS, form_layout

CUSTOM = "custom"
# the window's first preset, as before trace presets sorted ahead of it (a 200-request trace of 1,000-token
# prompts is long for a first run on a CPU; poisson-chat's normal() lengths cannot be edited under "custom")
DEFAULT_PRESET = "burst-64"
COMPARED_POLICIES = ("static", "continuous", "chunked", "disaggregated")   # what Compare policies runs, in this order
FORM_POLICIES = (*POLICIES, "disaggregated")   # the scheduler's policies, and prefill and decode engine processes
# the window's prompts are real text unless the user asks for token ids (the presets' prompt_source is not
# applied: a newcomer's first workload should read as questions and answers, whatever its arrivals)
PROMPT_NOTES = {"text": "real prompts: the shipped questions and passages, fitted to the lengths",
                "synthetic": "random token ids: the same lengths and timing, but the generated text is noise"}
DEFAULT_PROMPTS = "text"


def mean_length(dist: LengthDist) -> float:
    return {"fixed": dist.value, "uniform": (dist.low + dist.high) / 2}.get(dist.kind, dist.mean)


def one_precision(text: str) -> str:
    """One precision (q8_0, bfloat16, ...) for Compare policies' "also at dtype"."""
    from backend.sweeps.parse import parse_dtypes
    try:
        names = parse_dtypes(text, "also at dtype")
    except InputError as exc:
        raise ValueError(str(exc)) from None
    if len(names) != 1:
        raise ValueError(f"also at dtype takes one precision, got {text.strip()!r}")
    return names[0]


def optional_ms(name: str):
    return number(name, 0.0, 1e7, low_inclusive=False)


class LoadPage:
    """Mixed into RunForm: uses its `fields`, `kind()`, `_remote`, `changed` and `inputRejected`."""

    def _load_page(self) -> QtWidgets.QWidget:
        page = QtWidgets.QWidget()
        form = form_layout(page)
        self.load_form = form
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
        self.source_combo.setObjectName("promptSourceCombo")
        self.source_combo.addItems(PROMPT_SOURCES)
        for i, key in enumerate(PROMPT_SOURCES):
            self.source_combo.setItemData(i, PROMPT_NOTES[key], QtCore.Qt.ItemDataRole.ToolTipRole)
        self.source_combo.setCurrentText(DEFAULT_PROMPTS)
        self.source_note = QtWidgets.QLabel()
        self.source_note.setObjectName("promptSourceNote")
        self.source_note.setWordWrap(True)
        self.source_note.setStyleSheet("color: #666;")
        self.policy_combo = QtWidgets.QComboBox()
        self.policy_combo.setObjectName("policyCombo")
        self.policy_combo.addItems(FORM_POLICIES)
        self.policy_combo.setCurrentText(EngineConfig().policy)
        # the KV cache (docs/kv-cache.md): paged with prefix caching, as vLLM, or the slots before paging
        self.kv_layout_combo = QtWidgets.QComboBox()
        self.kv_layout_combo.setObjectName("kvLayoutCombo")
        self.kv_layout_combo.addItems(["paged", "slots"])
        self.kv_layout_combo.setToolTip("--kv-layout: paged (blocks taken as tokens arrive, as vLLM) or slots "
                                        "(a whole-length slot reserved per request: the waste paging removes)")
        self.prefix_combo = QtWidgets.QComboBox()
        self.prefix_combo.setObjectName("prefixCachingCombo")
        self.prefix_combo.addItems(["on", "off"])
        self.prefix_combo.setToolTip("--prefix-caching: full blocks kept after their request and reused by a later "
                                     "prompt that starts the same (paged only)")
        f = self.fields["load"] = {
            "requests": ValidatedField("32", whole("requests", 1, 1_000_000), allow_empty=True,
                                       placeholder="the preset's duration"),
            "rate": ValidatedField("4", number("rate", 0.0, 1e6, low_inclusive=False), tooltip="requests per second"),
            "burstiness": ValidatedField("1", number("burstiness", 0.0, 1e3, low_inclusive=False),
                                         tooltip="gamma shape: below 1 burstier than Poisson"),
            "concurrency": ValidatedField("8", whole("users", 1, 100_000)),
            "prompt_len": ValidatedField("128", self._length_parser("prompt_len", "prompt length")),
            "output_len": ValidatedField("64", self._length_parser("output_len", "output length")),
            # the workloads that reuse KV (docs/kv-workloads.md): conversations and a shared system prompt
            "turns": ValidatedField("1", whole("turns", 1, MAX_TURNS),
                                    tooltip="--turns: requests a conversation sends, each turn's prompt the "
                                            "conversation so far plus a new message (Requests then counts "
                                            "conversations; Think time is the wait between turns)"),
            "turn_len": ValidatedField("", self._length_parser("turn_len", "turn length"), allow_empty=True,
                                       placeholder="as prompt tokens",
                                       tooltip="--turn-len: tokens of each later message (N or A:B; turns > 1)"),
            "shared_prefix_len": ValidatedField("0", whole("shared prefix", 0, MAX_TOKENS),
                                                tooltip="--shared-prefix-len: the first N tokens of every "
                                                        "conversation's first prompt are the same (a system "
                                                        "prompt)"),
            "max_batch": ValidatedField("32", whole("max batch", 1, MAX_BATCH)),
            "chunk_tokens": ValidatedField("512", whole("chunk tokens")),
            "kv_tokens": ValidatedField("", whole("KV tokens"), allow_empty=True, placeholder="every slot full length",
                                        tooltip="--kv-tokens: the KV cache's capacity in tokens"),
            "kv_block_size": ValidatedField("16", whole("KV block size", 1, 1 << 16),
                                            tooltip="--kv-block-size: tokens a block holds (a power of two)"),
            "prefill_workers": ValidatedField("1", whole("prefill workers", 1, 64),
                                              tooltip="disaggregated: engine processes (simulated: devices) "
                                                      "that run prompts only"),
            "decode_workers": ValidatedField("1", whole("decode workers", 1, 64),
                                             tooltip="disaggregated: engine processes (simulated: devices) "
                                                     "that run decode steps only, the prompts' KV handed to them"),
            "slo_ttft_ms": ValidatedField("", optional_ms("TTFT objective"), allow_empty=True, placeholder="none",
                                          tooltip="--slo-ttft-ms: goodput counts the requests whose TTFT meets it"),
            "slo_tpot_ms": ValidatedField("", optional_ms("TPOT objective"), allow_empty=True, placeholder="none",
                                          tooltip="--slo-tpot-ms: goodput counts the requests whose TPOT meets it"),
            "compare_dtype": ValidatedField("", one_precision, allow_empty=True, placeholder="none (e.g. q8_0)",
                                            tooltip="one more run: the Policy above at this precision"),
            "compare_chunk": ValidatedField("", whole("second chunk tokens"), allow_empty=True,
                                            placeholder="none (e.g. 128)",
                                            tooltip="one more run: chunked at this chunk size"),
        }
        self.fields["load-sweep"] = self._load_sweep_fields()
        trace_row = self._trace_widgets()
        # the policies in the tooltip: on the box itself they made the dock 400 pixels wide
        self.compare_check = QtWidgets.QCheckBox("Compare policies")
        self.compare_check.setObjectName("compareCheck")
        self.compare_check.setToolTip(f"Run runs the workload under each policy in turn ({', '.join(COMPARED_POLICIES)}), "
                                      "each saved to its own folder and added as a reference; Stop cancels the rest")
        self.workload_error = QtWidgets.QLabel()
        self.workload_error.setStyleSheet("color: #c0392b;")
        self.workload_error.setWordWrap(True)
        for key, label, _ in LOAD_SWEEPS.values():   # the axis of the load sweep chosen, above what it varies
            form.addRow(label, self.fields["load-sweep"][key])
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
        form.addRow("Turns", f["turns"])
        form.addRow("  later messages", f["turn_len"])
        form.addRow("Shared prefix", f["shared_prefix_len"])
        form.addRow("Prompts", self.source_combo)
        form.addRow(self.source_note)
        form.addRow("Policy", self.policy_combo)
        form.addRow("Max batch", f["max_batch"])
        form.addRow("Chunk tokens", f["chunk_tokens"])
        form.addRow("KV tokens", f["kv_tokens"])
        form.addRow("KV layout", self.kv_layout_combo)
        form.addRow("  block size", f["kv_block_size"])
        form.addRow("  prefix caching", self.prefix_combo)
        form.addRow("  prefill workers", f["prefill_workers"])
        form.addRow("  decode workers", f["decode_workers"])
        form.addRow("SLO TTFT (ms)", f["slo_ttft_ms"])
        form.addRow("SLO TPOT (ms)", f["slo_tpot_ms"])
        form.addRow(self.compare_check)
        form.addRow("  also at dtype", f["compare_dtype"])
        form.addRow("  also chunk tokens", f["compare_chunk"])
        form.addRow(self.workload_error)
        self.preset_combo.currentIndexChanged.connect(self._apply_preset)
        self.open_workload_button.clicked.connect(self._open_workload_dialog)
        for combo in (self.arrival_combo, self.source_combo, self.policy_combo, self.kv_layout_combo):
            combo.currentIndexChanged.connect(self._field_changed)
        self.compare_check.toggled.connect(self._field_changed)
        return page

    def _length_parser(self, key: str, name: str):
        parse = length(name)

        def check(text: str) -> str:
            if text.strip() == self._preset_lengths.get(key):
                return text.strip()
            return parse(text)
        return check

    def _field_changed(self, *_) -> None:
        f = self.fields["load"]
        kind = self.kind()
        for key_kind, (key, _, _) in LOAD_SWEEPS.items():
            self.load_form.setRowVisible(self.fields["load-sweep"][key], kind == key_kind)
            self.fields["load-sweep"][key].setEnabled(kind == key_kind)
        traced = bool(f["trace"].text().strip())   # a trace's rows bring their own times and lengths
        self._show_trace_arrival(traced)
        arrival = self.arrival_combo.currentText()
        f["rate"].setEnabled(arrival in RATE_ARRIVALS and not traced and kind is not RunKind.SWEEP_RATE)
        f["burstiness"].setEnabled(arrival == "gamma" and not traced)
        f["concurrency"].setEnabled(arrival == "closed" and not traced and kind is not RunKind.SWEEP_CONCURRENCY)
        f["prompt_len"].setEnabled(not traced)
        f["output_len"].setEnabled(not traced)
        conversation = self._turns() > 1
        for key in ("turns", "shared_prefix_len"):
            f[key].setEnabled(not traced)
        f["turn_len"].setEnabled(conversation and not traced)
        # a closed loop's users wait between requests, and a conversation's users between turns
        self.think_spin.setEnabled((arrival == "closed" or conversation) and not traced)
        self.trace_speed_spin.setEnabled(traced)
        f["requests"].edit.setPlaceholderText("all the trace's rows" if traced else "the preset's duration")
        self.source_note.setText(PROMPT_NOTES.get(self.source_combo.currentText(), ""))
        pd_ratio = kind is RunKind.SWEEP_PD_RATIO   # every split under the disaggregated policy: the sweep sets them
        compare = self.compare_check.isChecked() and not self._remote and kind is RunKind.LOAD
        policy = "disaggregated" if pd_ratio else self.policy_combo.currentText()
        f["chunk_tokens"].setEnabled((policy in ("chunked", "disaggregated") or compare) and not self._remote)
        for name in ("prefill_workers", "decode_workers"):
            f[name].setEnabled((policy == "disaggregated" or compare) and not self._remote and not pd_ratio)
        self.compare_check.setEnabled(not self._remote and kind is RunKind.LOAD)
        f["compare_dtype"].setEnabled(compare)
        f["compare_chunk"].setEnabled(compare)
        f["max_batch"].setEnabled(not self._remote)
        f["kv_tokens"].setEnabled(not self._remote)
        paged = self.kv_layout_combo.currentText() == "paged"
        self.kv_layout_combo.setEnabled(not self._remote)
        f["kv_block_size"].setEnabled(paged and not self._remote)
        self.prefix_combo.setEnabled(paged and not self._remote)   # every policy's engine caches prefixes
        self.policy_combo.setEnabled(not self._remote and not pd_ratio)
        error = ""
        if self.uses_workload() and not self._field_errors():
            try:
                self.workload()
            except InputError as exc:
                error = str(exc)
        self.workload_error.setText(error)
        self.workload_error.setVisible(bool(error))
        self.changed.emit()

    def uses_workload(self) -> bool:
        """A load run, or a load sweep (a load run at each point)."""
        return self.kind() is RunKind.LOAD or self.kind() in LOAD_SWEEPS

    def open_workload(self, path: str) -> None:
        """Add a workload TOML file to the presets and select it; InputError (file and field) when malformed."""
        load_workload(path)   # refused here, before it becomes a choice
        index = self.preset_combo.findText(path)
        if index < 0:
            index = self.preset_combo.count() - 1   # before "custom"
            self.preset_combo.insertItem(index, path)
        self.preset_combo.setCurrentIndex(index)

    def _open_workload_dialog(self) -> None:
        open_file(self, "Open a workload file", "Workload (*.toml)", self.open_workload, self.inputRejected)

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
        self._preset_lengths = {"prompt_len": spec.prompt_len.describe(), "output_len": spec.output_len.describe(),
                                "turn_len": spec.turn_len.describe() if spec.turn_len is not None else ""}
        f = self.fields["load"]
        f["requests"].setText("" if spec.num_requests is None else str(spec.num_requests))
        f["rate"].setText("" if spec.rate is None else f"{spec.rate:g}")
        f["burstiness"].setText(f"{spec.burstiness:g}")
        f["concurrency"].setText(str(spec.concurrency or 8))
        f["prompt_len"].setText(spec.prompt_len.describe())
        f["output_len"].setText(spec.output_len.describe())
        f["turns"].setText(str(spec.turns))
        f["turn_len"].setText(self._preset_lengths["turn_len"])
        f["shared_prefix_len"].setText(str(spec.shared_prefix_len))
        self.arrival_combo.setCurrentText(spec.arrival)
        self.think_spin.setValue(getattr(spec, "think_ms", 0.0) or 0.0)
        self._preset_trace = getattr(spec, "trace", None) or ""   # a preset that replays a trace: its file
        f["trace"].setText(self._preset_trace)
        self.trace_speed_spin.setValue(getattr(spec, "trace_speed", 1.0))
        self._field_changed()

    def workload(self) -> WorkloadSpec:
        """The preset with the fields as typed, as `load`'s flags override a workload file; InputError
        names the field that does not fit. A trace replaces the arrivals and lengths (--trace)."""
        f = self.fields["load"]
        name = self.preset_combo.currentText()
        base = WorkloadSpec(CUSTOM) if name == CUSTOM else load_workload(name)
        trace = self._trace_values()
        if trace.get("trace"):   # its rows' times and lengths; a count given with it takes the first rows
            # its rows are its requests: a preset's conversations do not apply (their rows are disabled)
            base = replace(base, turns=1, turn_len=None, shared_prefix_len=0, think_ms=0.0)
            return self._overridden(base, num_requests=f["requests"].value, prompt_source=self.source_combo.currentText(),
                                    seed=self.fields["sampling"]["seed"].value, **trace)
        arrival = self.arrival_combo.currentText()
        turns = self._turns()
        if turns == 1:   # no conversation: the preset's later messages and pause between turns do not apply
            base = replace(base, turn_len=None, think_ms=base.think_ms if arrival == "closed" else 0.0)

        def typed_length(key):
            text = f[key].value
            return None if text == self._preset_lengths.get(key) and name != CUSTOM else text
        return self._overridden(
            base, num_requests=f["requests"].value, arrival=arrival, turns=turns,
            turn_len=typed_length("turn_len") if turns > 1 else None,
            shared_prefix_len=f["shared_prefix_len"].value,
            rate=f["rate"].value if arrival in RATE_ARRIVALS else None,
            burstiness=f["burstiness"].value if arrival == "gamma" else None,
            concurrency=f["concurrency"].value if arrival == "closed" else None,
            prompt_len=typed_length("prompt_len"), output_len=typed_length("output_len"),
            prompt_source=self.source_combo.currentText(), seed=self.fields["sampling"]["seed"].value, **trace)

    def _turns(self) -> int:
        """--turns as typed (1 while the field holds no whole number: its own error shows)."""
        return self.fields["load"]["turns"].value or 1

    @staticmethod
    def _overridden(base: WorkloadSpec, **flags) -> WorkloadSpec:
        """apply_overrides with the flags it takes (it checks them as the CLI's); the rest set on the spec."""
        known = inspect.signature(apply_overrides).parameters
        spec = apply_overrides(base, **{k: v for k, v in flags.items() if k in known})
        rest = {k: v for k, v in flags.items() if k not in known}
        return replace(spec, **rest) if rest else spec

    def slo(self) -> tuple[float | None, float | None]:
        """--slo-ttft-ms and --slo-tpot-ms as typed (None: no objective)."""
        f = self.fields["load"]
        return f["slo_ttft_ms"].value, f["slo_tpot_ms"].value
