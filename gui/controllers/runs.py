"""Runs: the one owner of the worker's traffic. It hands runs, calibrations, fits and the engine's
warm-up to the worker thread (queued signals), takes in what comes back into the store, and says
what happened through its own signals; the window's views and the other controllers listen.
It touches no widget: the window turns `launched`, `runningChanged`, `event` and the rest into
what the views show."""
from __future__ import annotations

from pathlib import Path

from PySide6 import QtCore

from backend.config import RunKind, config_dict
from backend.events import EngineStatus, ModelLoaded, Progress, RepeatStarted

from gui.state.finish_text import run_finished_text
from gui.state.run_store import RunStore
from gui.views.metrics import repeats_text

# what a new repeat keeps of the store: the settings, the model, and an earlier sweep shown beside this run
REPEAT_KEEPS = ("config", "model", "info", "remote", "sweep_points", "sweep_context", "precision_points",
                "precision_summary")


class RunsController(QtCore.QObject):
    # queued to the worker's thread
    startRun = QtCore.Signal(object)
    startCalibration = QtCore.Signal(str)
    startFit = QtCore.Signal(str, str, object)   # runs folder, device, threads
    warmEngine = QtCore.Signal(object)           # the settings the engine process starts for, ahead of Run
    # in the window's thread, once the store has taken the news in
    launched = QtCore.Signal(object, str)        # (RunConfig, what): the store is fresh, the views start over
    runningChanged = QtCore.Signal(bool)
    repeatStarted = QtCore.Signal(object)        # a RepeatStarted past the first: the store holds only the settings
    event = QtCore.Signal(object)                # Progress, EngineStatus, ModelLoaded (after the store took it)
    finished = QtCore.Signal(object)             # a RunFinished
    failed = QtCore.Signal(str)                  # a run, calibration or fit that could not go on: one line
    ended = QtCore.Signal(object)                # after finished or failed: the RunFinished, or None when it failed
    calibrated = QtCore.Signal(object, str)      # GpuProfile, path written
    fitted = QtCore.Signal(object)               # a FitReport
    message = QtCore.Signal(str)                 # for the status bar
    error = QtCore.Signal(str)                   # for a message box

    def __init__(self, store: RunStore, worker, remote_url=lambda: "", parent: QtCore.QObject | None = None):
        """`worker`: the RunWorker living on the worker thread; `remote_url()`: the server a remote run
        goes to, for the status line."""
        super().__init__(parent)
        self.store = store
        self.worker = worker
        self.remote_url = remote_url
        self.running = False
        self.run_notes: list[str] = []   # a run's "note: ..." progress lines, kept for its final status
        self.startRun.connect(worker.run)
        self.startCalibration.connect(worker.calibrate)
        self.startFit.connect(worker.fit)
        self.warmEngine.connect(worker.warm)
        worker.event.connect(self.take_event)
        worker.records.connect(self.take_records)
        worker.finished.connect(self._on_finished)
        worker.recorded.connect(self._on_recorded)
        worker.failed.connect(self._on_failed)
        worker.calibrated.connect(self._on_calibrated)
        worker.fitted.connect(self._on_fitted)

    # ---- starting ----------------------------------------------------------------------------

    def launch(self, config, what: str = "") -> bool:
        """Start one run of these settings (`what`: how the status bar names it, besides its model and
        mode); False while another is under way."""
        if self.running:
            return False
        # the last sweep stays on the throughput plot (a precision sweep on its tab) while other runs
        # of the same model follow it
        store = self.store
        same_model = config.model.name == store.config.get("model", {}).get("name")
        sweep = (store.sweep_points, store.sweep_context) if same_model else ([], None)
        precision = (store.precision_points, store.precision_summary) if same_model else ([], None)
        store.reset()
        if config.mode not in (RunKind.SWEEP_BATCH, RunKind.SWEEP_PROMPT):   # each sweep keeps the other's tab
            store.sweep_points, store.sweep_context = sweep
        if config.mode != RunKind.SWEEP_PRECISION:
            store.precision_points, store.precision_summary = precision
        if config.mode == RunKind.SWEEP_BATCH:
            store.sweep_context = config.sweep_spec.context
        store.config = config_dict(config)
        store.remote = config.endpoint is not None
        self.run_notes = []
        self.launched.emit(config, what)
        self._set_running(True)
        where = f" on {self.remote_url()}" if store.remote else ""
        self.message.emit(f"Running {config.model.name}{where} ({config.mode}" + (f", {what}" if what else "") + ")…")
        self.worker.clear_stop()
        self.startRun.emit(config)
        return True

    def calibrate(self, device: str) -> None:
        if self.running:
            return
        self._set_running(True)
        self.message.emit(f"Calibrating {device}…")
        self.worker.clear_stop()
        self.startCalibration.emit(device)

    def fit(self, runs_dir: Path, device: str, threads) -> bool:
        """The standard runs measured and the cost model fitted to them, in the engine process."""
        if self.running:
            return False
        self._set_running(True)
        self.message.emit("Fitting the cost model: measuring the standard runs of the bundled model…")
        self.worker.clear_stop()
        self.startFit.emit(str(runs_dir), device, threads)
        return True

    def warm(self, config) -> bool:
        """Start the engine process for these settings ahead of Run (not while something runs)."""
        if self.running:
            return False
        self.warmEngine.emit(config)
        return True

    def stop(self) -> None:
        if self.running:
            self.worker.request_stop()
            self.message.emit("Stopping at the next step boundary…")

    def should_stop(self) -> bool:
        return self.worker.should_stop()

    def _set_running(self, running: bool) -> None:
        self.running = running
        self.runningChanged.emit(running)

    # ---- what comes back ---------------------------------------------------------------------

    def take_event(self, event) -> None:
        if isinstance(event, RepeatStarted):
            self._start_repeat(event)
            return
        self.store.add_event(event)
        if isinstance(event, Progress) and event.message.startswith("note:"):
            self.run_notes.append(event.message)   # the bar moves on at once: kept for the status line
        if isinstance(event, (Progress, EngineStatus, ModelLoaded)):
            self.event.emit(event)

    def take_records(self, batch) -> None:
        self.store.add_batch(batch)

    def _start_repeat(self, event: RepeatStarted) -> None:
        """Each repeat's times start at 0: the views show one repeat at a time, the last one kept at the end."""
        store = self.store
        if event.index > 1:
            kept = {name: getattr(store, name) for name in REPEAT_KEEPS}
            store.reset()
            for name, value in kept.items():
                setattr(store, name, value)
            mode = RunKind.recorded(store.config.get("mode"))
            if mode in (RunKind.SWEEP_BATCH, RunKind.SWEEP_PROMPT):
                store.sweep_points = []   # a sweep's points are measured again
            elif mode == RunKind.SWEEP_PRECISION:
                store.precision_points, store.precision_summary = [], None
            self.repeatStarted.emit(event)
        self.message.emit(f"Running {store.config.get('model', {}).get('name', '')}: "
                          f"repeat {event.index} of {event.count}…")

    def _on_recorded(self, folder: str) -> None:
        """The worker's folder with the run's complete record (Export CSV copies from it)."""
        self.store.source = Path(folder) if folder else None

    def _on_finished(self, result) -> None:
        self.store.add_event(result)
        self._set_running(False)
        if result.error:
            self.error.emit(f"the run failed part way: {result.error} (the records so far are kept)")
        else:
            self.message.emit(self._finished_text(result))
        self.finished.emit(result)
        self.ended.emit(result)

    def _finished_text(self, result) -> str:
        if result.repeats is not None:
            return f"{'Stopped' if result.stopped else 'Finished'}: " + repeats_text(result.repeats)
        # a remote run's own doubts: client-limited, estimated counts, early stops
        warnings = result.data.info.warnings if result.data is not None else []
        return run_finished_text(result, self.run_notes, warnings)

    def _on_failed(self, message: str) -> None:
        self._set_running(False)
        self.error.emit(message)
        self.failed.emit(message)
        self.ended.emit(None)

    def _on_calibrated(self, profile, path: str) -> None:
        self._set_running(False)
        self.calibrated.emit(profile, path)

    def _on_fitted(self, report) -> None:
        self._set_running(False)
        self.fitted.emit(report)
