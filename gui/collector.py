"""Python's cycle collector, run on the window's thread only.

Qt objects caught in reference cycles (a controller and the window it serves, a dialog and the
slots it connects) are freed by Python's cyclic garbage collector, and the automatic collector
runs on whichever thread happens to allocate. When that is the worker's thread, freeing a widget
there takes Qt's locks on the wrong thread while the window's thread holds the GIL and waits on the
same locks: both threads stop for good (seen in the suite: a QMenu's destructor in the worker's
thread against a repaint in the window's; and a segfault in a worker test with no window open). So
while a worker thread runs (gui/worker.py's WorkerThread, the window's or a test's) the automatic
collector is off, and a timer on the window's thread collects as it would have, generation by generation.
"""
from __future__ import annotations

import gc

from PySide6 import QtCore

INTERVAL_MS = 250   # often enough that cyclic garbage never piles up; a young collection takes microseconds

_open = 0   # collectors running: the automatic collector is off while any is, and back on after the last


class MainThreadCollector(QtCore.QObject):
    """Owned by a WorkerThread: turns the automatic collector off until `stop`, collecting on its own timer."""

    def __init__(self, parent: QtCore.QObject | None = None):
        super().__init__(parent)
        global _open
        if _open == 0:
            gc.disable()
        _open += 1
        self._stopped = False
        self.timer = QtCore.QTimer(self)
        self.timer.setInterval(INTERVAL_MS)
        self.timer.timeout.connect(self.collect)
        self.timer.start()

    @staticmethod
    def collect() -> int:
        """The oldest generation whose count passed its threshold, as the automatic collector chooses."""
        counts, thresholds = gc.get_count(), gc.get_threshold()
        for generation in (2, 1, 0):
            if counts[generation] > thresholds[generation]:
                return gc.collect(generation)
        return 0

    def stop(self) -> None:
        """Once: a last full collection here, and the automatic collector back on if no other window runs one."""
        global _open
        if self._stopped:
            return
        self._stopped = True
        self.timer.stop()
        gc.collect()
        _open -= 1
        if _open == 0:
            gc.enable()
