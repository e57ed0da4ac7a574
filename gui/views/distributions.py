"""Latency distributions: the CDF of TTFT, TPOT or inter-token gaps, one curve per run on screen.

The current run's curve and each visible reference's share one plot, so a policy's whole
distribution (its tail above all) is compared, not only its mean. The values come from the
stores as the metrics panel reads them: TTFT from each request's first token, running ones
included; TPOT from its tokens after the first; ITL from the gaps between consecutive tokens
of each request (the tokens the store holds: a long run's newest).
"""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6 import QtWidgets

from backend.results.band_text import ratios
from gui.views.plot_style import MEASURED_COLOR, cosmetic_pen, set_title, style_plot, swatch_title
from gui.state.references import ReferenceSet
from gui.state.run_store import RunStore

BAND_COLOR = "#8fb3d9"
BAND_RGBA = (143, 179, 217, 90)   # BAND_COLOR, light: the curve stays readable over it
METRICS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL (inter-token gap)"}
MAX_POINTS = 2000   # a CDF of more values is drawn at this many evenly spaced ranks: the eye sees no more
EMPTY_NOTE = "the distributions appear once a run (or a reference) has requests with tokens"


def metric_values(store: RunStore, metric: str) -> np.ndarray:
    """Every value of `metric` ("ttft", "tpot" or "itl") in milliseconds the store can give."""
    lanes = store.lanes
    if metric in ("ttft", "tpot"):
        arrival, first = lanes.column("arrival_ms"), lanes.column("first_token_ms")
        last, out = lanes.column("last_token_ms"), lanes.column("output_tokens")
        has_first = ~np.isnan(first) & ~np.isnan(arrival)
        if metric == "ttft":
            return (first - arrival)[has_first]
        multi = has_first & (out >= 2) & ~np.isnan(last)
        return ((last - first) / np.maximum(out - 1, 1))[multi]
    if metric != "itl":
        raise ValueError(f"unknown metric {metric!r}")
    tokens = store.tokens
    rid, index, time = tokens.column("request_id"), tokens.column("index"), tokens.column("time_ms")
    if len(rid) < 2:
        return np.empty(0)
    order = np.lexsort((index, rid))   # by request, then by token index
    rid, index, time = rid[order], index[order], time[order]
    consecutive = (rid[1:] == rid[:-1]) & (index[1:] == index[:-1] + 1)
    return np.diff(time)[consecutive]


