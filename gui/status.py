"""The status bar's permanent part: what the run uses (model, device, dtype, profile) and its progress."""
from __future__ import annotations

from PySide6 import QtWidgets

from backend.events import Progress

QUIET_MESSAGES = ("running", "done")   # progress messages that need no bar


class RunStatus:
    def __init__(self, status_bar: QtWidgets.QStatusBar):
        self.labels = {key: QtWidgets.QLabel() for key in ("model", "device", "dtype", "profile")}
        for label in self.labels.values():
            status_bar.addPermanentWidget(label)
        self.progress = QtWidgets.QProgressBar()
        self.progress.setMaximumWidth(220)
        self.progress.setTextVisible(True)
        self.progress.hide()
        status_bar.addPermanentWidget(self.progress)

    def show_choices(self, model: str, device: str, dtype: str, profile: str) -> None:
        for key, text in (("model", model), ("device", device), ("dtype", dtype), ("profile", profile)):
            self.labels[key].setText(f"{key}: {text}")

    def show_progress(self, event: Progress) -> None:
        self.progress.setFormat(event.message + (" %p%" if event.fraction is not None else ""))
        if event.fraction is None:
            self.progress.setRange(0, 0)   # busy: the length of the work is unknown
        else:
            self.progress.setRange(0, 1000)
            self.progress.setValue(round(1000 * event.fraction))
        self.progress.setVisible(event.message not in QUIET_MESSAGES)

    def hide_progress(self) -> None:
        self.progress.hide()
