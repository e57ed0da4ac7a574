"""What to run: one batch, a workload through the load driver, or a sweep; and sampling settings.

Every run kind is a page of label-and-field rows in one stack: the batch page, the workload page
(gui/panels/load_page.py, which the load sweeps share with their axis on top), and the step
sweeps' pages (gui/panels/sweep_pages.py)."""
from __future__ import annotations

from dataclasses import replace

from PySide6 import QtCore, QtWidgets

from backend.config import BatchRun, EngineConfig, RunKind, SamplingConfig

from gui.panels.fields import MAX_BATCH, ValidatedField, number, whole
from gui.panels.load_page import COMPARED_POLICIES, CUSTOM, LoadPage, mean_length
from gui.panels.sweep_pages import LOAD_SWEEPS, SweepPages, form_layout
from gui.panels.trace_rows import TraceRows

RUN_KINDS = (
    (RunKind.BATCH, "One batch: prefill, then decode"),
    (RunKind.LOAD, "Workload through the load driver"),
    (RunKind.SWEEP_BATCH, "Batch-size sweep (decode)"),
    (RunKind.SWEEP_PROMPT, "Prompt-length sweep (prefill)"),
    (RunKind.SWEEP_PRECISION, "Precision sweep (bytes per weight)"),
    (RunKind.SWEEP_RATE, "Rate sweep (per device vs per user)"),
    (RunKind.SWEEP_CONCURRENCY, "Concurrency sweep (closed-loop users)"),
    (RunKind.SWEEP_PD_RATIO, "Prefill:decode split sweep (simulated)"),
    (RunKind.SWEEP_DEPTH, "Depth sweep (prefill and decode vs context)"),
)
# each kind's page in the stack (the load sweeps show the workload page) and its field groups
PAGE_OF = {RunKind.BATCH: 0, RunKind.LOAD: 1, RunKind.SWEEP_BATCH: 2, RunKind.SWEEP_PROMPT: 3,
           RunKind.SWEEP_PRECISION: 4, RunKind.SWEEP_DEPTH: 5, **{kind: 1 for kind in LOAD_SWEEPS}}
# a remote server runs workloads: one load run, or one a point (a split sweep is simulated); and depth sweeps
REMOTE_KINDS = (RunKind.LOAD, RunKind.SWEEP_RATE, RunKind.SWEEP_CONCURRENCY, RunKind.SWEEP_DEPTH)
MAX_REPEATS = 1000
# the first run of a session: a real question, as a chat message, so the Generated text reads as an answer
DEFAULT_PROMPT = "Why is the sky blue? Answer in two or three sentences."
SYNTHETIC_NOTE = ("random token ids of the length below: a real prompt's speed, but the generated text is noise "
                  "(`--prompt-len N` headless)")
__all__ = ["RunForm", "RUN_KINDS", "CUSTOM", "COMPARED_POLICIES"]


