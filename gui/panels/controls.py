"""The controls dock: model, device, dtype, prefill math, GPU profile, what to run, and Run / Stop."""
from __future__ import annotations

from pathlib import Path

from PySide6 import QtCore, QtWidgets

from backend.config import ModelChoice, RunConfig, RunKind
from backend.loaders.device import available_devices, available_precisions, resolve_device
from backend.errors import InputError
from backend.kernels.matmath import MIN_ROWS, MODES
from backend.engine.threads import ThreadChoice, available_cores, window_choice
from backend.loaders.catalog import is_hub_id, list_models

from gui.panels.deployment import DeploymentBox
from gui.panels.fields import ValidatedField, open_file
from gui.panels.found_models import FoundModels
from gui.panels.elided_combo import elide_label
from gui.panels.profile_list import ProfileList
from gui.panels.remote_box import REMOTE, REMOTE_TITLE, RemoteBox
from gui.panels.run_form import RunForm
from gui.panels.sim_choices import check_deployment, check_sim_model, is_moe, sim_dtypes
from gui.panels.sim_models import CONFIG_FILE, SimModels
from gui.panels.sim_spec import SimSpecPricing

OPEN_FOLDER = "Open folder…"
PREFILL_MATH_TIP = (f"The CPU kernels' arithmetic for products of {min(MIN_ROWS.values())}+ rows (prefill, mixed steps, "
                    f"decode batches of {min(MIN_ROWS.values())}+):\n"
                    "bf16: bfloat16 products with float32 accumulation on the CPU's AVX512-BF16 or AMX unit; "
                    "fewer rows stay float32\n"
                    "fp32: float32 FMAs throughout\n"
                    "auto: bf16 where the CPU has such a unit and the model's logits stay within the fidelity bound "
                    "(mean KL and top-1 agreement against float32, measured at load), else fp32\n"
                    "Float32 and GGUF weights on the CPU only; the metrics panel shows which unit ran each phase. "
                    "`--prefill-math` headless.")


def hub_id_or_path(text: str) -> str:
    text = text.strip()
    if Path(text).expanduser().exists() or is_hub_id(text):
        return text
    raise ValueError(f"{text!r} is neither a hub id (owner/name) nor an existing folder or .gguf file")


