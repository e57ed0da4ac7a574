"""The KV cache on the engine-step strip: the share of the cache held after each step and the prefix hit
rate of the run so far, two thin lines on a 0-100 % axis of their own at the strip's right.

On the strip rather than only in the KV cache tab because they explain its bars: a prefill bar is short
when its prompt was found cached (the hit rate climbs), and the batch stops growing when the cache is
full (the held line at the top). The bars keep their log token axis; the lines have their own linear view,
x-linked to the strip's, that takes no mouse (pans, zooms and hover go to the strip), its scale and the
lines' names on the right axis (not in the title: a longer title widens the plot past its dock). The
window gives that axis, and the plots that share the strip's time axis an empty one, a fixed width, so
their times stay aligned. The lines appear once a step reports a KV capacity (not for a remote server's
run), the hit rate once a prompt was found cached.
While a run goes the lines are redrawn at most REDRAW_S apart: the strip itself repaints at 30 Hz.
"""
from __future__ import annotations

import time

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore

from gui.state.run_store import RunStore
from gui.views.plot_style import cosmetic_pen

HELD_COLOR, HIT_COLOR = "#1b9e77", "#b8860b"
REDRAW_S = 0.25
# short: the strip's plot is 120-150 pixels high on 1,366x768 and 1,920x1,080 screens, and a longer label
# is cut at the top ("KV held - - prefix hit %" was at both); the axis's tooltip says it whole
AXIS_LABEL = (f'<span style="color:{HELD_COLOR}">&#8212; KV</span> '
              f'<span style="color:{HIT_COLOR}">- - hit</span> %')
AXIS_TIP = ("Right axis, 0-100 %: the solid line is the share of the KV cache held after each step; the dashed "
            "line is the prefix hit rate so far (prompt tokens found cached over all prompt tokens)")


class KvOverlay:
    def __init__(self, plot: pg.PlotItem, store: RunStore):
        self.plot = plot
        self.store = store
        self.main = plot.getViewBox()
        self.view = pg.ViewBox(enableMenu=False)
        self.view.setMouseEnabled(x=False, y=False)
        self.view.setYRange(0, 100, padding=0.02)
        self.view.enableAutoRange(enable=False)
        self.view.setZValue(self.main.zValue() + 1)   # the lines over the bars
        plot.scene().addItem(self.view)
        self.view.setXLink(self.main)
        plot.showAxis("right")
        self.axis = plot.getAxis("right")
        self.axis.setLogMode(False, False)   # percentages, whatever the bars' token axis
        self.axis.linkToView(self.view)
        self.held = pg.PlotDataItem(pen=cosmetic_pen(HELD_COLOR, 1))
        dashed = cosmetic_pen(HIT_COLOR, 1)
        dashed.setStyle(QtCore.Qt.PenStyle.DashLine)
        self.hit = pg.PlotDataItem(pen=dashed)
        for curve in (self.held, self.hit):
            curve.setDownsampling(auto=True, method="peak")
            curve.setClipToView(True)
            self.view.addItem(curve)
        self.main.sigResized.connect(self._fit)
        self._seen = None
        self._drawn_at = float("-inf")
        self.shown = False
        self._show(False)

    def _fit(self, *_) -> None:
        self.view.setGeometry(self.main.sceneBoundingRect())

    def _show(self, shown: bool) -> None:
        """The lines, the axis's numbers and its label; the axis keeps its room either way."""
        self.shown = shown
        self.axis.setStyle(showValues=shown)
        self.axis.setLabel(AXIS_LABEL if shown else None)
        self.axis.setToolTip(AXIS_TIP if shown else "")
        self.view.setVisible(shown)

    def refresh(self, running: bool) -> None:
        curve = self.store.kv_curve
        key = (self.store.generation, curve.num_appended)
        if key == self._seen or running and time.monotonic() - self._drawn_at < REDRAW_S:
            return
        self._seen, self._drawn_at = key, time.monotonic()
        t, held, hit = curve.column("time_ms"), curve.column("held"), curve.column("hit")
        has_kv = bool(len(t)) and bool(np.isfinite(held).any())
        if has_kv != self.shown:
            self._show(has_kv)
            self._fit()
        if not has_kv:
            self.held.setData([], [])
            self.hit.setData([], [])
            return
        self.held.setData(t, 100.0 * np.nan_to_num(held), skipFiniteCheck=True)
        found = np.isfinite(hit)
        if found.any() and hit[found].max() > 0:   # a run that reused nothing draws no flat line at 0
            self.hit.setData(t[found], 100.0 * hit[found], skipFiniteCheck=True)
        else:
            self.hit.setData([], [])