class RunForm(LoadPage, TraceRows, SweepPages, QtWidgets.QWidget):
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
        self.pages.addWidget(self._sweep_depth_page())
        self.fields["sampling"] = {
            "temperature": ValidatedField("0", number("temperature", 0.0, 10.0), tooltip="0 is greedy"),
            "top_p": ValidatedField("1", number("top-p", 0.0, 1.0, low_inclusive=False),
                                    tooltip="nucleus sampling: the smallest set of tokens whose probability "
                                            "reaches this (1: all of them; with temperature above 0)"),
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
        form_layout(shared).addRow("Repeats", self.fields["shared"]["repeats"])
        layout.addWidget(shared)
        sampling = QtWidgets.QGroupBox("Sampling")
        form = form_layout(sampling)
        form.addRow("Temperature", self.fields["sampling"]["temperature"])
        form.addRow("Top-p", self.fields["sampling"]["top_p"])
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
        form = form_layout(page)
        self.prompt_edit = QtWidgets.QPlainTextEdit(DEFAULT_PROMPT)
        self.prompt_edit.setObjectName("promptEdit")
        self.prompt_edit.setPlaceholderText("Prompt text (empty: random prompt tokens of the length below)")
        self.prompt_edit.setFixedHeight(60)
        self.chat_check = QtWidgets.QCheckBox("apply the model's chat template")
        self.chat_check.setObjectName("chatCheck")
        self.chat_check.setChecked(True)
        self.chat_check.setToolTip("The prompt as a user's message in the model's own chat format, so an "
                                   "instruction-tuned model answers it (`--chat` headless)")
        self.synthetic_check = QtWidgets.QCheckBox("random prompt tokens instead (synthetic)")
        self.synthetic_check.setObjectName("syntheticCheck")
        self.synthetic_check.setToolTip(SYNTHETIC_NOTE)
        self.synthetic_note = QtWidgets.QLabel(SYNTHETIC_NOTE)
        self.synthetic_note.setWordWrap(True)
        self.synthetic_note.setStyleSheet("color: #666;")
        f = self.fields["batch"] = {
            "prompt_len": ValidatedField("128", whole("prompt length")),
            "output_len": ValidatedField("64", whole("output length")),
            "batch": ValidatedField("1", whole("batch size", 1, MAX_BATCH)),
        }
        form.addRow(self.prompt_edit)
        form.addRow(self.chat_check)
        form.addRow(self.synthetic_check)
        form.addRow(self.synthetic_note)
        form.addRow("Prompt tokens", f["prompt_len"])
        form.addRow("Output tokens", f["output_len"])
        form.addRow("Batch size", f["batch"])
        self.batch_form = form
        self.prompt_edit.textChanged.connect(self._prompt_changed)
        self.synthetic_check.toggled.connect(self._prompt_changed)
        self._prompt_changed()
        return page

    def use_synthetic_prompt(self, synthetic: bool = True) -> None:
        """One batch of random prompt tokens (the length in Prompt tokens) instead of the prompt text."""
        self.synthetic_check.setChecked(synthetic)

    def is_synthetic_prompt(self) -> bool:
        return self.synthetic_check.isChecked() or not self.prompt_edit.toPlainText().strip()

    # ---- reactions ---------------------------------------------------------------------------

    def _kind_changed(self) -> None:
        index = PAGE_OF[self.kind()]
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
            kinds.item(i).setEnabled(not remote or key in REMOTE_KINDS)
        if remote and self.kind() not in REMOTE_KINDS:
            self.set_kind(RunKind.LOAD)
        self._field_changed()

    def _prompt_changed(self) -> None:
        synthetic = self.is_synthetic_prompt()
        self.prompt_edit.setEnabled(not self.synthetic_check.isChecked())
        self.chat_check.setEnabled(not synthetic)
        self.fields["batch"]["prompt_len"].setEnabled(synthetic)
        self.batch_form.setRowVisible(self.synthetic_note, synthetic)
        self.changed.emit()

    # ---- reading -----------------------------------------------------------------------------

    def kind(self) -> RunKind:
        return RunKind(self.kind_combo.currentData())   # Qt hands the item's data back as a plain str

    def set_kind(self, kind: RunKind | str) -> None:
        self.kind_combo.setCurrentIndex([k for k, _ in RUN_KINDS].index(RunKind(kind)))

    def _active_fields(self) -> list[ValidatedField]:
        kind = self.kind()
        groups = ["load", "load-sweep"] if kind in LOAD_SWEEPS else [kind]
        page = [f for group in groups for f in self.fields[group].values()]
        return [f for f in (*page, *self.fields["sampling"].values(), *self.fields["shared"].values())
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
        prompt = None if self.is_synthetic_prompt() else self.prompt_edit.toPlainText().strip()
        return BatchRun(prompt=prompt, chat=prompt is not None and self.chat_check.isChecked(),
                        prompt_len=f["prompt_len"].value or 128, output_len=f["output_len"].value,
                        batch=f["batch"].value)

    def engine(self) -> EngineConfig:
        f = self.fields["load"]
        policy, paged = self.policy_combo.currentText(), self.kv_layout_combo.currentText() == "paged"
        # on: the default (None: paged with prefix caching, for every policy Compare policies runs)
        caching = None if paged and self.prefix_combo.currentText() == "on" else False
        return EngineConfig(policy=policy, max_batch=f["max_batch"].value or 32,
                            chunk_tokens=f["chunk_tokens"].value or 512, kv_tokens=f["kv_tokens"].value,
                            prefill_workers=f["prefill_workers"].value or 1, decode_workers=f["decode_workers"].value or 1,
                            kv_layout=self.kv_layout_combo.currentText(), kv_block_size=f["kv_block_size"].value or 16,
                            prefix_caching=caching)

    def repeats(self) -> int:
        return self.fields["shared"]["repeats"].value or 1

    def compare_policies(self) -> bool:
        """Whether Run runs the workload under each policy (Compare policies, a local load run only)."""
        return self.kind() is RunKind.LOAD and not self._remote and self.compare_check.isChecked()

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
        return SamplingConfig(temperature=f["temperature"].value, top_p=f["top_p"].value, seed=f["seed"].value,
                              ignore_eos=self.ignore_eos.isChecked())

    def prediction_context(self) -> int:
        """The context the throughput plot's decode prediction assumes for this run."""
        kind = self.kind()
        if kind is RunKind.SWEEP_BATCH and self.fields[kind]["context"].value:
            return self.fields[kind]["context"].value
        if self.uses_workload() and not self.errors():
            spec = self.workload()
            return max(1, round(mean_length(spec.prompt_len) + mean_length(spec.output_len) / 2))
        f = self.fields["batch"]
        return max(1, (f["prompt_len"].value or 128) + (f["output_len"].value or 0) // 2)
