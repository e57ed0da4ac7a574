"""Colours, pens and the shared drawing helpers of the window's plots."""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6 import QtGui, QtWidgets

from backend.records import Phase

pg.setConfigOptions(background="w", foreground="#222", antialias=False)

PHASE_COLORS = {Phase.PREFILL: "#e6772e", Phase.DECODE: "#2f6fd6", Phase.MIXED: "#8e44ad"}
VERIFY_COLOR = "#d63384"   # a verification step (speculative decoding): a decode step computing 1 + K tokens
QUEUED_COLOR = "#b5b5b5"
TICK_COLOR = (255, 255, 255, 190)   # light ticks keep the decode lane readable when they are dense
HIGHLIGHT_COLOR = (255, 200, 0, 90)
MEASURED_COLOR = "#2f6fd6"
STEP_TIME_COLOR = "#e6772e"
PREDICTED_COLOR = "#555555"
LOCAL_COLOR = "#27ae60"
SIMULATED_COLOR = "#16a085"          # this machine's cost model beside the measured points
PROFILE_SIMULATED_COLOR = "#7f8c8d"  # the selected profile's cost model beside its roofline
CROSSOVER_COLOR = "#c0392b"
ROOF_COLORS = ("#7f6000", "#b03a8c")   # the compute roofs: a CPU's fp32 FMA roof, then its bf16 roof


class RateAxis(pg.AxisItem):
    """A log10 axis labelled 1, 2, 5, 10, ..., 1k: the 3..9 ticks stay marks without labels."""

    def logTickStrings(self, values, scale, spacing):
        out = []
        for v in values:
            x = 10.0 ** v * scale
            mantissa = round(x / 10.0 ** np.floor(np.log10(x)), 3) if x > 0 else 0
            out.append(si_number(x) if mantissa in (1.0, 2.0, 5.0) else "")
        return out


def si_number(x: float) -> str:
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= factor:
            return f"{x / factor:g}{suffix}"
    return f"{x:g}"


def cosmetic_pen(color, width: int = 1) -> QtGui.QPen:
    """A pen one pixel wide whatever the zoom, so thin segments stay visible."""
    pen = QtGui.QPen(QtGui.QColor(*color) if isinstance(color, tuple) else QtGui.QColor(color))
    pen.setWidth(width)
    pen.setCosmetic(True)
    return pen


def rect_path(x0: np.ndarray, x1: np.ndarray, y0: np.ndarray, y1: np.ndarray) -> QtGui.QPainterPath:
    """One path of many axis-aligned rectangles: one QGraphicsItem paints thousands of them."""
    x = np.column_stack([x0, x0, x1, x1]).ravel()   # (4n,) corners of each rectangle
    y = np.column_stack([y0, y1, y1, y0]).ravel()
    connect = np.tile(np.array([1, 1, 1, 0], dtype=np.int32), len(x0))   # no edge from one rectangle to the next
    return pg.arrayToQPath(x.astype(np.float64), y.astype(np.float64), connect=connect, finiteCheck=False)


def tick_path(x: np.ndarray, y0: np.ndarray, y1: np.ndarray) -> QtGui.QPainterPath:
    """Vertical segments (x, y0)-(x, y1), one per point."""
    xs = np.repeat(x, 2).astype(np.float64)
    ys = np.column_stack([y0, y1]).ravel().astype(np.float64)   # (2n,)
    return pg.arrayToQPath(xs, ys, connect="pairs", finiteCheck=False)


def swatch_title(title: str, items: list[tuple]) -> str:
    """A plot title carrying its own legend, so no legend box covers the data.

    items: (name, colour) for a filled square, or (name, colour, symbol).
    """
    keys = " ".join(f'<span style="color:{item[1]}"><b>{item[2] if len(item) > 2 else "&#9632;"}</b></span>'
                    f'&nbsp;{item[0]}&nbsp;' for item in items)
    return f"{title}&nbsp;&nbsp;&nbsp;{keys}"


def outline_color(color) -> QtGui.QColor:
    """A darker edge, so adjacent bars of one colour stay distinguishable."""
    return QtGui.QColor(color).darker(160)


def set_title(plot: pg.PlotItem, title: str) -> None:
    """pyqtgraph gives a title one 30 px row; a title of several lines gets the height it needs."""
    plot.setTitle(title, size="10pt")
    height = max(30, int(plot.titleLabel.item.boundingRect().height()) + 2)
    plot.titleLabel.setMaximumHeight(height)
    plot.layout.setRowFixedHeight(0, height)


def style_plot(plot: pg.PlotItem, title: str, bottom: str, left: str) -> None:
    set_title(plot, title)
    plot.setLabel("bottom", bottom)
    plot.setLabel("left", left)
    plot.showGrid(x=True, y=True, alpha=0.2)
    # An axis (with its grid, as wide as the plot) is repainted whenever data under it changes;
    # replaying its labels every frame costs more than the data. A cached pixmap is redrawn
    # only when the axis itself changes (its range), else blitted.
    for name in ("left", "bottom", "right"):
        plot.getAxis(name).setCacheMode(QtWidgets.QGraphicsItem.CacheMode.DeviceCoordinateCache)
        # the labels name their units; a "(x0.001)" added as the range changes would only confuse them
        plot.getAxis(name).enableAutoSIPrefix(False)
