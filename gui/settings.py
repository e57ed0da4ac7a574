"""Where the window's memory between sessions is kept, and its single values: the last folder of each
file dialog, the recent runs (gui/window_settings.py saves the layout and the controls through it).

One INI file, window.ini in the configuration folder (backend.files.config_dir: $PHASESCOPE_CONFIG_DIR,
else $XDG_CONFIG_HOME/phasescope), through QSettings: a test that points PHASESCOPE_CONFIG_DIR at a
temporary folder never reads or writes the user's. This module imports no other of the window's:
the panels' file dialogs and the window's settings both build on it.
"""
from __future__ import annotations

import json
from pathlib import Path

from PySide6 import QtCore

from backend.files import config_dir

SETTINGS_FILE = "window.ini"


def settings_path() -> Path:
    return config_dir() / SETTINGS_FILE


def open_settings() -> QtCore.QSettings:
    return QtCore.QSettings(str(settings_path()), QtCore.QSettings.Format.IniFormat)


# ---- single values -----------------------------------------------------------------------------

def read_json(key: str, default):
    """A JSON value (lists and dicts are kept as JSON text: INI has no types of its own)."""
    text = open_settings().value(key, "")
    try:
        value = json.loads(text) if isinstance(text, str) and text else default
    except ValueError:
        return default
    return value if isinstance(value, type(default)) else default


def write_json(key: str, value) -> None:
    s = open_settings()
    s.setValue(key, json.dumps(value))
    s.sync()


def start_folder(kind: str) -> str:
    """The folder a file dialog of this kind opened last ("" when none or gone: the dialog's own default)."""
    folder = open_settings().value(f"folders/{kind}", "")
    return folder if isinstance(folder, str) and folder and Path(folder).is_dir() else ""


def remember_folder(kind: str, path: str) -> None:
    """Remember where a dialog of this kind was used: `path` itself if a folder, else its parent."""
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    s = open_settings()
    s.setValue(f"folders/{kind}", str(folder))
    s.sync()
