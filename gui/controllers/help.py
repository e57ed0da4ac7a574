"""The Help menu: Keyboard shortcuts (read from the menus' own actions, so the list cannot drift
from what the keys do) and About, with the versions a bug report needs."""
from __future__ import annotations

import platform
import sys
from importlib import metadata

from PySide6 import QtCore, QtGui, QtWidgets


def shortcut_rows(menu_bar: QtWidgets.QMenuBar) -> list[tuple[str, str, str]]:
    """(menu, action, keys) for every action of the menus that has a shortcut, in menu order."""
    rows = []

    def walk(menu: QtWidgets.QMenu, path: str) -> None:
        for action in menu.actions():
            if action.menu() is not None:
                walk(action.menu(), f"{path} › {_plain(action.text())}")
            elif not action.isSeparator():
                keys = ", ".join(k.toString(QtGui.QKeySequence.SequenceFormat.NativeText) for k in action.shortcuts())
                if keys:
                    rows.append((path, _plain(action.text()), keys))
    for action in menu_bar.actions():
        if action.menu() is not None:
            walk(action.menu(), _plain(action.text()))
    return rows


def _plain(text: str) -> str:
    """A menu text without its mnemonic ampersands and trailing dots."""
    return text.replace("&&", "\0").replace("&", "").replace("\0", "&").rstrip("…").rstrip(".")


def versions() -> list[tuple[str, str]]:
    """What this window runs on: phasescope, Python, torch, Qt and PySide6, pyqtgraph, numpy, the
    C kernels' instruction set."""
    import numpy
    import PySide6
    import pyqtgraph
    rows = [("phasescope", _version("phasescope")),
            ("Python", f"{platform.python_version()} ({platform.python_implementation()}, {sys.platform})")]
    torch = sys.modules.get("torch")   # the window loads it to list devices; the engine runs in its own process
    if torch is None:
        try:
            import torch
        except ImportError:
            torch = None
    rows.append(("torch", torch.__version__ if torch is not None else "not installed"))
    rows += [("Qt", QtCore.qVersion()), ("PySide6", PySide6.__version__), ("pyqtgraph", pyqtgraph.__version__),
             ("numpy", numpy.__version__), ("C kernels", _kernels())]
    return rows


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed (a checkout)"


def _kernels() -> str:
    """The kernels' ISA, from their cached build: an About box never waits for a compiler (the engine
    process builds them on its first run)."""
    from backend import kernels
    try:
        if not kernels.library_path().exists():
            return "not built yet (the engine builds them on its first run)"
        found = kernels.isa()
    except Exception as exc:   # a compiler error must not keep the About box from opening
        return f"not available ({exc})"
    if found is None:
        return f"not available ({kernels.reason()})"
    name, features = found
    return f"{name}" + (f" ({' '.join(features)})" if features else "")


class HelpController(QtCore.QObject):
    """The Help menu's dialogs, for `window`: its menu bar lists the shortcuts, its icon is About's."""

    def __init__(self, window: QtWidgets.QMainWindow):
        super().__init__(window)
        self.window = window

    def show_shortcuts(self) -> QtWidgets.QDialog:
        dialog = QtWidgets.QDialog(self.window)
        dialog.setObjectName("shortcutsDialog")
        dialog.setWindowTitle("Keyboard shortcuts")
        dialog.setAttribute(QtCore.Qt.WidgetAttribute.WA_DeleteOnClose)
        rows = shortcut_rows(self.window.menuBar())
        table = QtWidgets.QTableWidget(len(rows), 3, dialog)
        table.setObjectName("shortcutsTable")
        table.setHorizontalHeaderLabels(["Menu", "Command", "Keys"])
        table.verticalHeader().hide()
        table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        for r, row in enumerate(rows):
            for c, text in enumerate(row):
                table.setItem(r, c, QtWidgets.QTableWidgetItem(text))
        table.resizeColumnsToContents()
        table.horizontalHeader().setStretchLastSection(True)
        note = QtWidgets.QLabel("Plots: wheel to zoom, drag to pan, hover for numbers, click a lane to select "
                                "its request. In a menu, the underlined letter picks a command.")
        note.setWordWrap(True)
        buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(dialog.close)
        layout = QtWidgets.QVBoxLayout(dialog)
        layout.addWidget(table)
        layout.addWidget(note)
        layout.addWidget(buttons)
        dialog.resize(560, 420)
        dialog.show()
        return dialog

    def show_about(self) -> QtWidgets.QMessageBox:
        rows = "".join(f"<tr><td><b>{name}</b></td><td>&nbsp;{value}</td></tr>" for name, value in versions())
        box = QtWidgets.QMessageBox(QtWidgets.QMessageBox.Icon.NoIcon, "About phasescope",
                                    "<h3>phasescope</h3><p>See prefill and decode, measured on your own "
                                    f"hardware.</p><table>{rows}</table>",
                                    QtWidgets.QMessageBox.StandardButton.Ok, self.window)
        box.setObjectName("aboutBox")
        box.setIconPixmap(self.window.windowIcon().pixmap(64, 64))
        box.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)   # copied into a bug report
        box.setWindowModality(QtCore.Qt.WindowModality.NonModal)
        box.setAttribute(QtCore.Qt.WidgetAttribute.WA_DeleteOnClose)
        box.show()
        return box
