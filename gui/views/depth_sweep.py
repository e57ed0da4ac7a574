"""A depth sweep's points: what `sweep depth` prints, drawn.

Both phases against the context depth, one curve each: prefill tokens/s (the pp tokens timed on top
of the depth) and decode tokens/s (the tg decode steps at that depth), on a logarithmic axis because
prefill runs tens to hundreds of times faster than decode and both fall with depth. Under the plot,
the lines the CLI ends with: how the figures are defined, and whether a prefix cache served any prompt.
"""
from __future__ import annotations

import math

import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from backend.run_info import RunInfo
from backend.summary import Summary
from backend.sweeps.depth import cache_line

from gui.state.run_store import RunStore
from gui.views.plot_style import CROSSOVER_COLOR, MEASURED_COLOR, cosmetic_pen, style_plot, swatch_title

PREFILL_COLOR, DECODE_COLOR = MEASURED_COLOR, CROSSOVER_COLOR
DEFINITION = ("prefill tokens/s = pp / (TTFT of depth + pp tokens - TTFT of depth tokens); decode tokens/s = tg / "
              "the time of the tg tokens after the first; every prompt unique from its first token (docs/sweeps.md)")


def finite(x) -> bool:
    return x is not None and not math.isnan(x) and x > 0


class DepthSweepView(pg.PlotWidget):
    def __init__(self, store: RunStore, parent=None):
        super().__init__(parent)
        self.setObjectName("depthSweepPlot")
        self.store = store
        self._seen = None
        plot = self.getPlotItem()
        plot.setLogMode(y=True)
        plot.getViewBox().setDefaultPadding(0.1)
        self.prefill = plot.plot([], [], pen=cosmetic_pen(PREFILL_COLOR, 2), symbol="o", symbolSize=8,
                                 symbolBrush=PREFILL_COLOR)
        self.decode = plot.plot([], [], pen=cosmetic_pen(DECODE_COLOR, 2), symbol="s", symbolSize=8,
                                symbolBrush=DECODE_COLOR)
        legend = swatch_title("", [("prefill tokens/s", PREFILL_COLOR), ("decode tokens/s", DECODE_COLOR)])
        style_plot(plot, f"Prefill and decode vs context depth<br><span style='font-size:8pt'>{legend}</span>",
                   "context depth (tokens already in the context)", "tokens/s (log)")
        self.note = QtWidgets.QLabel()
        self.note.setObjectName("depthSweepNote")
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: #555;")
        self.note.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)

    def refresh(self) -> None:
        store = self.store
        key = (store.generation, len(store.depth_points), id(store.finished))
        if key == self._seen:
            return
        self._seen = key
        pts = store.depth_points
        # a log axis takes the values as they are and draws their log: zero or NaN has no place on it
        for curve, value in ((self.prefill, lambda p: p.prefill_tokens_per_s),
                             (self.decode, lambda p: p.decode_tokens_per_s)):
            shown = [p for p in pts if finite(value(p))]
            curve.setData([float(p.depth) for p in shown], [value(p) for p in shown])
        self.note.setText("\n".join(self.notes()))
        self.note.setVisible(bool(self.note.text()))

    def notes(self) -> list[str]:
        finished = self.store.finished
        if not self.store.depth_points:
            return ["run a depth sweep (the run kind “Depth sweep”) to add points here"]
        notes = [DEFINITION]
        if finished is not None and finished.summary.kind == "depth":
            s = finished.summary or Summary()
            info = finished.data.info if finished.data is not None else RunInfo()
            notes.append(cache_line(s, info))
            if s.note:
                notes.append(s.note)
        return notes
