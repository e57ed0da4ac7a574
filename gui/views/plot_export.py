"""`compare --out`'s PNGs, drawn offscreen with the window's own libraries (PySide6, pyqtgraph).

The backend hands over plain `backend.results.plots.Plot` records; this draws each as a pyqtgraph
plot (one curve per run, in the colours the window gives references, a legend with the runs'
labels) and saves it. Without a display Qt is started on its offscreen platform, so the command
works headless. Any failure to draw is reported to the caller as an OSError, which the CLI prints
as one line, after compare.csv is already written.
"""
from __future__ import annotations

import os
from pathlib import Path

from backend.results.plots import Plot

# distinct on white, for people with the common colour-vision deficiencies (Okabe-Ito)
COLOURS = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
SIZE = (900, 560)


def offscreen_pyqtgraph(what: str):
    """(the QApplication, pyqtgraph) for drawing PNGs without a window (offscreen where there is no display);
    OSError naming `what` when PySide6 or pyqtgraph is missing."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    try:
        from PySide6 import QtWidgets
        import pyqtgraph as pg
        import pyqtgraph.exporters  # noqa: F401 -- ImageExporter, below
    except ImportError as exc:
        raise OSError(f"{what} needs PySide6 and pyqtgraph ({exc})") from None
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([])
    pg.setConfigOptions(antialias=True, background="w", foreground="k")
    return app, pg


def export_png(app, item, path: Path, width: int) -> Path:
    """A plot item written to `path` as a PNG `width` pixels wide; OSError when it is not written."""
    import pyqtgraph.exporters
    app.processEvents()
    exporter = pyqtgraph.exporters.ImageExporter(item)
    exporter.parameters()["width"] = width
    if not exporter.export(str(path)) and not Path(path).is_file():
        raise OSError(f"could not write {path}")
    return Path(path)


def render_plots(plots: list[Plot], folder: Path) -> list[Path]:
    """Draw every plot into folder / plot.file_name; the paths written."""
    app, pg = offscreen_pyqtgraph("the PNGs")
    written = []
    for plot in plots:
        widget = pg.PlotWidget()
        widget.resize(*SIZE)
        item = widget.getPlotItem()
        item.setTitle(plot.title)
        item.setLabel("bottom", plot.x_label)
        item.setLabel("left", plot.y_label)
        item.showGrid(x=True, y=True, alpha=0.2)
        item.setLogMode(x=plot.log_x, y=False)
        item.addLegend(offset=(10, 10))   # each curve's name= enters it
        for i, series in enumerate(plot.series):
            xs = series.xs
            if plot.log_x:   # pyqtgraph's log axis takes positive values only
                pairs = [(x, y) for x, y in zip(xs, series.ys) if x > 0]
                xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
            else:
                ys = series.ys
            pen = pg.mkPen(COLOURS[i % len(COLOURS)], width=2)
            item.plot(xs, ys, pen=pen, name=series.label, symbol=None if plot.steps else "o", symbolSize=6,
                      symbolBrush=COLOURS[i % len(COLOURS)])
        written.append(export_png(app, item, Path(folder) / plot.file_name, SIZE[0]))
        widget.deleteLater()
    app.processEvents()
    return written
