"""The window's File menu: Export CSV, Open run and Save plot as PNG; each dialog opens in the folder
its kind used last, and a run opened or exported is announced (`used`) for Recent runs."""
from __future__ import annotations

import os
from pathlib import Path

import pyqtgraph as pg
import pyqtgraph.exporters  # noqa: F401  (ImageExporter is looked up as pg.exporters.*)
from PySide6 import QtCore, QtWidgets

from backend.config import LOAD_SWEEPS, RunKind, SweepKind
from backend.errors import InputError, RunError
from backend.results.export import LONG_FILES, ensure_writable, write_run
from backend.sweeps.points import read_points, write_points

from gui.settings import remember_folder, start_folder
from gui.state.references import read_run_folder
from gui.state.run_store import RunStore

def export_run(folder: str | os.PathLike, store: RunStore) -> tuple[Path, bool]:
    """Write the run on screen as the CLI's --out would; returns the folder and whether it is complete.

    Steps and tokens are copied from the run's own folder (the worker's recording, or the
    folder it was opened from); requests, summary and run.json come from the store, so a
    failed run's unfinished requests are kept. All files are written, or none (a full disk
    leaves the target as it was).
    """
    path = ensure_writable(folder)
    source = store.source
    if source is not None and not all((source / name).is_file() for name in LONG_FILES):
        source = None
    data = store.to_run_data(with_records=source is None)
    points = store.sweep_points
    mode = RunKind.recorded(store.config.get("mode"))
    if mode == RunKind.SWEEP_PRECISION:
        write_points(path, SweepKind.PRECISION, store.precision_points, data, records_from=source)
    elif mode == RunKind.SWEEP_DEPTH:   # as `sweep depth --out` writes it
        write_points(path, SweepKind.DEPTH, store.depth_points, data, records_from=source)
    elif mode is not None and mode.sweep_kind is not None and points:
        write_points(path, points[0].kind, points, data, records_from=source)
    elif mode in LOAD_SWEEPS:   # as the CLI writes a load sweep's --out
        write_points(path, mode.sweep_kind, store.pd_points or store.load_points, data, records_from=source)
    else:
        write_run(path, data, records_from=source)
    return path, source is not None or store.is_complete


class FilesController(QtCore.QObject):
    """Reads and writes run folders for the store on screen; says what it did through its signals."""

    opened = QtCore.Signal(object, object, object)   # (RunData, RunKind or None, SweepKind or None): the store holds it now
    used = QtCore.Signal(str)                     # a run folder opened or exported (Recent runs)
    message = QtCore.Signal(str)
    error = QtCore.Signal(str)

    def __init__(self, store: RunStore, runs, current_plot, parent: QtWidgets.QWidget):
        """`runs`: the RunsController (nothing is read or written while it runs); `current_plot()`: the
        plot last clicked (Save plot as PNG); `parent`: the dialogs' parent."""
        super().__init__(parent)
        self.store = store
        self.runs = runs
        self.current_plot = current_plot
        self.parent_widget = parent

    def export_csv(self, folder: str) -> bool:
        """Write the run on screen (whole or partial) as the CLI's --out would."""
        if self.runs.running:
            self.error.emit("a run is under way: stop it or let it end, then export")
            return False
        store = self.store
        if store.num_requests == 0 and store.num_steps == 0 and not (store.load_points or store.pd_points
                                                                      or store.depth_points):
            self.error.emit("nothing to export yet: run something or open a run first")
            return False
        try:
            path, complete = export_run(folder, store)
        except (InputError, RunError) as exc:
            self.error.emit(f"export failed: {exc}")
            return False
        note = "" if complete else (f" (the run's record on disk was lost: only its newest "
                                    f"{len(store.steps):,} steps)")
        self.message.emit(f"Exported CSV to {path}{note}")
        self.used.emit(str(path))
        return True

    def open_run(self, folder: str) -> bool:
        if self.runs.running:
            return False
        try:
            run, sweep, precision = read_run_folder(folder)
            mode = RunKind.SWEEP_PRECISION if precision else RunKind.recorded(run.config.get("mode"))
            # a load sweep's points (rate, concurrency, pd-ratio): the load sweep view draws them
            kind, points = read_points(folder) if mode in (*LOAD_SWEEPS, RunKind.SWEEP_DEPTH) else (None, [])
        except InputError as exc:
            self.error.emit(str(exc))
            return False
        self.store.load(run, folder, sweep, precision)
        self.store.pd_points = points if kind is SweepKind.PD_RATIO else []
        self.store.load_points = points if kind in (SweepKind.RATE, SweepKind.CONCURRENCY) else []
        self.store.depth_points = points if kind is SweepKind.DEPTH else []
        self.opened.emit(run, mode, sweep[0].kind if sweep else None)
        self.message.emit(f"Opened run {run.run_id or folder}: {len(run.steps)} steps, {len(run.requests)} requests")
        self.used.emit(folder)
        return True

    def save_plot(self, path: str, plot: pg.PlotWidget | None = None) -> bool:
        plot = plot or self.current_plot()
        image = pg.exporters.ImageExporter(plot.getPlotItem()).export(toBytes=True)
        if not image.save(path, "PNG"):   # QImage.save says only whether it worked
            self.error.emit(f"could not save {path}: the folder is missing or not writable")
            return False
        self.message.emit(f"Saved {plot.objectName()} to {path}")
        return True

    def export_dialog(self) -> None:
        folder = QtWidgets.QFileDialog.getExistingDirectory(self.parent_widget, "Export CSV into folder",
                                                            start_folder("export"))
        if folder:
            remember_folder("export", folder)
            self.export_csv(folder)

    def open_run_dialog(self) -> None:
        folder = QtWidgets.QFileDialog.getExistingDirectory(self.parent_widget, "Open a run folder",
                                                            start_folder("runs"))
        if folder:
            remember_folder("runs", str(Path(folder).parent))   # the next one is likely a sibling
            self.open_run(folder)

    def save_plot_dialog(self) -> None:
        name = self.current_plot().objectName()
        start = str(Path(start_folder("plots") or ".") / f"{name}.png")
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self.parent_widget, f"Save {name} as PNG", start,
                                                        "PNG (*.png)")
        if path:
            remember_folder("plots", path)
            self.save_plot(path)
