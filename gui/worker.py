"""The backend's Qt wrapper: runs a session in a QThread and reports through signals only.

The run itself executes in the engine's own process (backend.engine.process): this thread
sends it the settings, reads its records and turns them into the signals the views take, so
painting neither slows the engine nor dies with it. The worker never touches a widget. Step records are coalesced: a fast GPU emits thousands
of RecordBatches a second, and one queued signal per batch would flood the event loop, so
batches are merged and sent at most FLUSH_HZ times a second. Arrivals (RequestsArrived,
dozens a second under load) travel with them, merged into one event sent just before the
records; every other event first flushes what is pending, so the window sees it in order.

Every record is also streamed into a temporary run folder as it comes (the window keeps
only the newest steps and tokens in memory; Export CSV copies the complete files from
there). The folder lives until the next run or the end of the thread. A run of several
repeats keeps only the last repeat's record there, as the window keeps only its steps.
"""
from __future__ import annotations

import shutil
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Callable

from PySide6 import QtCore

from backend.roofline.calibrate import calibrate as measure_device
from backend.roofline.calibrate import write_profile
from backend.errors import InputError, RunError, one_line
from backend.engine.process import EngineProcess
from backend.events import KvMap, Progress, RepeatStarted, RequestsArrived, RunFinished, Throttle, coalesce
from backend.results.export import RunWriter
from backend.records import RecordBatch, RunData

from gui.collector import MainThreadCollector

FLUSH_HZ = Throttle.HZ   # the one rate records are sent at, as the engine process sends them

_threads: weakref.WeakSet[QtCore.QThread] = weakref.WeakSet()


def running_threads() -> list[QtCore.QThread]:
    """Worker threads still running (tests fail when one outlives them)."""
    return [t for t in list(_threads) if t.isRunning()]


