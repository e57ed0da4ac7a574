"""A precision sweep: TTFT and TPOT at each weight precision beside its bytes, each as a ratio to the first.

Only the bytes per weight change from one precision to the next, so the plot shows the two
phases' opposite bottlenecks side by side: a decode step reads every weight, and its time
(TPOT) falls with the weights' bytes; a prefill is bound by its arithmetic, which a smaller
format does not reduce, and its time (TTFT) stays put. One x position per precision, in the
order measured; every curve is divided by the first precision's value, so 1 is "as the first".
"""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from backend.records import Phase
from backend.summary import Summary

from gui.views.plot_style import PHASE_COLORS, cosmetic_pen, set_title, style_plot, swatch_title
from gui.state.run_store import RunStore

BYTES_COLOR = "#333333"
TPOT_COLOR = PHASE_COLORS[Phase.DECODE]
TTFT_COLOR = PHASE_COLORS[Phase.PREFILL]
UNITY_COLOR = "#999999"
EMPTY_NOTE = "run a precision sweep (What to run: Precision sweep) to compare the weight formats"


def size_text(nbytes: float) -> str:
    """538 MB, 1.41 GB, 558 kB: three digits at most, whatever the model's size."""
    for factor, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if nbytes >= factor or unit == "kB":
            value = nbytes / factor
            return f"{value:.0f} {unit}" if value >= 100 else f"{value:.3g} {unit}"
    return f"{nbytes:.0f} B"


def ratios(values: list[float | None]) -> np.ndarray:
    """Each value over the first (NaN where a value, or the first, is missing)."""
    base = values[0] if values else None
    if not base:
        return np.full(len(values), np.nan)
    return np.array([np.nan if v is None else v / base for v in values], dtype=np.float64)


def tick_label(point) -> str:
    return f"{point.dtype}\n{size_text(point.weight_bytes)}"


