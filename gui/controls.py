"""The controls dock: model, device, dtype, GPU profile, what to run, and Run / Stop."""
from __future__ import annotations

import re
from pathlib import Path

from PySide6 import QtCore, QtWidgets

from backend.config import ModelChoice, RunConfig
from backend.device import available_devices, available_dtypes, device_name, resolve_device
from backend.errors import InputError
from backend.profiles import GpuProfile, LOCAL_KEY, find_profile, list_profiles, match_profile
from backend.weights import list_models

from .fields import ValidatedField
from .run_form import RunForm

OPEN_FOLDER = "Open folder…"
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def hub_id_or_path(text: str) -> str:
    text = text.strip()
    if Path(text).expanduser().exists() or (_HUB_ID.fullmatch(text) and not text.lower().endswith(".gguf")):
        return text
    raise ValueError(f"{text!r} is neither a hub id (owner/name) nor an existing folder or .gguf file")


class ControlsPanel(QtWidgets.QWidget):
    runRequested = QtCore.Signal()
    stopRequested = QtCore.Signal()
    calibrateRequested = QtCore.Signal(str)   # device
    choicesChanged = QtCore.Signal()          # model, device, dtype, profile or run settings

    def __init__(self, parent=None):
        super().__init__(parent)
        self._running = False
        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(self._model_group())
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
        self._update()

    # ---- building ----------------------------------------------------------------------------

    @staticmethod
    def _narrow(combo: QtWidgets.QComboBox) -> QtWidgets.QComboBox:
        """Long item names must not widen the dock: the combo elides them instead."""
        combo.setSizeAdjustPolicy(QtWidgets.QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        combo.setMinimumContentsLength(10)
        return combo

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
        self.profile_combo = QtWidgets.QComboBox()
        self.profile_combo.setObjectName("profileCombo")
        self.calibrate_button = QtWidgets.QPushButton("Calibrate…")
        self.calibrate_button.setToolTip("Measure this machine's FLOP/s and bandwidth into a profile")
        profile_row = QtWidgets.QHBoxLayout()
        profile_row.addWidget(self.profile_combo, 1)
        profile_row.addWidget(self.calibrate_button)
        for combo in (self.model_combo, self.device_combo, self.dtype_combo, self.profile_combo):
            self._narrow(combo)
        form.addRow("Model", self.model_combo)
        form.addRow("", self.hub_field)
        form.addRow("Device", self.device_combo)
        form.addRow("Dtype", self.dtype_combo)
        form.addRow("GPU profile", profile_row)
        self.reload_profiles()
        self._device_changed()
        self.model_combo.activated.connect(self._model_activated)
        self.model_combo.currentIndexChanged.connect(self.choicesChanged)
        self.hub_field.valueChanged.connect(self._update)
        self.hub_field.valueChanged.connect(self.choicesChanged)
        self.device_combo.currentIndexChanged.connect(self._device_changed)
        self.dtype_combo.currentIndexChanged.connect(self.choicesChanged)
        self.profile_combo.currentIndexChanged.connect(self.choicesChanged)
        self.calibrate_button.clicked.connect(lambda: self.calibrateRequested.emit(self.device_combo.currentText()))
        return group

    def _run_group(self) -> QtWidgets.QGroupBox:
        group = QtWidgets.QGroupBox("What to run")
        layout = QtWidgets.QVBoxLayout(group)
        self.form = RunForm()
        layout.addWidget(self.form)
        return group

    # ---- reactions ---------------------------------------------------------------------------

    def _model_activated(self, index: int) -> None:
        if self.model_combo.itemData(index) is not None:
            self._model_index = index
            return
        folder = QtWidgets.QFileDialog.getExistingDirectory(self, "Open a Hugging Face model folder")
        if folder:
            self.add_model_path(folder)
        else:
            self.model_combo.setCurrentIndex(self._model_index)

    def add_model_path(self, path: str) -> None:
        """Add a folder or file to the model list and select it."""
        index = self.model_combo.count() - 1   # before "Open folder…"
        self.model_combo.insertItem(index, Path(path).name or path, path)
        self.model_combo.setItemData(index, path, QtCore.Qt.ItemDataRole.ToolTipRole)
        self.model_combo.setCurrentIndex(index)
        self._model_index = index

    def _device_changed(self) -> None:
        device = resolve_device(self.device_combo.currentText())
        current = self.dtype_combo.currentText()
        self.dtype_combo.blockSignals(True)
        self.dtype_combo.clear()
        self.dtype_combo.addItems(["auto", *available_dtypes(device)])
        self.dtype_combo.setCurrentText(current if current else "auto")
        self.dtype_combo.blockSignals(False)
        self._preselect_profile(device)
        self.choicesChanged.emit()

    def _preselect_profile(self, device) -> None:
        """The profile matching a CUDA device's name; on a CPU this machine's measured one, else the generic CPU."""
        profile = match_profile(device_name(device)) if device.type == "cuda" else None
        keys = [self.profile_combo.itemData(i) for i in range(self.profile_combo.count())]
        if profile is None:
            profile_key = LOCAL_KEY if LOCAL_KEY in keys else "cpu"
        else:
            profile_key = profile.key
        if profile_key in keys:
            self.profile_combo.setCurrentIndex(keys.index(profile_key))

    def reload_profiles(self) -> None:
        """Fill the profile list (again after calibration adds this machine's)."""
        current = self.profile_combo.currentData()
        self.profile_combo.blockSignals(True)
        self.profile_combo.clear()
        for p in list_profiles():
            self.profile_combo.addItem(f"{p.name} (measured)" if p.measured else p.name, p.key)
            self.profile_combo.setItemData(self.profile_combo.count() - 1, p.source, QtCore.Qt.ItemDataRole.ToolTipRole)
        if current is not None:
            self.select_profile(current)
        self.profile_combo.blockSignals(False)

    def _update(self) -> None:
        problems = self.errors()
        self.problem_label.setText("Cannot run yet: " + problems[0] if problems else "")
        self.problem_label.setVisible(bool(problems))
        self.run_button.setEnabled(not self._running and not problems)
        self.stop_button.setEnabled(self._running)

    # ---- public ------------------------------------------------------------------------------

    def errors(self) -> list[str]:
        return ([self.hub_field.error] if self.hub_field.error else []) + self.form.errors()

    def set_running(self, running: bool) -> None:
        self._running = running
        for widget in (self.model_combo, self.hub_field, self.device_combo, self.dtype_combo, self.profile_combo,
                       self.calibrate_button, self.form):
            widget.setEnabled(not running)
        self._update()

    def model_name(self) -> str:
        typed = self.hub_field.value
        return typed if typed else self.model_combo.currentData()

    def select_model(self, name: str) -> None:
        """Pick a listed model by name, or else use the name as a hub id or path."""
        for i in range(self.model_combo.count()):
            if self.model_combo.itemData(i) == name:
                self.model_combo.setCurrentIndex(i)
                self._model_index = i
                self.hub_field.setText("")
                return
        self.hub_field.setText(name)

    def select_profile(self, name: str) -> None:
        """A profile by key or display name; InputError when there is none."""
        for i in range(self.profile_combo.count()):
            if name.lower() in (str(self.profile_combo.itemData(i)).lower(), self.profile_combo.itemText(i).lower()):
                self.profile_combo.setCurrentIndex(i)
                return
        known = ", ".join(str(self.profile_combo.itemData(i)) for i in range(self.profile_combo.count()))
        raise InputError(f"unknown profile {name!r} (known: {known})")

    def profile(self) -> GpuProfile:
        return find_profile(self.profile_combo.currentData())

    def build_config(self) -> RunConfig:
        """The settings as a RunConfig; InputError with the first problem when they cannot run."""
        problems = self.errors()
        if problems:
            raise InputError(problems[0])
        kind = self.form.kind()
        return RunConfig(mode=kind, model=ModelChoice(self.model_name(), self.device_combo.currentText(),
                                                      self.dtype_combo.currentText()),
                         sampling=self.form.sampling(), engine=self.form.engine(), batch=self.form.batch_run(),
                         workload=self.form.workload() if kind == "load" else None, sweep=self.form.sweep(),
                         profile=self.profile_combo.currentData())
