"""What the window remembers between sessions: its geometry and dock layout, the model and profile,
and the run form's fields, kept in gui.settings' file.

The form is saved generically, as the values of its input widgets by attribute name, so a field added
to the form is remembered without a line here; the API key is never saved (it is held in memory only,
as the controls promise). A saved value that no longer fits (a model gone from the disk, a profile
file deleted, a run kind renamed) is skipped: restoring never stops the window from opening.
"""
from __future__ import annotations

import json
from pathlib import Path

from PySide6 import QtCore, QtGui, QtWidgets

from backend.errors import InputError

from gui.panels.fields import ValidatedField
from gui.settings import open_settings
from gui.window_geometry import keep_on_screen, place_first

# saveState's version: raise it when the docks change so an old layout is not forced on them
# (2: the plots moved from a bottom dock into the central view tabs, a notes dock beside them)
STATE_VERSION = 2
NEVER_SAVED = ("key_edit",)   # the API key: never written to a file
# restored before the rest (in this order), or restored by their own rule
CONTROLS_FIRST = ("simulate_check", "model_combo", "hub_field", "device_combo", "dtype_combo")
SPECIAL = ("model_combo", "profile_combo", "kind_combo", "preset_combo", "form", "deployment_box")


# ---- the input widgets -------------------------------------------------------------------------

def widget_values(owner, skip=()) -> dict:
    """The values of an object's input widgets, by attribute name (combos by data where they have it)."""
    values = {}
    for name, widget in vars(owner).items():
        if name in skip or name in NEVER_SAVED:
            continue
        value = _value(widget)
        if value is not None:
            values[name] = value
    return values


def _value(widget):
    if isinstance(widget, ValidatedField):
        return widget.text()
    if isinstance(widget, QtWidgets.QComboBox):
        data = widget.currentData()
        return {"data": data} if isinstance(data, str) else {"text": widget.currentText()}
    if isinstance(widget, QtWidgets.QAbstractButton) and widget.isCheckable():
        return widget.isChecked()
    if isinstance(widget, (QtWidgets.QSpinBox, QtWidgets.QDoubleSpinBox)):
        return widget.value()
    if isinstance(widget, QtWidgets.QPlainTextEdit):
        return widget.toPlainText()
    if isinstance(widget, QtWidgets.QLineEdit):
        return widget.text()
    return None


def set_value(widget, value) -> None:
    """Put a saved value back; one that does not fit the widget any more is left out."""
    if isinstance(widget, ValidatedField) and isinstance(value, str):
        widget.setText(value)
    elif isinstance(widget, QtWidgets.QComboBox) and isinstance(value, dict):
        index = widget.findData(value["data"]) if "data" in value else widget.findText(str(value.get("text", "")))
        if index >= 0:
            widget.setCurrentIndex(index)
    elif isinstance(widget, QtWidgets.QAbstractButton) and isinstance(value, bool):
        widget.setChecked(value)
    elif isinstance(widget, QtWidgets.QSpinBox) and isinstance(value, int):
        widget.setValue(value)
    elif isinstance(widget, QtWidgets.QDoubleSpinBox) and isinstance(value, (int, float)):
        widget.setValue(float(value))
    elif isinstance(widget, QtWidgets.QPlainTextEdit) and isinstance(value, str):
        widget.setPlainText(value)
    elif isinstance(widget, QtWidgets.QLineEdit) and isinstance(value, str):
        widget.setText(value)


def restore_values(owner, values: dict, order=()) -> None:
    """`order`'s names first, then the rest in the owner's own order (a preset before the fields it fills)."""
    names = [n for n in order if n in values] + [n for n in vars(owner) if n in values and n not in order]
    for name in names:
        widget = getattr(owner, name, None)
        if name not in NEVER_SAVED and widget is not None:
            try:
                set_value(widget, values[name])
            except (InputError, ValueError, TypeError):   # a value the widget refuses now: left as it is
                pass


# ---- the controls dock and its form --------------------------------------------------------------

