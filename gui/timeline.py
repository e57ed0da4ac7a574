"""The engine-step strip: one bar per step, width its duration, height its tokens, coloured by phase."""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from backend.records import Phase

from .plot_style import PHASE_COLORS, RateAxis, cosmetic_pen, outline_color, style_plot, swatch_title
from .run_store import PHASE_CODE, RunStore

FOLLOW_WINDOW_MS = 10_000.0   # while running, show the last ten seconds unless the user zoomed or panned
BASELINE = 0.5                # bars start half a token up, so a 1-token decode step has height on the log axis


def bar_outline(start: np.ndarray, end: np.ndarray, height: np.ndarray, base: float) -> tuple[np.ndarray, np.ndarray]:
    """A step-shaped polyline tracing each bar; filled down to `base` it paints the bars.

    x stays sorted (steps never overlap), which pyqtgraph's clip-to-view and peak
    downsampling need.
    """
    x = np.column_stack([start, start, end, end]).ravel()                   # (4n,)
    b = np.full_like(height, base)
    y = np.column_stack([b, height, height, b]).ravel()
    return x, y


def describe_step(step: dict) -> str:
    return (f"step {int(step['step'])} · {step['phase'].value}\n"
            f"start {step['start_ms']:.1f} ms, took {step['duration_ms']:.2f} ms\n"
            f"{int(step['num_requests'])} requests ({int(step['num_prefill_requests'])} prefill, "
            f"{int(step['num_decode_requests'])} decode)\n"
            f"{int(step['num_tokens'])} tokens ({int(step['num_prefill_tokens'])} prefill + "
            f"{int(step['num_decode_tokens'])} decode)\n"
            f"context {int(step['context_tokens'])} tokens (longest {int(step['max_context_tokens'])})\n"
            f"KV cache {int(step['kv_tokens'])} / {int(step['kv_capacity'])} tokens\n"
            f"after it: {int(step['num_running'])} running, {int(step['num_waiting'])} waiting")


class TimelineView(pg.PlotWidget):
    """Repainted by the window's timer through refresh(); slots never paint."""

    followChanged = QtCore.Signal(bool)

    def __init__(self, store: RunStore, parent=None):
        super().__init__(parent, axisItems={"left": RateAxis("left")})
        self.setObjectName("timelinePlot")
        self.store = store
        self._seen_version = -1     # store version last painted
        self._painted_bars = None   # (store generation, bars appended) last painted
        self._running = False
        self._follow = True
        plot = self.getPlotItem()
        style_plot(plot, swatch_title("Engine steps: one bar per forward pass",
                                      [(p.value, c) for p, c in PHASE_COLORS.items()]),
                   "time since run start (ms)", "tokens in step (log)")
        plot.setLogMode(y=True)
        plot.setClipToView(True)
        plot.setDownsampling(auto=True, mode="peak")
        plot.ctrl.logYCheck.toggled.connect(self._log_toggled)
        self.curves: dict[Phase, pg.PlotDataItem] = {}
        for phase, color in PHASE_COLORS.items():
            fill = QtGui.QColor(color)
            curve = pg.PlotDataItem(pen=cosmetic_pen(outline_color(color)), brush=fill, fillLevel=np.log10(BASELINE),
                                    name=phase.value, skipFiniteCheck=True)
            plot.addItem(curve)
            self.curves[phase] = curve
        vb = plot.getViewBox()
        vb.setAutoVisible(y=True)
        vb.enableAutoRange(axis="y")
        vb.setLimits(xMin=-1000.0)
        vb.sigRangeChangedManually.connect(lambda *_: self.set_follow(False))
        self.scene().sigMouseMoved.connect(self._hovered)
        self.empty_label = pg.TextItem("", color="#777", anchor=(0.5, 0.5))
        self.empty_label.setParentItem(vb)
        vb.sigResized.connect(self._place_empty_label)

    # ---- state -------------------------------------------------------------------------------

    @property
    def follow(self) -> bool:
        return self._follow

    def set_follow(self, follow: bool) -> None:
        if follow != self._follow:
            self._follow = follow
            self.followChanged.emit(follow)
        if follow:
            self._seen_version = -1

    def set_running(self, running: bool) -> None:
        self._running = running
        self._seen_version = -1

    def set_empty_message(self, text: str) -> None:
        """Said in the middle of the strip when there are no steps to show (e.g. a sweep)."""
        self.empty_label.setText(text)
        self._place_empty_label()
        self._seen_version = -1

    def _place_empty_label(self, *_) -> None:
        self.empty_label.setPos(self.getPlotItem().getViewBox().boundingRect().center())

    def _log_toggled(self, log: bool) -> None:
        for curve in self.curves.values():
            curve.setFillLevel(np.log10(BASELINE) if log else BASELINE)

    # ---- painting ----------------------------------------------------------------------------

    def refresh(self) -> None:
        if self._seen_version == self.store.version:
            return
        self._seen_version = self.store.version
        bars = self.store.bars
        if self._painted_bars != (self.store.generation, bars.num_appended):
            start, end = bars.column("start"), bars.column("end")
            tokens, phase = bars.column("tokens"), bars.column("phase")
            for p, curve in self.curves.items():
                mask = phase == PHASE_CODE[p]
                x, y = bar_outline(start[mask], end[mask], tokens[mask], BASELINE)
                curve.setData(x, y)
            self._painted_bars = (self.store.generation, bars.num_appended)
        self.empty_label.setVisible(len(bars) == 0 and bool(self.empty_label.toPlainText()))
        if self._follow:
            self._follow_edge()

    def _follow_edge(self) -> None:
        now = self.store.now_ms()
        if now <= 0:
            return
        lo = max(0.0, now - FOLLOW_WINDOW_MS) if self._running else 0.0
        self.getPlotItem().getViewBox().setXRange(lo, now, padding=0.02)

    # ---- hover -------------------------------------------------------------------------------

    def hover_text(self, x_ms: float) -> str:
        index = self.store.step_at(x_ms)
        return "" if index is None else describe_step(self.store.step(index))

    def _hovered(self, scene_pos) -> None:
        vb = self.getPlotItem().getViewBox()
        if not vb.sceneBoundingRect().contains(scene_pos):
            return
        text = self.hover_text(vb.mapSceneToView(scene_pos).x())
        global_pos = self.mapToGlobal(self.mapFromScene(scene_pos))
        if text:
            QtWidgets.QToolTip.showText(global_pos, text, self)
        else:
            QtWidgets.QToolTip.hideText()
