"""The models already on the disk in the model list (`models --local`), and Open folder… adding a
folder of them for this and later sessions (`models --local --add-folder DIR`). Methods of ControlsPanel."""
from __future__ import annotations

from pathlib import Path

from PySide6 import QtCore

from backend.errors import InputError


class FoundModels:
    """Mixed into ControlsPanel: uses its model_combo, _model_index, select_model and inputRejected."""

    def open_model_folder(self, folder: str) -> None:
        """A model folder (config.json) or a folder of models (GGUFs, model folders one level down):
        remembered for the next sessions (as `models --local --add-folder` does), its models listed,
        the first selected; a folder with no model in it is refused in one line."""
        from backend.loaders.discover import add_folder, find_models
        try:
            root = add_folder(folder)
        except (InputError, OSError) as exc:
            self.inputRejected.emit(str(exc))
            self.model_combo.setCurrentIndex(self._model_index)
            return
        listed = {self.model_combo.itemData(i) for i in range(self.model_combo.count())}
        found = [m for m in find_models() if Path(m.path).resolve().is_relative_to(root)]
        for m in found:
            if m.path not in listed:
                self._add_found(m, before=self.model_combo.count() - 2)   # above the remote and open entries
        runnable = [m for m in found if m.runs]
        if not runnable:
            why = f" ({found[0].reason})" if found else ""
            self.inputRejected.emit(f"{folder}: no model this engine runs in it{why}")
            self.model_combo.setCurrentIndex(self._model_index)
            return
        self.select_model(runnable[0].path)

    def _add_local_models(self) -> None:
        """The models already on the disk (backend.loaders.discover): each with what it is; one this
        engine cannot run is listed greyed, with why."""
        import torch
        from backend.loaders.discover import find_models
        from backend.loaders.weights import free_memory
        for m in find_models(free_memory(torch.device("cpu"))):
            self._add_found(m, before=self.model_combo.count())

    def _add_found(self, m, before: int) -> None:
        """One discovered model (backend.loaders.discover.FoundModel) as a list entry at index `before`."""
        size = f"{m.size_bytes / 1e9:.1f} GB" if m.size_bytes >= 1e8 else f"{m.size_bytes / 1e6:.0f} MB"
        bits = f", {m.bits_per_weight:.1f} bits/weight" if m.bits_per_weight else ""
        params = f"{m.params / 1e6:,.0f}M, " if m.params else ""
        text = f"{m.name} ({m.where}, {params}{size})" + ("" if m.runs else " - cannot run here")
        self.model_combo.insertItem(before, text, m.path)
        tip = (f"{m.path}\n{m.arch}, {m.format}{bits}, {size}"
               + ("" if m.fits is not False else "; larger than the free memory")
               + ("" if m.runs else f"\nnot runnable: {m.reason}"))
        self.model_combo.setItemData(before, tip, QtCore.Qt.ItemDataRole.ToolTipRole)
        if not m.runs:
            self.model_combo.model().item(before).setEnabled(False)
