"""The backend's Qt wrapper: runs a session in a QThread and reports through signals only.

The worker never touches a widget. Step records are coalesced: a fast GPU emits thousands
of RecordBatches a second, and one queued signal per batch would flood the event loop, so
batches are merged and sent at most FLUSH_HZ times a second (each other event first
flushes what is pending, so the window sees everything in order).
"""
from __future__ import annotations

import threading
from functools import partial
import time
import weakref

from PySide6 import QtCore

from backend.calibrate import calibrate as measure_device
from backend.calibrate import write_profile
from backend.events import Progress
from backend.records import RecordBatch
from backend.session import execute

FLUSH_HZ = 60

_threads: weakref.WeakSet[QtCore.QThread] = weakref.WeakSet()


def running_threads() -> list[QtCore.QThread]:
    """Worker threads still running (tests fail when one outlives them)."""
    return [t for t in list(_threads) if t.isRunning()]


def one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return first or type(exc).__name__


def merge_batches(batches: list[RecordBatch]) -> RecordBatch:
    if len(batches) == 1:
        return batches[0]
    merged = RecordBatch()
    for b in batches:
        merged.steps.extend(b.steps)
        merged.tokens.extend(b.tokens)
        merged.requests.extend(b.requests)
        for rid, piece in b.text.items():
            merged.text[rid] = merged.text.get(rid, "") + piece
        merged.scheduled.update(b.scheduled)
    return merged


class RunWorker(QtCore.QObject):
    started = QtCore.Signal()
    event = QtCore.Signal(object)      # Progress, ModelLoaded, RequestsArrived, SweepPoint
    records = QtCore.Signal(object)    # one RecordBatch merging every batch since the last flush
    finished = QtCore.Signal(object)   # RunFinished
    calibrated = QtCore.Signal(object, str)   # GpuProfile, path written
    failed = QtCore.Signal(str)        # one line

    def __init__(self, run=None, measure=measure_device, flush_hz: float = FLUSH_HZ):
        """run defaults to the backend's session.execute, measure to calibrate.calibrate."""
        super().__init__()
        # the window's store keeps every step and token compactly: the backend need not hold a copy
        self._run = run or partial(execute, retain_records=False)
        self._measure = measure
        self._interval = 1.0 / flush_hz
        self._stop = threading.Event()
        self._pending: list[RecordBatch] = []
        self._last_flush = 0.0

    # called from the window's thread: plain thread-safe calls, not queued slots
    def request_stop(self) -> None:
        self._stop.set()

    def clear_stop(self) -> None:
        self._stop.clear()

    def should_stop(self) -> bool:
        return self._stop.is_set()

    @QtCore.Slot(object)
    def run(self, config) -> None:
        self.started.emit()
        self._pending.clear()
        self._last_flush = 0.0
        try:
            result = self._run(config, self._emit, self.should_stop)
        except Exception as exc:  # every failure reaches the window as one line, never kills the thread
            self._flush()
            self.failed.emit(one_line(exc))
            return
        self._flush()
        self.finished.emit(result)

    @QtCore.Slot(str)
    def calibrate(self, device: str) -> None:
        self.started.emit()
        try:
            profile = self._measure(device, lambda message, fraction: self.event.emit(Progress(message, fraction)))
            path = write_profile(profile)
        except Exception as exc:
            self.failed.emit(one_line(exc))
            return
        self.calibrated.emit(profile, str(path))

    def _emit(self, item) -> None:
        if isinstance(item, RecordBatch):
            self._pending.append(item)
            if time.monotonic() - self._last_flush >= self._interval:
                self._flush()
            return
        self._flush()
        self.event.emit(item)

    def _flush(self) -> None:
        if self._pending:
            batch = merge_batches(self._pending)
            self._pending = []
            self.records.emit(batch)
        self._last_flush = time.monotonic()


class WorkerThread:
    """A RunWorker living in its own QThread for the window's lifetime."""

    def __init__(self, worker: RunWorker | None = None):
        self.thread = QtCore.QThread()
        self.thread.setObjectName("phasescope-run")
        self.worker = worker or RunWorker()
        self.worker.moveToThread(self.thread)
        self.thread.finished.connect(self.worker.deleteLater)
        _threads.add(self.thread)
        self.thread.start()

    def stop_and_join(self) -> None:
        """Ask the run to stop at its next step boundary, then end the thread and wait for it."""
        if not self.thread.isRunning():
            return
        self.worker.request_stop()
        self.thread.quit()
        self.thread.wait()
