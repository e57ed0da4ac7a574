"""A load sweep's points: what `sweep rate`, `sweep concurrency` and `sweep pd-ratio` print, drawn.

A rate or concurrency sweep is the trade serving engineers plot: output tokens/s per device
against tokens/s per user (1000 / the median TPOT), one point per arrival rate (or number of
users), each labelled with it; the Pareto front (no point better on both) joined by a line, the
best goodput under the SLOs ringed. A prefill:decode split sweep is one bar per split of the
simulated devices: output tokens/s per device, the goodput written over it when SLOs are given;
the best split (the sweep's choice) in red. Under the plot, the lines the CLI ends with.
"""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from backend.config import SweepKind
from backend.summary import Summary

from gui.state.run_store import RunStore
from gui.views.plot_style import (CROSSOVER_COLOR, MEASURED_COLOR, PREDICTED_COLOR, cosmetic_pen, style_plot,
                                  swatch_title)

BAND_COLOR = "#8fb3d9"
BAND_RGBA = (143, 179, 217, 90)   # BAND_COLOR, light: the points stay readable over it
UNITS = {SweepKind.RATE: "arrivals/s", SweepKind.CONCURRENCY: "users"}


def finite(x) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


class LoadSweepView(pg.PlotWidget):
    def __init__(self, store: RunStore, parent=None):
        super().__init__(parent)
        self.setObjectName("loadSweepPlot")
        self.store = store
        self._seen = None
        self.kind: SweepKind | None = None   # RATE, CONCURRENCY or PD_RATIO: the points on screen
        plot = self.getPlotItem()
        plot.getViewBox().setDefaultPadding(0.15)   # room for the points' labels inside the frame
        self.points = plot.plot([], [], pen=None, symbol="o", symbolSize=8, symbolBrush=MEASURED_COLOR)
        self.front = plot.plot([], [], pen=cosmetic_pen(MEASURED_COLOR, 2))
        # a simulated sweep's band: the front with every step at the band's slow edge and at its fast one, the
        # area between shaded; each point's own band as error bars (backend.sim.bands)
        self.band_edges = (pg.PlotCurveItem([], []), pg.PlotCurveItem([], []))
        self.band = pg.FillBetweenItem(*self.band_edges, brush=pg.mkBrush(*BAND_RGBA))
        self.band.setZValue(-10)
        plot.addItem(self.band)
        self.errors = pg.ErrorBarItem(x=np.empty(0), y=np.empty(0), pen=pg.mkPen(BAND_COLOR, width=1))
        plot.addItem(self.errors)
        self.best = plot.plot([], [], pen=None, symbol="o", symbolSize=16, symbolBrush=None,
                              symbolPen=pg.mkPen(CROSSOVER_COLOR, width=2))
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.6, brush=MEASURED_COLOR)
        plot.addItem(self.bars)
        self.labels: list[pg.TextItem] = []
        self.banded = 0   # simulated points with a band on screen
        self.note = QtWidgets.QLabel()
        self.note.setObjectName("loadSweepNote")
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: #555;")
        self.note.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self._label_axes()

    def _label_axes(self) -> None:
        plot = self.getPlotItem()
        if self.kind == SweepKind.PD_RATIO:
            legend = swatch_title("", [("output tokens/s per device", MEASURED_COLOR), ("best split", CROSSOVER_COLOR)])
            style_plot(plot, f"Prefill:decode splits (simulated)<br><span style='font-size:8pt'>{legend}</span>",
                       "prefill : decode devices", "tokens/s per device")
            return
        legend = swatch_title("", [(f"one point per {'rate' if self.kind != SweepKind.CONCURRENCY else 'number of users'}",
                                    MEASURED_COLOR, "&#9679;"), ("Pareto front", MEASURED_COLOR, "&mdash;"),
                                   ("best goodput", CROSSOVER_COLOR, "&#9675;")])
        style_plot(plot, f"Throughput per device vs per user<br><span style='font-size:8pt'>{legend}</span>",
                   "tokens/s per user (1000 / TPOT p50)", "output tokens/s per device")

    def refresh(self) -> None:
        store = self.store
        key = (store.generation, len(store.load_points), len(store.pd_points), id(store.finished))
        if key == self._seen:
            return
        self._seen = key
        kind = SweepKind.PD_RATIO if store.pd_points else store.load_points[0].kind if store.load_points else self.kind
        if kind != self.kind:
            self.kind = kind
            self._label_axes()
        for label in self.labels:
            self.getPlotItem().removeItem(label)
        self.labels = []
        if self.kind == SweepKind.PD_RATIO:
            self._paint_splits()
        else:
            self._paint_load_points()
        self.note.setText("\n".join(self.notes()))
        self.note.setVisible(bool(self.note.text()))

    def _label(self, text: str, x: float, y: float, color=PREDICTED_COLOR, anchor=(0, 1)) -> None:
        item = pg.TextItem(text, color=color, anchor=anchor)
        item.setPos(x, y)
        self.getPlotItem().addItem(item, ignoreBounds=True)
        self.labels.append(item)

    def _paint_load_points(self) -> None:
        self.bars.setOpts(x=[], height=[])
        self.getPlotItem().getAxis("bottom").setTicks(None)
        pts = [p for p in self.store.load_points if finite(p.tokens_per_s_per_user)
               and finite(p.tokens_per_s_per_device)]
        self.points.setData([p.tokens_per_s_per_user for p in pts], [p.tokens_per_s_per_device for p in pts])
        front = sorted((p for p in pts if p.pareto), key=lambda p: p.tokens_per_s_per_user)
        self.front.setData([p.tokens_per_s_per_user for p in front], [p.tokens_per_s_per_device for p in front])
        self._paint_band(pts, front)
        best = [p for p in pts if p.best_goodput]
        self.best.setData([p.tokens_per_s_per_user for p in best], [p.tokens_per_s_per_device for p in best])
        unit = "/s" if self.kind == SweepKind.RATE else " users"
        middle = (min(p.tokens_per_s_per_user for p in pts) + max(p.tokens_per_s_per_user for p in pts)) / 2 \
            if pts else 0.0
        for p in pts:   # beside its point, on the side away from the nearer edge of the frame
            right = p.tokens_per_s_per_user > middle
            self._label(f"{p.x:g}{unit} " if right else f" {p.x:g}{unit}", p.tokens_per_s_per_user,
                        p.tokens_per_s_per_device, anchor=(1, 0.5) if right else (0, 0.5))

    def _paint_band(self, pts, front) -> None:
        """The simulated points' bands: error bars on each, the front at the band's two edges shaded between."""
        banded = [p for p in pts if finite(p.per_user_low) and finite(p.per_device_low)]
        self.banded = len(banded)
        if not banded:
            self.errors.setData(x=np.empty(0), y=np.empty(0))
            for edge in self.band_edges:
                edge.setData([], [])
            return
        x = np.array([p.tokens_per_s_per_user for p in banded])
        y = np.array([p.tokens_per_s_per_device for p in banded])
        self.errors.setData(x=x, y=y, left=x - [p.per_user_low for p in banded],
                            right=np.array([p.per_user_high for p in banded]) - x,
                            bottom=y - [p.per_device_low for p in banded],
                            top=np.array([p.per_device_high for p in banded]) - y, beam=0)
        edges = [p for p in front if finite(p.per_user_low)]
        self.band_edges[0].setData([p.per_user_low for p in edges], [p.per_device_low for p in edges])
        self.band_edges[1].setData([p.per_user_high for p in edges], [p.per_device_high for p in edges])

    def _paint_splits(self) -> None:
        self._paint_band([], [])
        self.points.setData([], [])
        self.front.setData([], [])
        self.best.setData([], [])
        pts = self.store.pd_points
        per_device = [p.tokens_per_s_per_device if finite(p.tokens_per_s_per_device) else 0.0 for p in pts]
        brushes = [pg.mkBrush(CROSSOVER_COLOR if p.best else MEASURED_COLOR) for p in pts]
        self.bars.setOpts(x=np.arange(len(pts), dtype=float), height=per_device, brushes=brushes)
        self.getPlotItem().getAxis("bottom").setTicks([[(i, p.split) for i, p in enumerate(pts)]])
        config = self.store.config
        slo = config.get("slo_ttft_ms") is not None or config.get("slo_tpot_ms") is not None
        for i, p in enumerate(pts):   # the goodput over each bar where SLOs were given
            if slo and finite(p.goodput_rps):   # inside the bar's top: above it, a tall bar's text meets the title
                self._label(f"goodput\n{p.goodput_rps:.2f} req/s", i, per_device[i], "#ffffff", anchor=(0.5, 0))

    def notes(self) -> list[str]:
        """The summary lines the CLI prints after the sweep's table."""
        finished = self.store.finished
        s = finished.summary if finished is not None else Summary()
        config = self.store.config
        notes = []
        if self.kind == SweepKind.PD_RATIO and self.store.pd_points:
            best = next((p for p in self.store.pd_points if p.best), None)
            if best is not None:
                notes.append(f"best split {best.split}: {best.output_tokens_per_s:,.1f} output tokens/s "
                             f"({best.tokens_per_s_per_device:,.1f} per device), TTFT p99 {best.ttft_p99_ms:,.0f} ms, "
                             f"ITL p99 {best.itl_p99_ms:,.1f} ms, KV transfer {best.kv_transfer_mean_ms:,.2f} ms"
                             + (f", {best.spec_mean_acceptance_length:.2f} tokens a verification"
                                if best.spec_mean_acceptance_length is not None else ""))
            if not any(finite(p.goodput_rps) for p in self.store.pd_points):
                notes.append("no SLOs: the best split has the most tokens/s (give SLO TTFT and TPOT for "
                             "goodput)")
        elif self.store.load_points:
            unit = UNITS.get(self.kind, "")
            if s.pareto:
                notes.append(f"Pareto front (no point better on both throughput per device and per user): "
                             f"{s.pareto} {unit}")
            if s.best_goodput_at is not None:
                notes.append(f"best goodput: {s.best_goodput_requests_per_s:.2f} req/s within the SLOs at "
                             f"{s.best_goodput_at:g} {unit}")
            elif finished is not None and config.get("slo_ttft_ms") is None and config.get("slo_tpot_ms") is None:
                notes.append("no goodput: give SLO TTFT and/or TPOT on the workload page")
            if self.banded:
                notes.append("shaded: the simulated front at its 80% band's edges (every step slower, every step "
                             "faster, by the simulator's errors on published figures); bars: each point's band")
        else:
            notes.append("run a rate, concurrency or prefill:decode split sweep to add points here")
        if s.note:
            notes.append(s.note)
        return notes
