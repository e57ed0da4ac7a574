"""File > Recent runs: the run folders opened, exported or kept at shutdown, newest first, remembered
between sessions (gui.settings). A folder gone from the disk is dropped from the list when chosen,
with a message saying so. (Methods of MainWindow.)"""
from __future__ import annotations

from pathlib import Path

from PySide6 import QtGui, QtWidgets

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


class RecentActions:
    """Mixed into MainWindow: uses open_run, show_error and the status bar."""

    def _build_recent(self, file_menu: QtWidgets.QMenu) -> None:
        self.recent_menu = file_menu.addMenu("Recent &runs")
        self.recent_menu.setObjectName("recentMenu")
        self.recent_menu.aboutToShow.connect(self._fill_recent)
        self._fill_recent()

    def _fill_recent(self) -> None:
        menu = self.recent_menu
        menu.clear()
        runs = recent_runs()
        for i, folder in enumerate(runs):
            # &1 .. &9 and 1&0: each one key away once the menu is open
            number = f"&{i + 1}" if i < 9 else "1&0"
            action = QtGui.QAction(f"{number}  {folder}", self)
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
        self._fill_recent()

    def open_recent(self, folder: str) -> bool:
        """Open a listed run; a folder that is gone is dropped from the list, with a message."""
        if self.running:
            self.statusBar().showMessage("a run is under way: stop it or let it end, then open another")
            return False
        if not Path(folder).is_dir():
            drop_recent(folder)
            self._fill_recent()
            self.show_error(f"{folder} no longer exists: removed from Recent runs")
            return False
        return self.open_run(folder)

    def clear_recent(self) -> None:
        write_json(RECENT_KEY, [])
        self._fill_recent()
        self.statusBar().showMessage("Recent runs cleared (the folders themselves are untouched)")
