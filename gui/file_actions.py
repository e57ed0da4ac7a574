"""The window's File menu: Export CSV, Open run and Save plot as PNG (methods of MainWindow)."""
from __future__ import annotations

import pyqtgraph as pg
import pyqtgraph.exporters  # noqa: F401  (ImageExporter is looked up as pg.exporters.*)
from PySide6 import QtWidgets

from backend.errors import InputError
from backend.export import read_run, write_run


class FileActions:
    """Mixed into MainWindow: uses its store, views, status bar and show_error."""

    def export_csv(self, folder: str) -> bool:
        """Write the run on screen (whole or partial) as the CLI's --out would."""
        if self.store.num_requests == 0 and len(self.store.steps) == 0:
            self.show_error("nothing to export yet: run something or open a run first")
            return False
        try:
            path = write_run(folder, self.store.to_run_data())
        except (InputError, OSError) as exc:
            self.show_error(f"export failed: {exc}")
            return False
        self.statusBar().showMessage(f"Exported CSV to {path}")
        return True

    def open_run(self, folder: str) -> bool:
        if self.running:
            return False
        try:
            run = read_run(folder)
        except InputError as exc:
            self.show_error(str(exc))
            return False
        self.store.load(run)
        self.select_request(None)
        self._show_run_info(run.info)
        self.timeline.set_follow(True)
        self.repaint_views()
        self.statusBar().showMessage(f"Opened run {run.run_id or folder}: {len(run.steps)} steps, "
                                     f"{len(run.requests)} requests")
        return True

    def save_plot(self, path: str, plot: pg.PlotWidget | None = None) -> bool:
        plot = plot or self.current_plot
        image = pg.exporters.ImageExporter(plot.getPlotItem()).export(toBytes=True)
        if not image.save(path, "PNG"):   # QImage.save says only whether it worked
            self.show_error(f"could not save {path}: the folder is missing or not writable")
            return False
        self.statusBar().showMessage(f"Saved {plot.objectName()} to {path}")
        return True

    def _export_dialog(self) -> None:
        folder = QtWidgets.QFileDialog.getExistingDirectory(self, "Export CSV into folder")
        if folder:
            self.export_csv(folder)

    def _open_run_dialog(self) -> None:
        folder = QtWidgets.QFileDialog.getExistingDirectory(self, "Open a run folder")
        if folder:
            self.open_run(folder)

    def _save_plot_dialog(self) -> None:
        name = self.current_plot.objectName()
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, f"Save {name} as PNG", f"{name}.png", "PNG (*.png)")
        if path:
            self.save_plot(path)