class PrecisionView(pg.PlotWidget):
    """Curves made once, their data set by refresh() (the window's repaint timer) when the points change."""

    def __init__(self, store: RunStore, parent=None):
        super().__init__(parent)
        self.setObjectName("precisionPlot")
        self.store = store
        self.references = None      # a ReferenceSet (set_references): each precision sweep among them drawn too
        self._ref_curves: dict[int, tuple] = {}   # reference key -> its (TPOT, TTFT) curves, made once
        self._seen = None
        plot = self.getPlotItem()
        self.unity = pg.InfiniteLine(pos=1.0, angle=0, movable=False,
                                     pen=pg.mkPen(UNITY_COLOR, width=1, style=QtCore.Qt.PenStyle.DotLine))
        plot.addItem(self.unity, ignoreBounds=True)
        self.weight_bytes = plot.plot([], [], pen=cosmetic_pen(BYTES_COLOR, 2), symbol="s", symbolSize=8,
                                      symbolBrush=BYTES_COLOR, symbolPen=BYTES_COLOR)
        self.tpot = plot.plot([], [], pen=cosmetic_pen(TPOT_COLOR, 2), symbol="o", symbolSize=8,
                              symbolBrush=TPOT_COLOR, symbolPen=TPOT_COLOR)
        self.ttft = plot.plot([], [], pen=cosmetic_pen(TTFT_COLOR, 2), symbol="t1", symbolSize=9,
                              symbolBrush=TTFT_COLOR, symbolPen=TTFT_COLOR)
        dashed = QtCore.Qt.PenStyle.DashLine
        # a precision the profile has no peak for predicts nothing: its gap stays a gap
        self.predicted_tpot = plot.plot([], [], pen=pg.mkPen(TPOT_COLOR, width=2, style=dashed), connect="finite")
        self.predicted_ttft = plot.plot([], [], pen=pg.mkPen(TTFT_COLOR, width=2, style=dashed), connect="finite")
        for curve in (self.predicted_tpot, self.predicted_ttft):
            curve.setZValue(10)   # over the measured curves: a decode prediction lies on the bytes' line
        # this machine's cost model (what --simulate charges), a cross beside each measured point
        self.simulated_tpot = plot.plot([], [], pen=None, symbol="x", symbolSize=10, symbolBrush=TPOT_COLOR,
                                        symbolPen=TPOT_COLOR)
        self.simulated_ttft = plot.plot([], [], pen=None, symbol="x", symbolSize=10, symbolBrush=TTFT_COLOR,
                                        symbolPen=TTFT_COLOR)
        self.curves = {"bytes": self.weight_bytes, "tpot": self.tpot, "ttft": self.ttft,
                       "predicted_tpot": self.predicted_tpot, "predicted_ttft": self.predicted_ttft,
                       "simulated_tpot": self.simulated_tpot, "simulated_ttft": self.simulated_ttft}
        style_plot(plot, self._title("the first"), "", "ratio to the first precision")
        plot.showGrid(x=False, y=True, alpha=0.2)
        self.labels: list[str] = []   # the precisions' tick labels, as on screen
        bottom = plot.getAxis("bottom")
        bottom.setTicks([[]])
        # each tick is two lines (the precision, its weights' bytes), which the axis does not measure itself
        lines = QtGui.QFontMetrics(bottom.font()).lineSpacing()
        bottom.setHeight(2 * lines + 12)
        plot.setMouseEnabled(x=False, y=True)
        plot.hideButtons()
        plot.setXRange(-0.5, 0.5, padding=0)
        plot.setYRange(0, 1.2, padding=0)
        # the measured figures in words, under the plot (the window places it)
        self.note = QtWidgets.QLabel(EMPTY_NOTE)
        self.note.setObjectName("precisionNote")
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: #555;")
        self.note.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)

    def _title(self, base: str, profile: str | None = None) -> str:
        """The title with its legend under it, in short lines, as the throughput plot has it."""
        where = f" ({profile})" if profile else ""
        # short names: the legend is one line, and the narrowest dock (at 1,400 px) must show it whole
        legend = swatch_title("", [("bytes", BYTES_COLOR), ("TPOT", TPOT_COLOR, "&#9679;"),
                                   ("TTFT", TTFT_COLOR, "&#9650;"), (f"predicted{where}", "#555555", "- -"),
                                   ("simulated here", "#555555", "&times;")])
        # the title names the curves and leaves the verdict to them: the predictions show TPOT following
        # the bytes, and a CPU without bfloat16 arithmetic decodes bfloat16 slower than float32 all the same
        return (f"Weight bytes, TPOT and TTFT at each precision, each ÷ {base}"
                f'<br><span style="font-size:8pt">{legend}</span>')

    def set_references(self, references) -> None:
        self.references = references
        self._seen = None

    def _paint_references(self, order: dict[str, int]) -> list[str]:
        """Each shown reference's TPOT and TTFT ratios (to its own first precision), at the x of the same
        precision in this run; a reference's precision this run did not measure is left out. Their names."""
        shown = {r.key: r for r in self.references.visible() if r.precision} if self.references is not None else {}
        plot = self.getPlotItem()
        for key in [k for k in self._ref_curves if k not in shown]:
            for curve in self._ref_curves.pop(key):
                plot.removeItem(curve)
        for key, ref in shown.items():
            if key not in self._ref_curves:
                pen = pg.mkPen(ref.color, width=2, style=QtCore.Qt.PenStyle.DotLine)
                self._ref_curves[key] = tuple(plot.plot([], [], pen=pen, symbol=symbol, symbolSize=7,
                                                        symbolBrush=ref.color, symbolPen=ref.color)
                                              for symbol in ("o", "t1"))
            at = [(order[p.dtype], p) for p in ref.precision if p.dtype in order]
            x = np.array([i for i, _ in at], dtype=np.float64)
            tpot = ratios([p.tpot_ms for p in ref.precision])
            ttft = ratios([p.ttft_ms for p in ref.precision])
            keep = [k for k, p in enumerate(ref.precision) if p.dtype in order]
            self._ref_curves[key][0].setData(x, tpot[keep] if keep else [])
            self._ref_curves[key][1].setData(x, ttft[keep] if keep else [])
        return [ref.name for ref in shown.values()]

    def refresh(self) -> None:
        points = self.store.precision_points
        summary = self.store.precision_summary
        key = (self.store.generation, len(points), id(summary),
               self.references.version if self.references is not None else None)
        if key == self._seen:
            return
        self._seen = key
        plot = self.getPlotItem()
        profile = self.store.config.get("profile") or self.store.info.profile
        if not points:
            for curve in self.curves.values():
                curve.setData([], [])
            self._paint_references({})
            self.labels = []
            plot.getAxis("bottom").setTicks([[]])
            set_title(plot, self._title("the first", profile))
            plot.setLabel("left", "ratio to the first precision")
            self.note.setText(EMPTY_NOTE + self._skipped(summary))
            self.note.setToolTip("")
            return
        x = np.arange(len(points), dtype=np.float64)
        data = {"bytes": ratios([p.weight_bytes for p in points]), "tpot": ratios([p.tpot_ms for p in points]),
                "ttft": ratios([p.ttft_ms for p in points]),
                "predicted_tpot": ratios([p.predicted_tpot_ms for p in points]),
                "predicted_ttft": ratios([p.predicted_ttft_ms for p in points]),
                "simulated_tpot": ratios([p.simulated_tpot_ms for p in points]),
                "simulated_ttft": ratios([p.simulated_ttft_ms for p in points])}
        for name, y in data.items():
            self.curves[name].setData(x, y)
        self.labels = [tick_label(p) for p in points]
        plot.getAxis("bottom").setTicks([list(enumerate(self.labels))])
        drawn = self._paint_references({p.dtype: i for i, p in enumerate(points)})
        base = points[0].dtype
        set_title(plot, self._title(base, profile))
        plot.setLabel("left", f"ratio to {base}")
        top = max([1.0] + [float(v) for y in data.values() for v in y if math.isfinite(v)])
        plot.setXRange(-0.5, len(points) - 0.5, padding=0)
        plot.setYRange(0, top * 1.1, padding=0)
        self.note.setText(self._figures(points) + self._simulated(points) + self._skipped(summary)
                          + (f" · dotted: {', '.join(drawn)} (each ÷ its own first precision)" if drawn else ""))
        self.note.setToolTip(self._ratios(points))

    @staticmethod
    def _figures(points) -> str:
        """The measured medians in one short line: "TTFT / TPOT (ms): float32 120.3 / 61.20 · q8_0 ..."."""
        return "TTFT / TPOT (ms): " + " · ".join(f"{p.dtype} {p.ttft_ms:,.1f} / {p.tpot_ms:,.2f}" for p in points)

    @staticmethod
    def _simulated(points) -> str:
        """The cost model's error on the measured medians, e.g. " · simulated (×): TTFT 4.1%, TPOT 7.9% off"."""
        pairs = {"TTFT": [(p.simulated_ttft_ms, p.ttft_ms) for p in points if p.simulated_ttft_ms],
                 "TPOT": [(p.simulated_tpot_ms, p.tpot_ms) for p in points if p.simulated_tpot_ms]}
        parts = [f"{name} {sum(abs(s - m) / m for s, m in v) / len(v) * 100:.1f}%" for name, v in pairs.items() if v]
        return f"\nsimulated on this machine's profile (×), mean error: {', '.join(parts)}" if parts else ""

    @staticmethod
    def _ratios(points) -> str:
        """e.g. "q8_0 143 MB (3.76× fewer bytes): TTFT 112.0 ms (1.07× faster), TPOT ..." a line each."""
        base = points[0]
        parts = [f"{base.dtype} {size_text(base.weight_bytes)}: TTFT {base.ttft_ms:,.1f} ms, "
                 f"TPOT {base.tpot_ms:,.2f} ms"]
        for p in points[1:]:
            parts.append(f"{p.dtype} {size_text(p.weight_bytes)} ({_factor(base.weight_bytes, p.weight_bytes)} "
                         f"fewer bytes): TTFT {p.ttft_ms:,.1f} ms ({_speedup(base.ttft_ms, p.ttft_ms)}), "
                         f"TPOT {p.tpot_ms:,.2f} ms ({_speedup(base.tpot_ms, p.tpot_ms)})")
        return "\n".join(parts)

    @staticmethod
    def _skipped(summary: Summary | None) -> str:
        note = summary.note if summary is not None else None
        return f"\n{note}" if note else ""


def _factor(base: float, value: float) -> str:
    return f"{base / value:.2f}×" if base > 0 and value > 0 else "—"


def _speedup(base_ms: float, ms: float) -> str:
    if not (base_ms > 0 and ms > 0):
        return "—"
    return f"{_factor(base_ms, ms)} faster" if base_ms >= ms else f"{_factor(ms, base_ms)} slower"