class ControlsPanel(SimModels, RemoteBox, ProfileList, FoundModels, QtWidgets.QWidget):
    runRequested = QtCore.Signal()
    stopRequested = QtCore.Signal()
    calibrateRequested = QtCore.Signal(str)   # device
    fitRequested = QtCore.Signal(str)         # device: `calibrate --fit` (the standard runs, then the fit)
    choicesChanged = QtCore.Signal()          # model, device, dtype, profile or run settings
    inputRejected = QtCore.Signal(str)        # a chosen file that cannot be used (profile, workload), one line

    def __init__(self, parent=None):
        super().__init__(parent)
        self._running = False
        self._profile_paths: list[str] = []   # profile files the user opened, kept across reloads
        self.profile_problem = ""             # why this machine's measured profile is not listed
        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(self._model_group())
        self.deployment_box = DeploymentBox()
        layout.addWidget(self.deployment_box)
        self.sim_spec_box = SimSpecPricing()   # under Simulate, while the run form's proposer is on
        layout.addWidget(self.sim_spec_box)
        layout.addWidget(self._run_group())
        self.run_button = QtWidgets.QPushButton("Run")
        self.run_button.setObjectName("runButton")
        self.run_button.setToolTip("Run (Ctrl+R)")
        self.stop_button = QtWidgets.QPushButton("Stop")
        self.stop_button.setObjectName("stopButton")
        self.stop_button.setToolTip("Stop at the next step boundary (Esc)")
        buttons = QtWidgets.QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.stop_button)
        layout.addLayout(buttons)
        self.problem_label = QtWidgets.QLabel()
        self.problem_label.setStyleSheet("color: #c0392b;")
        self.problem_label.setWordWrap(True)
        layout.addWidget(self.problem_label)
        layout.addStretch(1)
        self.run_button.clicked.connect(self.runRequested)
        self.stop_button.clicked.connect(self.stopRequested)
        self.form.changed.connect(self._update)
        self.form.changed.connect(self.choicesChanged)
        self.form.inputRejected.connect(self.inputRejected)
        self.form.changed.connect(self._sync_deployment)
        self.form.kind_combo.currentIndexChanged.connect(self._kind_chosen)
        self.deployment_box.changed.connect(self._update)
        self.deployment_box.changed.connect(self.choicesChanged)
        self.form.changed.connect(self._show_sim_spec)
        self.sim_spec_box.changed.connect(self.choicesChanged)
        self._show_model_kind()

    # ---- building ----------------------------------------------------------------------------

    @staticmethod
    def _narrow(combo: QtWidgets.QComboBox) -> QtWidgets.QComboBox:
        """Long item names must not widen the dock: the combo elides them instead."""
        combo.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        combo.setMinimumContentsLength(10)
        return elide_label(combo)

    def _model_group(self) -> QtWidgets.QGroupBox:
        group = QtWidgets.QGroupBox("Model and device")
        form = QtWidgets.QFormLayout(group)
        form.setRowWrapPolicy(QtWidgets.QFormLayout.RowWrapPolicy.DontWrapRows)
        self.model_combo = QtWidgets.QComboBox()
        self.model_combo.setObjectName("modelCombo")
        for info in list_models():
            random = "random weights" in info.source
            self.model_combo.addItem(f"{info.name} ({'synthetic' if random else 'bundled'}, "
                                     f"{info.params / 1e6:,.0f}M)", info.name)
            self.model_combo.setItemData(self.model_combo.count() - 1, info.source, QtCore.Qt.ItemDataRole.ToolTipRole)
        self._add_local_models()
        self._add_sim_models()
        self.model_combo.addItem(REMOTE_TITLE, REMOTE)
        self.model_combo.setItemData(self.model_combo.count() - 1, "Drive a vLLM, SGLang, TGI or llama.cpp server "
                                     "with the workload", QtCore.Qt.ItemDataRole.ToolTipRole)
        self.model_combo.addItem(OPEN_FOLDER, None)
        self._model_index = 0
        self.hub_field = ValidatedField("", hub_id_or_path, allow_empty=True,
                                        placeholder="or a hub id (owner/name) / .gguf path",
                                        tooltip="When filled, this model is used instead of the list's")
        self.device_combo = QtWidgets.QComboBox()
        self.device_combo.setObjectName("deviceCombo")
        self.device_combo.addItems(available_devices())
        self.dtype_combo = QtWidgets.QComboBox()
        self.dtype_combo.setObjectName("dtypeCombo")
        self.math_combo = QtWidgets.QComboBox()
        self.math_combo.setObjectName("prefillMathCombo")
        self.math_combo.addItems(MODES)
        self.math_combo.setToolTip(PREFILL_MATH_TIP)
        self.threads_spin = QtWidgets.QSpinBox()
        self.threads_spin.setObjectName("threadsSpin")
        self.threads_spin.setRange(1, max(len(available_cores()), 1))
        self.show_thread_choice(window_choice())
        self.threads_spin.valueChanged.connect(self._threads_edited)
        self.profile_combo = QtWidgets.QComboBox()
        self.profile_combo.setObjectName("profileCombo")
        self.calibrate_button = QtWidgets.QPushButton("Calibrate…")
        self.calibrate_button.setToolTip("Measure this machine's FLOP/s and bandwidth into a profile (`calibrate`)")
        self.fit_button = QtWidgets.QPushButton("Fit cost model…")
        self.fit_button.setObjectName("fitButton")
        self.fit_button.setToolTip("Measure three short runs of the bundled model (a batch sweep, a prompt sweep, a "
                                   "Poisson workload), fit the simulator's cost model to their steps and store it in "
                                   "this machine's profile; the error on each run left out of the fit is shown "
                                   "(`calibrate --fit`)")
        self.open_profile_button = QtWidgets.QPushButton("Open…")
        self.open_profile_button.setObjectName("openProfileButton")
        self.open_profile_button.setToolTip("Use a GPU profile TOML file of your own")
        # the buttons under the list, not beside it: side by side they widen the dock past its width
        profile_buttons = QtWidgets.QHBoxLayout()
        profile_buttons.addWidget(self.open_profile_button)
        profile_buttons.addWidget(self.calibrate_button)
        fit_row = QtWidgets.QHBoxLayout()   # a third button beside them clips the dock's narrowest width
        fit_row.addWidget(self.fit_button)
        fit_row.addStretch(1)
        self.simulate_check = QtWidgets.QCheckBox("Simulate on this profile")
        self.simulate_check.setObjectName("simulateCheck")
        self.simulate_check.setToolTip("No model is run: the real scheduler and workload, each step's time priced on "
                                       "the profile by its cost model, on a virtual clock (a known shape such as "
                                       "llama-8b; `--simulate --profile NAME` headless)")
        for combo in (self.model_combo, self.device_combo, self.dtype_combo, self.math_combo, self.profile_combo):
            self._narrow(combo)
        form.addRow("Model", self.model_combo)
        form.addRow("", self.hub_field)
        self.remote_box = self._remote_box()
        form.addRow(self.remote_box)
        form.addRow("Device", self.device_combo)
        form.addRow("Dtype", self.dtype_combo)
        form.addRow("Prefill math", self.math_combo)
        form.addRow("Threads", self.threads_spin)
        form.addRow("GPU profile", self.profile_combo)
        form.addRow("", profile_buttons)
        form.addRow("", fit_row)
        form.addRow("", self.simulate_check)
        self.model_form = form
        self.reload_profiles()
        self._device_changed()
        self.model_combo.activated.connect(self._model_activated)
        self.model_combo.currentIndexChanged.connect(self._show_model_kind)
        self.model_combo.currentIndexChanged.connect(self.choicesChanged)
        self.hub_field.valueChanged.connect(self._update)
        self.hub_field.valueChanged.connect(self.choicesChanged)
        self.hub_field.valueChanged.connect(self._sync_deployment)
        self.device_combo.currentIndexChanged.connect(self._device_changed)
        self.dtype_combo.currentIndexChanged.connect(self.choicesChanged)
        self.math_combo.currentIndexChanged.connect(self.choicesChanged)
        self.profile_combo.currentIndexChanged.connect(self.choicesChanged)
        self.simulate_check.toggled.connect(self._show_model_kind)
        self.simulate_check.toggled.connect(self.choicesChanged)
        self.calibrate_button.clicked.connect(lambda: self.calibrateRequested.emit(self.device_combo.currentText()))
        self.fit_button.clicked.connect(lambda: self.fitRequested.emit(self.device_combo.currentText()))
        self.open_profile_button.clicked.connect(self._open_profile_dialog)
        return group


    def _run_group(self) -> QtWidgets.QGroupBox:
        group = QtWidgets.QGroupBox("What to run")
        layout = QtWidgets.QVBoxLayout(group)
        self.form = RunForm()
        layout.addWidget(self.form)
        return group

    # ---- reactions ---------------------------------------------------------------------------

    def _show_model_kind(self) -> None:
        """A remote server needs its URL and names, not a device or dtype, and runs workloads only."""
        remote = self.is_remote()
        form = self.model_form
        form.setRowVisible(self.hub_field, not remote)
        form.setRowVisible(self.remote_box, remote)
        simulated = self.is_simulated()
        form.setRowVisible(self.device_combo, not remote and not simulated)
        form.setRowVisible(self.dtype_combo, not remote)
        form.setRowVisible(self.math_combo, not remote and not simulated)   # the CPU kernels' arithmetic
        form.setRowVisible(self.threads_spin, not remote and not simulated)
        form.setRowVisible(self.simulate_check, not remote)
        self._show_sim_models(simulated)
        self._fill_dtypes()
        self.deployment_box.setVisible(simulated)
        self._show_sim_spec()
        self.form.set_remote(remote)
        self._sync_deployment()
        self._update()

    def _show_sim_spec(self) -> None:
        """The simulator's pricing of guesses takes part in a simulated run that speculates."""
        self.sim_spec_box.setVisible(self.is_simulated() and self.form.spec_combo.currentText() != "off")

    def _kind_chosen(self) -> None:
        """A prefill:decode split sweep is simulated (as `sweep pd-ratio` is): choosing it ticks Simulate."""
        if self.form.kind() is RunKind.SWEEP_PD_RATIO and not self.is_remote():
            self.simulate_check.setChecked(True)

    def _model_activated(self, index: int) -> None:
        if self.model_combo.itemData(index) == CONFIG_FILE:
            self.model_combo.setCurrentIndex(self._model_index)
            open_file(self, "Open a model's config.json", "Model config (*.json)", self.open_model_config,
                      self.inputRejected)
            return
        if self.model_combo.itemData(index) is not None:
            self._model_index = index
            return
        folder = QtWidgets.QFileDialog.getExistingDirectory(self, "Open a model folder, or a folder of models")
        if folder:
            self.open_model_folder(folder)
        else:
            self.model_combo.setCurrentIndex(self._model_index)

    def _device_changed(self) -> None:
        device = resolve_device(self.device_combo.currentText())
        self._fill_dtypes()
        self._preselect_profile(device)
        self.choicesChanged.emit()

    def _fill_dtypes(self) -> None:
        """The device's precisions; under Simulate every precision the simulator names (fp8, nvfp4, ...)."""
        names = sim_dtypes() if self.is_simulated() else [
            "auto", *available_precisions(resolve_device(self.device_combo.currentText()))]
        if names == [self.dtype_combo.itemText(i) for i in range(self.dtype_combo.count())]:
            return
        current = self.dtype_combo.currentText()
        self.dtype_combo.blockSignals(True)
        self.dtype_combo.clear()
        self.dtype_combo.addItems(names)
        self.dtype_combo.setCurrentText(current if current in names else "auto")
        self.dtype_combo.blockSignals(False)
        self.dtype_combo.setToolTip("--dtype under --simulate: fp8 (E4M3 weights and activations), nvfp4 and "
                                    "mxfp4 (Blackwell profiles), int8 weight-only; a precision the profile "
                                    "cannot run is refused in one line" if self.is_simulated() else "")

    def _sync_deployment(self) -> None:
        """The deployment box follows the policy (the pools' TP) and the model (EP for an MoE)."""
        if not self.is_simulated():
            return
        form = self.form
        policy = "disaggregated" if form.kind() is RunKind.SWEEP_PD_RATIO else form.policy_combo.currentText()
        self.deployment_box.set_policy(policy if form.uses_workload() else "")
        shape, _ = check_sim_model(self.model_name() or "")
        self.deployment_box.set_moe(is_moe(shape))

    def _update(self) -> None:
        problems = self.errors()
        self.problem_label.setText("Cannot run yet: " + problems[0] if problems else "")
        self.problem_label.setVisible(bool(problems))
        self.run_button.setEnabled(not self._running and not problems)
        # a precision sweep loads the model at each of its own precisions
        self.dtype_combo.setEnabled(not self._running and self.form.kind() is not RunKind.SWEEP_PRECISION)
        self.stop_button.setEnabled(self._running)

    # ---- public ------------------------------------------------------------------------------

    def errors(self) -> list[str]:
        if self.form.kind() is RunKind.SWEEP_PD_RATIO and not self.is_simulated():
            return ["a prefill:decode split sweep is simulated: tick Simulate on this profile"]
        if self.is_simulated():
            errors = [self.hub_field.error] if self.hub_field.error else []
            if not errors:
                shape, problem = check_sim_model(self.model_name() or "")
                problem = problem or check_deployment(self.deployment_box.deployment(), shape, self.model_name())
                errors += [problem] if problem else []
            return errors + self.form.errors()
        if not self.is_remote():
            return ([self.hub_field.error] if self.hub_field.error else []) + self.form.errors()
        errors = [f.error for f in (self.url_field, self.served_field, self.timeout_field) if f.error]
        if self.api_combo.currentText() == "chat" and self.form.source_combo.currentText() != "text":
            errors.append("the chat API sends text: set Prompts to text, or use the completions API")
        return errors + self.form.errors()

    def set_running(self, running: bool) -> None:
        self._running = running
        for widget in (self.model_combo, self.hub_field, self.remote_box, self.device_combo, self.dtype_combo,
                       self.math_combo, self.threads_spin, self.profile_combo, self.open_profile_button, self.calibrate_button,
                       self.fit_button, self.simulate_check, self.deployment_box, self.sim_spec_box, self.form):
            widget.setEnabled(not running)
        self._update()

    def is_remote(self) -> bool:
        return self.model_combo.currentData() == REMOTE

    def is_simulated(self) -> bool:
        return self.simulate_check.isChecked() and not self.is_remote()


    def model_name(self) -> str:
        if self.is_remote():
            return self.served_field.value or ""
        typed = self.hub_field.value
        return typed if typed else self.model_combo.currentData()


    def show_thread_choice(self, choice: ThreadChoice) -> None:
        """The engine's threads (the machine's default, or `--threads`), and why, in the field's tooltip."""
        self.thread_choice = choice
        self.threads_spin.setValue(choice.threads or 1)
        self.threads_spin.setToolTip(f"CPU threads the engine process takes, pinned to as many cores.\n"
                                     f"{choice.describe()}: {choice.reason}.\n"
                                     f"`--threads N` runs the same headless; `main.py --threads N` opens the "
                                     f"window with N.")

    def _threads_edited(self, count: int) -> None:
        if count != self.thread_choice.threads:   # the user's own count: say so, and why no longer the default
            default = window_choice()
            self.show_thread_choice(default if count == default.threads else window_choice(count))

    def select_model(self, name: str) -> None:
        """Pick a listed model by name, or else use the name as a hub id or path."""
        for i in range(self.model_combo.count()):
            if self.model_combo.itemData(i) == name:
                self.model_combo.setCurrentIndex(i)
                self._model_index = i
                self.hub_field.setText("")
                return
        self.hub_field.setText(name)

    def build_config(self) -> RunConfig:
        """The settings as a RunConfig; InputError with the first problem when they cannot run."""
        problems = self.errors()
        if problems:
            raise InputError(problems[0])
        kind = self.form.kind()
        config = RunConfig(mode=kind, model=ModelChoice(self.model_name(), self.device_combo.currentText(),
                                                        self.dtype_combo.currentText(), self.math_combo.currentText()),
                           sampling=self.form.sampling(), engine=self.form.engine(), batch=self.form.batch_run(),
                           workload=self.form.workload() if self.form.uses_workload() else None,
                           sweep=self.form.sweep(), profile=self.profile_combo.currentData(),
                           threads=self.threads_spin.value(), repeats=self.form.repeats(), spec=self.form.spec())
        config.slo_ttft_ms, config.slo_tpot_ms = self.form.slo() if self.form.uses_workload() else (None, None)
        if self.is_simulated():
            config.simulate = True
            config.model = ModelChoice(self.model_name(), "auto", self.dtype_combo.currentText())
            config.threads = None   # nothing runs on this machine's cores but the scheduler
            config.deployment = self.deployment_box.deployment()
            if config.spec.is_on:
                config.spec = self.sim_spec_box.priced(config.spec)
        if self.is_remote():
            # the backend's execute sends the workload to the server when the config names one
            config.model = ModelChoice(self.model_name())
            config.endpoint = self.endpoint()
            config.threads = None   # the server's threads are not ours to set
        return config
