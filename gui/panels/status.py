"""The status bar's permanent part: what the run uses (model, device, dtype, profile), its progress,
and what the engine process and the window's own thread cost. Each label gives way to the
status bar's message (gui/panels/status_bar.py), eliding its end, rather than clipping it."""
from __future__ import annotations

import time

from PySide6 import QtCore, QtWidgets

from backend.events import EngineStatus, Progress
from backend.engine.threads import ThreadChoice, describe_threads

from gui.panels.status_bar import ElidedLabel

QUIET_MESSAGES = ("running", "done")   # progress messages that need no bar


class RunStatus:
    def __init__(self, status_bar: QtWidgets.QStatusBar):
        self.labels = {key: ElidedLabel() for key in ("model", "device", "dtype", "profile")}
        for label in self.labels.values():
            status_bar.addPermanentWidget(label)
        self.engine = ElidedLabel()
        self.engine.setObjectName("engineStatus")
        self.engine.setToolTip("The engine's own process: its threads, the cores it is pinned to, its CPU use")
        self.window_cpu = ElidedLabel()
        self.window_cpu.setObjectName("windowCpu")
        self.window_cpu.setToolTip("CPU time of the window's main thread (painting, tables) over the last second")
        for label in (self.engine, self.window_cpu):
            status_bar.addPermanentWidget(label)
        self._last_engine: EngineStatus | None = None
        self.progress = QtWidgets.QProgressBar()
        self.progress.setMaximumWidth(380)   # a stage's words and its seconds
        self.progress.setTextVisible(True)
        self.progress.hide()
        status_bar.addPermanentWidget(self.progress)
        # the stage's elapsed time, counted from the run's start and ticking while the stage lasts
        self._started = time.monotonic()
        self._stage: Progress | None = None
        self._tick = QtCore.QTimer(self.progress)
        self._tick.setInterval(1000)
        self._tick.timeout.connect(self._show_stage)

    def start_clock(self) -> None:
        """A run (or a start of the engine) begins: stages count their time from here."""
        self._started = time.monotonic()
        self._stage = None

    def show_choices(self, model: str, device: str, dtype: str, profile: str) -> None:
        for key, text in (("model", model), ("device", device), ("dtype", dtype), ("profile", profile)):
            self.labels[key].setText(f"{key}: {text}")

    def show_thread_choice(self, choice: ThreadChoice) -> None:
        """Before the engine reports: how many threads it will take, of how many cores, and why."""
        self.engine.setText(choice.describe())
        self.engine.setToolTip(f"{choice.describe()}: {choice.reason}.\nOnce running: the engine's own process, "
                               f"its threads, the cores it is pinned to, its CPU use")

    def show_engine(self, status: EngineStatus) -> None:
        """e.g. "engine: 1 thread on core 1, 98% of a core" (the CPU share since its last report)."""
        last, self._last_engine = self._last_engine, status
        text = f"engine: {describe_threads(status.threads, status.affinity)}" if status.threads else "engine: running"
        share = status.cpu_share_since(last) if last is not None else None
        if share is not None:
            text += f", {100 * share:.0f}% of a core"
        self.engine.setText(text)

    def show_window_cpu(self, share: float, frame_ms: int) -> None:
        self.window_cpu.setText(f"window: {100 * share:.0f}% of a core" + (f", repaint every {frame_ms} ms"
                                                                           if frame_ms > 40 else ""))

    def show_progress(self, event: Progress) -> None:
        self._stage = event
        self._show_stage()
        self._tick.start()
        if event.fraction is None:
            self.progress.setRange(0, 0)   # busy: the length of the work is unknown
        else:
            self.progress.setRange(0, 1000)
            self.progress.setValue(round(1000 * event.fraction))
        self.progress.setVisible(event.message not in QUIET_MESSAGES)

    def _show_stage(self) -> None:
        event = self._stage
        if event is None:
            return
        elapsed = f" ({time.monotonic() - self._started:.0f} s)" if event.message not in QUIET_MESSAGES else ""
        self.progress.setFormat(event.message + elapsed + (" %p%" if event.fraction is not None else ""))
        self.progress.setToolTip(event.message + elapsed)

    def stage_text(self) -> str:
        """What the progress bar says now (its format, with the percentage filled in)."""
        return self.progress.text()

    def hide_progress(self) -> None:
        self._tick.stop()
        self._stage = None
        self.progress.hide()
