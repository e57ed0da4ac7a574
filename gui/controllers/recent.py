"""File > Recent runs: the run folders opened, exported or kept at shutdown, newest first, remembered
between sessions (gui.settings). A folder gone from the disk is dropped from the list when chosen,
with a message saying so."""
from __future__ import annotations

from pathlib import Path

from PySide6 import QtCore, QtGui, QtWidgets

from gui.settings import read_json, write_json

RECENT_KEY = "recent/runs"
MAX_RECENT = 10


def recent_runs() -> list[str]:
    return [f for f in read_json(RECENT_KEY, []) if isinstance(f, str)]


def add_recent(folder: str) -> list[str]:
    """Put `folder` first (once), keep the newest MAX_RECENT; the new list."""
    path = str(Path(folder).resolve())
    runs = [path] + [f for f in recent_runs() if f != path]
    write_json(RECENT_KEY, runs[:MAX_RECENT])
    return runs[:MAX_RECENT]


def drop_recent(folder: str) -> None:
    write_json(RECENT_KEY, [f for f in recent_runs() if f != folder])


class RecentController(QtCore.QObject):
    """The Recent runs sub-menu of `file_menu`; a run chosen there opens through `files` (the
    FilesController), and every folder it reports used joins the list."""

    message = QtCore.Signal(str)
    error = QtCore.Signal(str)

    def __init__(self, file_menu: QtWidgets.QMenu, files, runs, parent: QtCore.QObject | None = None):
        super().__init__(parent)
        self.files = files
        self.runs = runs
        self.menu = file_menu.addMenu("Recent &runs")
        self.menu.setObjectName("recentMenu")
        self.menu.aboutToShow.connect(self.fill_menu)
        files.used.connect(self.remember_run)
        self.fill_menu()

    def fill_menu(self) -> None:
        menu = self.menu
        menu.clear()
        runs = recent_runs()
        for i, folder in enumerate(runs):
            # &1 .. &9 and 1&0: each one key away once the menu is open
            number = f"&{i + 1}" if i < 9 else "1&0"
            action = QtGui.QAction(f"{number}  {folder}", menu)
            action.setData(folder)
            action.triggered.connect(lambda _=False, f=folder: self.open_recent(f))
            menu.addAction(action)
        if not runs:
            empty = menu.addAction("(none yet: runs you open, export or stop at quitting are listed here)")
            empty.setEnabled(False)
        menu.addSeparator()
        clear = menu.addAction("&Clear the list", self.clear_recent)
        clear.setEnabled(bool(runs))

    def remember_run(self, folder: str) -> None:
        add_recent(folder)
        self.fill_menu()

    def open_recent(self, folder: str) -> bool:
        """Open a listed run; a folder that is gone is dropped from the list, with a message."""
        if self.runs.running:
            self.message.emit("a run is under way: stop it or let it end, then open another")
            return False
        if not Path(folder).is_dir():
            drop_recent(folder)
            self.fill_menu()
            self.error.emit(f"{folder} no longer exists: removed from Recent runs")
            return False
        return self.files.open_run(folder)

    def clear_recent(self) -> None:
        write_json(RECENT_KEY, [])
        self.fill_menu()
        self.message.emit("Recent runs cleared (the folders themselves are untouched)")