def cdf(values: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF as a staircase: (x, fraction of values <= x)."""
    x = np.sort(values[np.isfinite(values)])
    n = len(x)
    if n == 0:
        return np.empty(0), np.empty(0)
    fraction = np.arange(1, n + 1) / n
    if n > max_points:
        keep = np.unique(np.linspace(0, n - 1, max_points).round().astype(int))
        return x[keep], fraction[keep]
    xs = np.repeat(x, 2)                            # (2n,) each value twice: up, then along
    ys = np.repeat(np.r_[0.0, fraction], 2)[1:-1]   # (2n,)
    return xs, ys


class DistributionsView(QtWidgets.QWidget):
    """A metric combo over a CDF plot; repainted by the window's timer through refresh()."""

    def __init__(self, store: RunStore, references: ReferenceSet, parent=None):
        super().__init__(parent)
        self.store = store
        self.references = references
        self._seen = None
        self._title = ""
        self._reference_cdfs: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = {}   # constant: computed once
        self.combo = QtWidgets.QComboBox()
        self.combo.setObjectName("distributionMetric")
        for key, title in METRICS.items():
            self.combo.addItem(title, key)
        self.combo.currentIndexChanged.connect(lambda *_: self.refresh())
        self.plot = pg.PlotWidget()
        self.plot.setObjectName("distributionsPlot")
        plot = self.plot.getPlotItem()
        style_plot(plot, "", "ms", "fraction ≤ x")
        plot.setYRange(0, 1.02, padding=0)
        plot.getViewBox().setMouseEnabled(y=False)
        self.current = plot.plot([], [], pen=cosmetic_pen(MEASURED_COLOR, 2))
        self.current.setClipToView(True)
        # a simulated run's band: the CDF at its low and high edges, the area between shaded (backend.sim.bands)
        self.band_edges = (pg.PlotCurveItem([], []), pg.PlotCurveItem([], []))
        self.band = pg.FillBetweenItem(*self.band_edges, brush=pg.mkBrush(*BAND_RGBA))
        self.band.setZValue(-10)
        plot.addItem(self.band)
        self.curves: dict[int, pg.PlotDataItem] = {}   # reference key -> its curve
        self.counts: dict[int | None, int] = {}        # values behind each curve (None: the current run)
        self.note = QtWidgets.QLabel()
        self.note.setStyleSheet("color: #555;")
        top = QtWidgets.QHBoxLayout()
        top.addWidget(QtWidgets.QLabel("Metric:"))
        top.addWidget(self.combo)
        top.addStretch(1)
        top.addWidget(self.note)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(top)
        layout.addWidget(self.plot, 1)

    def band_ratios(self, metric: str) -> tuple[float, float] | None:
        """The finished simulated run's band on this metric as ratios (its p50's: every request scales alike)."""
        finished = self.store.finished
        if finished is None or finished.summary is None:
            return None
        return ratios(finished.summary, f"{metric}_p50_ms")

    @property
    def metric(self) -> str:
        return self.combo.currentData()

    def set_metric(self, metric: str) -> None:
        self.combo.setCurrentIndex(self.combo.findData(metric))

    def refresh(self) -> None:
        key = (self.store.version, self.references.version, self.metric)
        if key == self._seen:
            return
        self._seen = key
        metric = self.metric
        values = metric_values(self.store, metric)
        x, y = cdf(values)
        self.current.setData(x, y)
        shown = self.band_ratios(metric)
        for edge, ratio in zip(self.band_edges, shown or (None, None)):
            edge.setData(x * ratio, y) if ratio is not None and len(x) else edge.setData([], [])
        self.counts = {None: len(values)}
        refs = {r.key: r for r in self.references}
        for gone in set(self.curves) - set(refs):
            self.plot.getPlotItem().removeItem(self.curves.pop(gone))
        self._reference_cdfs = {k: v for k, v in self._reference_cdfs.items() if k[0] in refs}
        legend = [(f"this run (n={self.counts[None]})", MEASURED_COLOR, "&#9473;")]
        if shown is not None and len(x):
            legend.append((f"simulated {self.store.finished.summary.band_level:.0%} band", BAND_COLOR, "&#9632;"))
        for ref in self.references:
            curve = self.curves.get(ref.key)
            if curve is None:
                curve = self.plot.getPlotItem().plot([], [], pen=cosmetic_pen(ref.color, 2))
                self.curves[ref.key] = curve
            if (ref.key, metric) not in self._reference_cdfs:
                values = metric_values(ref.store, metric)
                self._reference_cdfs[(ref.key, metric)] = (*cdf(values), len(values))
            rx, ry, n = self._reference_cdfs[(ref.key, metric)]
            curve.setData(rx, ry)
            curve.setVisible(ref.visible)
            self.counts[ref.key] = n
            if ref.visible:
                legend.append((f"{ref.name} (n={n})", ref.color, "&#9473;"))
        what = "requests" if metric != "itl" else "gaps between tokens"
        lines = "<br>".join(swatch_title("", legend[i:i + 3]) for i in range(0, len(legend), 3))
        title = f"CDF of {METRICS[metric]} ({what})<br><span style=\"font-size:8pt\">{lines}</span>"
        if title != self._title:   # a new title re-lays out the plot: only when its words change
            self._title = title
            set_title(self.plot.getPlotItem(), title)
        empty = self.counts[None] == 0 and not any(self.counts.get(r.key) for r in self.references.visible())
        self.note.setText(EMPTY_NOTE if empty else "")
