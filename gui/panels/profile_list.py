"""The GPU profile list: the shipped profiles, this machine's measured one (or why it is left out),
profile files the user opened, and the one a device preselects (`profiles`, `--profile NAME|TOML`).
Methods of ControlsPanel."""
from __future__ import annotations

from pathlib import Path

from PySide6 import QtCore

from backend.errors import InputError
from backend.loaders.device import device_name
from backend.roofline.profiles import (SHIPPED_DIR, GpuProfile, LOCAL_KEY, find_profile, list_profiles, load_profile,
                                       match_profile)

from gui.panels.fields import open_file


class ProfileList:
    """Mixed into ControlsPanel: uses its profile_combo, _profile_paths, profile_problem and inputRejected."""

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
        try:
            profiles = list_profiles()
            self.profile_problem = ""
        except InputError as exc:   # this machine's measured profile is malformed: the shipped ones still serve
            profiles = [load_profile(p) for p in sorted(SHIPPED_DIR.glob("*.toml"))]
            self.profile_problem = f"{exc} (left out of the profile list; calibrate again to replace it)"
            self.inputRejected.emit(self.profile_problem)
        for p in profiles:
            self.profile_combo.addItem(f"{p.name} (measured)" if p.measured else p.name, p.key)
            self.profile_combo.setItemData(self.profile_combo.count() - 1, p.source, QtCore.Qt.ItemDataRole.ToolTipRole)
        for path in self._profile_paths:
            try:
                self._add_profile_item(load_profile(path), path)
            except InputError as exc:   # edited since it was opened
                self.inputRejected.emit(str(exc))
        if current is not None:
            self.select_profile(current)
        self.profile_combo.blockSignals(False)

    def add_profile_path(self, path: str) -> None:
        """Add a profile TOML file to the list and select it; InputError names the file and field when malformed."""
        profile = load_profile(path)   # refused here, before it becomes a choice
        if path not in self._profile_paths:
            self._profile_paths.append(path)
            self._add_profile_item(profile, path)
        self.select_profile(path)

    def _add_profile_item(self, profile: GpuProfile, path: str) -> None:
        self.profile_combo.addItem(f"{profile.name} ({Path(path).name})", path)
        self.profile_combo.setItemData(self.profile_combo.count() - 1, path, QtCore.Qt.ItemDataRole.ToolTipRole)

    def _open_profile_dialog(self) -> None:
        open_file(self, "Open a GPU profile", "GPU profile (*.toml)", self.add_profile_path, self.inputRejected)

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
