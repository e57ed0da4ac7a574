"""Draws a tour step's Figure (gui/tour/finding.py) on a pyqtgraph plot, in the window's styles:
curves, bars, and what to look at (a shaded span, a line, an arrow with its label) placed on
the measured data.

Log axes are drawn by hand (log2 for batch sizes and prompt lengths, log10 for times and
rates, ticks named in the data's units) so labels and arrows sit at the same coordinates as
the curves they point at."""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui

from gui.tour.finding import Figure, Mark
from gui.views.plot_style import outline_color, style_plot, swatch_title

LABEL_FILL = (255, 255, 255, 220)
AXIS_WIDTH = 96
AXIS_HEIGHT = 44
LEGEND_CHARS = 60   # of a legend's names a line: about 480 px at the plot's 10 pt


def _fx(fig: Figure, x):
    return math.log2(x) if fig.log_x else x


def _fy(fig: Figure, y):
    return math.log10(y) if fig.log_y and y > 0 else (math.nan if fig.log_y else y)


def _log10_ticks(lo: float, hi: float) -> list[tuple[float, str]]:
    """1, 2, 5, 10, 20, 50 ... between 10**lo and 10**hi."""
    ticks = []
    for k in range(math.floor(lo) - 1, math.ceil(hi) + 1):
        for m in (1, 2, 5):
            v = m * 10.0 ** k
            if lo - 1e-9 <= math.log10(v) <= hi + 1e-9:
                ticks.append((math.log10(v), f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    return ticks


def _title(title: str, legend: list[tuple]) -> str:
    """The title over its legend, the legend's entries in lines of at most LEGEND_CHARS: one line of
    both is wider than the central view of a 1,366 px screen, and a title wider than its plot widens
    the plot past the view's right edge (its right end and labels cut)."""
    lines, line, width = [], [], 0
    for entry in legend:
        if line and width + len(entry[0]) > LEGEND_CHARS:
            lines.append(line)
            line, width = [], 0
        line.append(entry)
        width += len(entry[0]) + 4
    if line:
        lines.append(line)
    return "<br>".join([title] + [swatch_title("", part).removeprefix("&nbsp;&nbsp;&nbsp;") for part in lines])


def draw(plot: pg.PlotWidget, fig: Figure) -> None:
    """Replace what `plot` shows with `fig`."""
    item = plot.getPlotItem()
    item.clear()
    legend = [(c.name, c.color, "&#9473;" if c.line else "&#9679;") for c in fig.curves] + \
             list(dict.fromkeys((r.name, r.color) for r in fig.rects))   # once each (a phase on several rows)
    style_plot(item, _title(fig.title, legend), fig.x_label, fig.y_label)
    item.getAxis("left").setWidth(AXIS_WIDTH)     # named ticks ("decode worker", "1,000") need the room
    item.getAxis("bottom").setHeight(AXIS_HEIGHT)
    for name in ("bottom", "left"):   # a name set on an axis of unchanged size keeps its old place: place it
        item.getAxis(name).resizeEvent(None)
    # the plot item keeps the width a wider title gave it until the widget itself resizes: fit it again,
    # or its right end (the last points, their labels) lies past the widget's edge
    plot.resizeEvent(None)
    xs, ys = [], []
    for c in fig.curves:
        x = np.array([_fx(fig, v) for v in c.x], dtype=float)
        y = np.array([_fy(fig, v) for v in c.y], dtype=float)
        pen = pg.mkPen(c.color, width=2, style=QtCore.Qt.PenStyle.DashLine if c.dash else QtCore.Qt.PenStyle.SolidLine)
        plot.plot(x, y, pen=pen if c.line else None, symbol=c.symbol or ("o" if not c.line else None), symbolSize=6,
                  symbolBrush=c.color, symbolPen=c.color)
        xs += list(x)
        ys += list(y)
    for r in fig.rects:
        x0 = np.array([_fx(fig, v) for v in r.x0], dtype=float)
        x1 = np.array([_fx(fig, v) for v in r.x1], dtype=float)
        bars = pg.BarGraphItem(x0=x0, x1=x1, y0=np.array(r.y0, dtype=float), y1=np.array(r.y1, dtype=float),
                               brush=QtGui.QColor(r.color), pen=pg.mkPen(outline_color(r.color)))
        plot.addItem(bars)
        xs += list(x0) + list(x1)
        ys += list(r.y0) + list(r.y1)
    finite_x = [v for v in xs if math.isfinite(v)]
    finite_y = [v for v in ys if math.isfinite(v)]
    if not finite_x or not finite_y:
        return
    x_lo, x_hi = min(finite_x), max(finite_x)
    y_lo, y_hi = min(finite_y), max(finite_y)
    if fig.rects and not fig.log_y:
        y_lo = min(y_lo, 0.0)
    # a named tick ("float32 (32.0)") is centred on its point: at the edge it needs half its width beside it,
    # or the axis drops it
    x_pad = (x_hi - x_lo) * (0.15 if fig.x_ticks is not None else 0.06) or 0.5
    rows = sum(1 for m in fig.marks if m.kind in ("region", "vline"))
    y_span = (y_hi - y_lo) or 1.0
    top = y_hi + y_span * (0.12 + 0.1 * rows)   # room above the data for the labels of spans and lines
    item.setXRange(x_lo - x_pad, x_hi + x_pad, padding=0)
    y_lo -= y_span * 0.04
    item.setYRange(y_lo, top, padding=0)
    item.getViewBox().setMouseEnabled(x=True, y=True)
    _ticks(item, fig, (x_lo, x_hi), (y_lo, top))
    row = 0
    for mark in fig.marks:
        row = _mark(plot, fig, mark, row, top, (x_lo - x_pad, x_hi - x_lo + 2 * x_pad, top - y_lo))


def _ticks(item: pg.PlotItem, fig: Figure, x_range, y_range) -> None:
    bottom, left = item.getAxis("bottom"), item.getAxis("left")
    if fig.x_ticks is not None:
        bottom.setTicks([[(_fx(fig, x), text) for x, text in fig.x_ticks]])
    elif fig.log_x:
        lo, hi = x_range
        bottom.setTicks([[(float(k), f"{2 ** k:,}") for k in range(math.floor(lo), math.ceil(hi) + 1)]])
    else:
        bottom.setTicks(None)
    if fig.y_ticks is not None:
        left.setTicks([fig.y_ticks])
    elif fig.log_y:
        left.setTicks([_log10_ticks(*y_range)])
    else:
        left.setTicks(None)


def _mark(plot: pg.PlotWidget, fig: Figure, mark: Mark, row: int, top: float,
          spans: tuple[float, float, float]) -> int:
    """Draw one mark; the labels of spans and lines take rows from the top down."""
    color = QtGui.QColor(mark.color)
    x0 = _fx(fig, mark.x0)
    left, x_span, y_span = spans
    if mark.kind in ("region", "vline"):
        if mark.kind == "region":
            shade = QtGui.QColor(color)
            shade.setAlpha(45)
            region = pg.LinearRegionItem(values=(x0, _fx(fig, mark.x1)), movable=False, brush=shade,
                                         pen=pg.mkPen(color, width=1))
            region.setZValue(-10)   # under the bars it marks
            plot.addItem(region, ignoreBounds=True)
        else:
            plot.addItem(pg.InfiniteLine(x0, angle=90, movable=False, pen=pg.mkPen(color, width=2,
                                         style=QtCore.Qt.PenStyle.DashLine)), ignoreBounds=True)
        # a label reads rightwards from its span or line, leftwards when that is near the right edge (a span's
        # from its right end): a central view is narrower than the text of a long span's label
        leftwards = x0 > left + (0.55 if mark.kind == "vline" else 0.4) * x_span
        at = _fx(fig, mark.x1) if mark.kind == "region" and leftwards else x0
        label = pg.TextItem(mark.text, color=color, anchor=(1, 0) if leftwards else (0, 0), fill=LABEL_FILL)
        label.setZValue(20)   # over the spans' edges and the bars
        label.setPos(at, top - y_span * 0.09 * row)
        plot.addItem(label, ignoreBounds=True)
        return row + 1
    y = _fy(fig, mark.y)
    if not math.isfinite(y):
        return row
    # the arrow comes from above, on the side with more room; its label sits by its tail
    right = x0 < left + 0.45 * x_span
    arrow = pg.ArrowItem(pos=(x0, y), angle=-45 if right else -135, tipAngle=30, headLen=14, tailLen=26,
                         tailWidth=2, brush=color, pen=pg.mkPen(color))
    plot.addItem(arrow, ignoreBounds=True)
    label = pg.TextItem(mark.text, color=color, anchor=(0, 1) if right else (1, 1), fill=LABEL_FILL)
    label.setZValue(20)
    label.setPos(x0 + (1 if right else -1) * x_span * 0.025, y + y_span * 0.05)
    plot.addItem(label, ignoreBounds=True)
    return row


def message(plot: pg.PlotWidget, title: str, text: str) -> None:
    """An empty figure saying why (not run yet, failed)."""
    item = plot.getPlotItem()
    item.clear()
    style_plot(item, title, "", "")
    for name in ("bottom", "left"):
        item.getAxis(name).resizeEvent(None)
    for name in ("bottom", "left"):
        item.getAxis(name).setTicks(None)
    item.setXRange(0, 1, padding=0)
    item.setYRange(0, 1, padding=0)
    label = pg.TextItem(text, color="#555", anchor=(0.5, 0.5))
    label.setPos(0.5, 0.5)
    plot.addItem(label)