class RunWorker(QtCore.QObject):
    started = QtCore.Signal()
    event = QtCore.Signal(object)      # Progress, ModelLoaded, RequestsArrived, SweepPoint, ServerMetrics, EngineStatus
    records = QtCore.Signal(object)    # one RecordBatch merging every batch since the last flush
    finished = QtCore.Signal(object)   # RunFinished
    recorded = QtCore.Signal(str)      # the run folder holding the whole record ("" when recording failed)
    calibrated = QtCore.Signal(object, str)   # GpuProfile, path written
    fitted = QtCore.Signal(object)     # backend.fitting.FitReport
    failed = QtCore.Signal(str)        # one line

    def __init__(self, run=None, measure=None, flush_hz: float = FLUSH_HZ, engine: EngineProcess | None = None):
        """Runs and calibrations go to `engine`, by default a new EngineProcess (session.execute
        and calibrate.calibrate in a child process); a `run` function given instead runs in this
        thread (tests that inject faults, benchmarks of the window alone)."""
        super().__init__()
        self.engine = engine if engine is not None or run is not None else EngineProcess()
        if self.engine is not None:
            run, measure = self.engine.execute, measure or self.engine.calibrate
            flush_hz = float("inf")   # the engine process already sends its records at most FLUSH_HZ a second
        self._run = run
        self._measure = measure or measure_device
        self._interval = 1.0 / flush_hz
        self._stop = threading.Event()
        self._pending: list[RecordBatch | RequestsArrived] = []
        self._last_flush = 0.0
        self._writer: RunWriter | None = None
        self.recording: Path | None = None   # the last run's folder (removed when the next run starts)

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
        self._start_recording()
        try:
            result = self._run(config, self._emit, self.should_stop)
        except Exception as exc:  # every failure reaches the window as one line, never kills the thread
            self._flush()
            self._close_recording(None)
            self.failed.emit(one_line(exc))
            return
        self._flush()
        self._close_recording(result)
        self.finished.emit(result)

    @QtCore.Slot(object)
    def warm(self, config) -> None:
        """The engine process started, and the config's model loaded in it, before the Run that needs
        them (the window asks when it opens and when the model changes); it does not wait for them."""
        if self.engine is not None:
            self.engine.warm(config)

    @QtCore.Slot(str, str, object)
    def fit(self, runs_dir: str, device: str, threads) -> None:
        """`calibrate --fit` (the standard runs measured into runs_dir, then fitted), in the engine process
        when there is one."""
        self.started.emit()
        try:
            if self.engine is not None:
                report = self.engine.fit(runs_dir, device, threads,
                                         lambda message, fraction: self.event.emit(Progress(message, fraction)),
                                         self.should_stop)
            else:   # a worker that runs in this thread (tests that patch the backend)
                from backend.fitting import measure_and_fit
                report = measure_and_fit(runs_dir, device, threads, lambda line: self.event.emit(Progress(line)),
                                         self.should_stop)
        except Exception as exc:
            self.failed.emit(one_line(exc))
            return
        self.fitted.emit(report)

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

    # ---- the record on disk ------------------------------------------------------------------

    def _start_recording(self) -> None:
        self.discard_recording()
        try:
            self.recording = Path(tempfile.mkdtemp(prefix="phasescope-run-"))
            self._writer = RunWriter(self.recording)
        except (OSError, InputError):   # no room for a temporary folder: the run goes on, Export has what is held
            self.discard_recording()

    def _record(self, batch: RecordBatch) -> None:
        try:
            self._writer.add(batch)
        except (OSError, RunError):   # e.g. the disk filled up: never fail the run for its copy
            self.discard_recording()

    def _close_recording(self, result: RunFinished | None) -> None:
        """Rename the streamed files into place; run.json etc. from the result (a failed run has none)."""
        if self._writer is not None:
            data = result.data if result is not None and isinstance(result.data, RunData) else None
            try:
                self._writer.close(data or RunData(run_id=result.run_id if result is not None else ""))
            except Exception:   # the files or the metadata could not be finished: the copy is incomplete
                self.discard_recording()
            self._writer = None
        self.recorded.emit(str(self.recording) if self.recording is not None else "")

    def discard_recording(self) -> None:
        """Close and remove the last run's folder."""
        if self._writer is not None:
            self._writer.abandon()
            self._writer = None
        if self.recording is not None:
            shutil.rmtree(self.recording, ignore_errors=True)
            self.recording = None

    # ---- events ------------------------------------------------------------------------------

    def _emit(self, item) -> None:
        if isinstance(item, (RecordBatch, RequestsArrived)):
            self._pending.append(item)
            if time.monotonic() - self._last_flush >= self._interval:
                self._flush()
            return
        self._flush()
        if isinstance(item, KvMap) and self._writer is not None:   # the map of the run when it is opened later
            try:
                self._writer.add_kv(item)
            except (OSError, RunError):
                self.discard_recording()
        if isinstance(item, RepeatStarted) and item.index > 1:
            self._start_recording()   # the last repeat's record only (the window shows one repeat at a time)
        self.event.emit(item)

    def _flush(self) -> None:
        """Send what is pending: the arrivals (their lanes first, in arrival order), then the records."""
        arrivals, batch, _ = coalesce(self._pending)   # only arrivals and records are held back
        self._pending = []
        if arrivals is not None:
            self.event.emit(arrivals)
        if batch is not None:
            if self._writer is not None:
                self._record(batch)
            self.records.emit(batch)
        self._last_flush = time.monotonic()


class WorkerThread:
    """A RunWorker living in its own QThread for the window's lifetime."""

    def __init__(self, worker: RunWorker | None = None):
        # Python's cycle collector runs on this (the window's) thread only while the worker's runs
        # (gui/collector.py): a run allocating in the worker's thread must never free a Qt object there
        self.cycle_collector = MainThreadCollector(None)
        self.thread = QtCore.QThread()
        self.thread.setObjectName("phasescope-run")
        self.worker = worker or RunWorker()
        self.worker.moveToThread(self.thread)
        self.thread.finished.connect(self.worker.deleteLater)
        _threads.add(self.thread)
        self.thread.start()

    def stop_and_join(self, keep: Callable[[Path], object] | None = None) -> None:
        """Ask the run to stop at its next step boundary, end the thread and wait for it, then
        end the engine process (no process outlives the window). `keep` takes the last run's
        recording (a run stopped by the window's shutdown) instead of its being removed."""
        if not self.thread.isRunning():
            self.cycle_collector.stop()
            return
        self.worker.request_stop()
        self.thread.quit()
        self.thread.wait()
        self.cycle_collector.stop()   # the worker thread has ended: collecting anywhere is safe again
        if keep is not None and self.worker.recording is not None:
            keep(self.worker.recording)
            self.worker.recording = None
        self.worker.discard_recording()
        if self.worker.engine is not None:
            self.worker.engine.close()
