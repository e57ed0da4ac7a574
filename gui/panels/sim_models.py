"""The model list's simulated-only entries: the shipped model configs (llama-3.1-70b, deepseek-v3, ...)
and a config.json picker, listed only while Simulate is on (`--simulate --model CONFIG`). Methods of
ControlsPanel."""
from __future__ import annotations

from pathlib import Path

from PySide6 import QtCore

from backend.errors import InputError

from gui.panels.sim_choices import check_sim_model, shipped_configs

CONFIG_FILE = "<config.json>"   # the model list's entry that opens a config.json (simulated runs only)
CONFIG_FILE_TITLE = "config.json…"
SIM_ONLY = QtCore.Qt.ItemDataRole.UserRole + 1   # item flag: listed only while Simulate is on


class SimModels:
    """Mixed into ControlsPanel: uses its model_combo, _model_index and select_model."""

    def _add_sim_models(self) -> None:
        """The shipped model configs and a config.json picker: shapes only a simulation can run."""
        for key, path in shipped_configs().items():
            self._add_sim_item(f"{key} (config, simulated)", key, path)
        self._add_sim_item(CONFIG_FILE_TITLE, CONFIG_FILE, "A model's config.json (any Hugging Face model's): "
                           "its shape is priced, no weights are read (`--simulate --model CONFIG` headless)")

    def _add_sim_item(self, text: str, data: str, tip: str, before: int | None = None) -> None:
        index = self.model_combo.count() if before is None else before
        self.model_combo.insertItem(index, text, data)
        self.model_combo.setItemData(index, tip, QtCore.Qt.ItemDataRole.ToolTipRole)
        self.model_combo.setItemData(index, True, SIM_ONLY)

    def _show_sim_models(self, shown: bool) -> None:
        """Simulate on: the config entries listed; off: hidden, and a chosen one gives way to the first model."""
        view = self.model_combo.view()
        items = self.model_combo.model()
        for i in range(self.model_combo.count()):
            if self.model_combo.itemData(i, SIM_ONLY):
                view.setRowHidden(i, not shown)
                items.item(i).setEnabled(shown)
        if not shown and self.model_combo.currentData(SIM_ONLY):
            self.model_combo.setCurrentIndex(0)
            self._model_index = 0

    def open_model_config(self, path: str) -> None:
        """A config.json as the simulated model, listed and selected; InputError (one line) when the
        simulator cannot price its shape."""
        shape, problem = check_sim_model(path)
        if shape is None:
            raise InputError(problem)
        index = self.model_combo.findData(path)
        if index < 0:
            index = self.model_combo.findData(CONFIG_FILE)
            self._add_sim_item(f"{Path(path).parent.name or Path(path).name} (config.json)", path, path, before=index)
        self.select_model(path)