def controls_values(controls) -> dict:
    form = controls.form
    return {
        "controls": widget_values(controls, skip=SPECIAL),
        "model": controls.model_combo.currentData(),
        "profile": controls.profile_combo.currentData(),
        "deployment": widget_values(controls.deployment_box),
        "kind": form.kind(),
        "preset": form.preset_combo.currentText(),
        "form": widget_values(form, skip=SPECIAL),
        "fields": {group: {key: f.text() for key, f in fields.items()} for group, fields in form.fields.items()},
    }


def restore_controls(controls, saved: dict) -> None:
    form = controls.form
    values = saved.get("controls", {})
    restore_values(controls, {k: v for k, v in values.items() if k == "simulate_check"})
    _restore_model(controls, saved.get("model"))
    restore_values(controls, {k: v for k, v in values.items() if k != "simulate_check"}, order=CONTROLS_FIRST)
    _restore_profile(controls, saved.get("profile"))
    restore_values(controls.deployment_box, saved.get("deployment", {}))
    kind = saved.get("kind")
    if isinstance(kind, str) and form.kind_combo.findData(kind) >= 0:
        form.kind_combo.setCurrentIndex(form.kind_combo.findData(kind))
    _restore_preset(form, saved.get("preset"))
    restore_values(form, saved.get("form", {}))
    for group, fields in saved.get("fields", {}).items():
        for key, text in fields.items() if isinstance(fields, dict) else ():
            field = form.fields.get(group, {}).get(key)
            if field is not None and isinstance(text, str):
                field.setText(text)


def _restore_model(controls, data) -> None:
    if not isinstance(data, str):
        return
    if controls.model_combo.findData(data) >= 0:
        controls.select_model(data)
    elif data.endswith(".json") and Path(data).is_file():
        try:
            controls.open_model_config(data)
        except InputError:
            pass


def _restore_profile(controls, key) -> None:
    if not isinstance(key, str):
        return
    try:
        if controls.profile_combo.findData(key) < 0 and Path(key).is_file():
            controls.add_profile_path(key)   # a profile file of the user's own, listed again
        else:
            controls.select_profile(key)
    except InputError:
        pass


def _restore_preset(form, name) -> None:
    if not isinstance(name, str):
        return
    if form.preset_combo.findText(name) >= 0:
        form.preset_combo.setCurrentText(name)
    elif Path(name).is_file():   # a workload file of the user's own
        try:
            form.open_workload(name)
        except InputError:
            pass


# ---- the window -------------------------------------------------------------------------------

def save_window(window) -> None:
    s = open_settings()
    s.setValue("window/geometry", window.saveGeometry())
    normal = window.normalGeometry()   # what it takes unmaximised: whether it still fits is judged on it
    s.setValue("window/size", json.dumps([normal.width(), normal.height()]))
    s.setValue("window/state", window.saveState(STATE_VERSION))
    s.setValue("window/controls", json.dumps(controls_values(window.controls)))
    s.sync()


def _size_fits(saved, window) -> bool:
    """The saved [width, height] fits the primary screen's available area, or is no larger than the
    window's own least size, which it takes on any screen (an old file without a size: it fits)."""
    try:
        width, height = json.loads(saved) if saved else (0, 0)
    except (ValueError, TypeError):
        return True
    available, least = QtGui.QGuiApplication.primaryScreen().availableGeometry(), window.minimumSizeHint()
    return width <= max(available.width(), least.width()) and height <= max(available.height(), least.height())


def restore_window(window) -> bool:
    """The last session's geometry, docks and settings; False when there was none. Without a saved
    geometry, or with one that no longer fits the screen, the window takes most of the screen."""
    s = open_settings()
    geometry, state = s.value("window/geometry"), s.value("window/state")
    try:
        saved = json.loads(s.value("window/controls", "") or "{}")
    except ValueError:
        saved = {}
    if isinstance(saved, dict) and saved:
        restore_controls(window.controls, saved)
    # a window larger than this screen (a laptop unplugged from its monitor): Qt's restoreGeometry would
    # squeeze it on, docks sized for the large screen and all; this screen's first start instead
    if isinstance(geometry, QtCore.QByteArray) and _size_fits(s.value("window/size"), window) \
            and window.restoreGeometry(geometry) and not keep_on_screen(window):
        if isinstance(state, QtCore.QByteArray):
            window.restoreState(state, STATE_VERSION)
    else:
        place_first(window)
    return bool(saved) or geometry is not None
