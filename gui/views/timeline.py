"""The engine-step strip: one bar per step, width its duration, height its tokens, coloured by phase; over
them, the KV cache's share held and the prefix hit rate so far (gui/views/kv_overlay.py)."""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from backend.records import Phase

from gui.views.plot_style import (PHASE_COLORS, VERIFY_COLOR, RateAxis, cosmetic_pen, outline_color, rect_path,
                                  set_title, style_plot, swatch_title, tick_path)
from gui.state.run_store import PHASE_CODE, RunStore
from gui.views.kv_overlay import KvOverlay

FOLLOW_WINDOW_MS = 10_000.0   # while running, show ten seconds around the live edge unless the user zoomed or panned
BASELINE = 0.5                # bars start half a token up, so a 1-token decode step has height on the log axis
WIDE_PX = 6                   # bars at least this wide are drawn as outlined rectangles, narrower ones as lines


def follow_page(now_ms: float, width_ms: float = FOLLOW_WINDOW_MS) -> tuple[float, float]:
    """The x range that shows the live edge: it moves in jumps, not every frame.

    A range that moved every frame would re-lay out both time axes 30 times a second (the
    dearest part of a frame); a page changes only when the edge leaves it. Short runs grow
    in doubling pages from 0; longer ones slide by a quarter page, the edge between half and
    three quarters of the way across.
    """
    if now_ms <= 0.75 * width_ms:
        return 0.0, min(width_ms, 2.0 ** np.ceil(np.log2(max(now_ms, 1.0) / 0.75)))
    step = width_ms / 4
    lo = step * np.ceil((now_ms - 0.75 * width_ms) / step)
    return float(lo), float(lo + width_ms)


def peak_bars(start: np.ndarray, end: np.ndarray, height: np.ndarray, lo: float, hi: float,
              px: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The bars overlapping [lo, hi]; where more than one starts in a pixel column, one bar
    spans them with the tallest height (peaks survive, and a frame costs the same however
    many steps are in view). Bars must be in time order and not overlap."""
    a = int(np.searchsorted(end, lo, side="left"))
    b = int(np.searchsorted(start, hi, side="right"))
    start, end, height = start[a:b], end[a:b], height[a:b]
    if len(start) <= 1 or px <= 0:
        return start, end, height
    column = np.floor((start - lo) / px)
    first = np.flatnonzero(np.r_[True, column[1:] != column[:-1]])   # first bar of each pixel column
    if len(first) == len(start):
        return start, end, height
    return start[first], np.maximum.reduceat(end, first), np.maximum.reduceat(height, first)


class PhaseBars(QtWidgets.QGraphicsPathItem):
    """One phase's bars as paths that Qt paints on its own (no Python per frame).

    Bars a few pixels wide are filled rectangles with an outline; narrower ones are vertical
    lines in the fill colour, as wide as such bars typically are (filling hundreds of thin
    rectangles that every scanline crosses costs the raster engine tens to hundreds of
    milliseconds a frame; stroking lines, one or two).
    It holds all of the phase's bars (bounded by the store) and draws those in view; its
    dataBounds let the view's auto-range fit the height of the bars in view."""

    def __init__(self, color: str):
        super().__init__()
        self.setPen(cosmetic_pen(outline_color(color)))
        self.setBrush(QtGui.QColor(color))
        self.color = color
        self.lines = QtWidgets.QGraphicsPathItem(self)
        self.lines.setPen(cosmetic_pen(color))
        self.start = self.end = self.height = np.empty(0)   # height in plot units (log10 on a log axis)
        self.base = 0.0
        self.shown = (np.empty(0), np.empty(0), np.empty(0))   # what is drawn: start, end, height

    def set_bars(self, start: np.ndarray, end: np.ndarray, height: np.ndarray, base: float) -> None:
        self.start, self.end, self.height, self.base = start, end, height, base

    def draw(self, lo: float, hi: float, px: float) -> None:
        self.shown = peak_bars(self.start, self.end, self.height, lo, hi, px)
        s, e, h = self.shown
        wide = (e - s) >= WIDE_PX * px
        self.setPath(rect_path(s[wide], e[wide], np.full(int(wide.sum()), self.base), h[wide]))
        thin = ~wide
        if thin.any() and 0 < px < np.inf:
            width = int(np.clip(np.median(e[thin] - s[thin]) / px, 1, WIDE_PX - 1))
            if width != self.lines.pen().width():
                self.lines.setPen(cosmetic_pen(self.color, width))
        self.lines.setPath(tick_path((s[thin] + e[thin]) / 2, np.full(int(thin.sum()), self.base), h[thin]))

    def dataBounds(self, axis: int, frac: float = 1.0, orthoRange=None):
        if len(self.start) == 0:
            return None
        if axis == 0:
            return float(self.start[0]), float(self.end[-1])
        height = self.height
        if orthoRange is not None and orthoRange[0] is not None:
            a = int(np.searchsorted(self.end, orthoRange[0], side="left"))
            b = int(np.searchsorted(self.start, orthoRange[1], side="right"))
            height = height[a:b]
        return (self.base, float(height.max()) if len(height) else self.base)


def describe_step(step: dict) -> str:
    return (f"step {int(step['step'])} · {step['phase'].value}\n"
            f"start {step['start_ms']:.1f} ms, took {step['duration_ms']:.2f} ms\n"
            f"{int(step['num_requests'])} requests ({int(step['num_prefill_requests'])} prefill, "
            f"{int(step['num_decode_requests'])} decode)\n"
            f"{int(step['num_tokens'])} tokens ({int(step['num_prefill_tokens'])} prefill + "
            f"{int(step['num_decode_tokens'])} decode)\n"
            f"context {int(step['context_tokens'])} tokens (longest {int(step['max_context_tokens'])})\n"
            f"KV cache {int(step['kv_tokens'])} / {int(step['kv_capacity'])} tokens\n"
            f"after it: {int(step['num_running'])} running, {int(step['num_waiting'])} waiting"
            + _verified(step) + _weights_read(step))


def _verified(step: dict) -> str:
    """A verification step's guesses: how many it checked, how many the model kept, the proposer's time."""
    proposed = int(step.get("num_proposed_tokens", 0))
    if not proposed:
        return ""
    draft = float(step.get("draft_ms", 0.0))
    return (f"\nverification: {proposed} guesses checked, {int(step['num_accepted_tokens'])} kept"
            + (f" (drafted in {draft:.2f} ms before the step)" if draft > 0 else ""))


def _weights_read(step: dict) -> str:
    """What the step read of the weights, where it was measured; for a mixture of experts, how
    many experts its tokens were routed to (summed over the layers)."""
    nbytes, experts = int(step.get("weight_bytes", 0)), int(step.get("experts_touched", 0))
    if not nbytes:
        return ""
    return f"\nweights read {nbytes / 1e6:,.1f} MB" + (f", {experts} experts touched (all layers)" if experts else "")


def describe_bar(bar: dict) -> str:
    """An older bar whose steps are no longer held one by one."""
    n = int(bar["count"])
    what = f"{n:,} steps merged" if n > 1 else "1 step"
    return (f"{what} · {bar['phase'].value} (older history is summarized)\n"
            f"from {bar['start']:.1f} ms to {bar['end']:.1f} ms\n"
            f"up to {int(bar['tokens'])} tokens in a step"
            + (f", verifications of up to {int(bar['proposed'])} guesses" if bar.get("proposed", 0) else ""))


def strip_title(verifies: bool) -> str:
    """The strip's title and its colours' key; the verification colour only for a run that speculated."""
    keys = [(p.value, c) for p, c in PHASE_COLORS.items()] + ([("verification", VERIFY_COLOR)] if verifies else [])
    return swatch_title("Engine steps: one bar per forward pass", keys)


class TimelineView(pg.PlotWidget):
    """Repainted by the window's timer through refresh(); slots never paint."""

    followChanged = QtCore.Signal(bool)

    def __init__(self, store: RunStore, parent=None):
        super().__init__(parent, axisItems={"left": RateAxis("left")})
        self.setObjectName("timelinePlot")
        self.store = store
        self._seen_version = -1     # store version last painted
        self._painted_bars = None   # (store generation, bars appended, log axis) last handed to the bars
        self._running = False
        self._follow = True
        self._page: tuple[float, float] | None = None   # the x range last set to follow the live edge
        self.extent_ms = 0.0        # a reference's length drawn under this strip: a stopped strip fits it too
        plot = self.getPlotItem()
        style_plot(plot, strip_title(False), "time since run start (ms)", "tokens in step (log)")
        self._verifies = False      # the title names the verification colour once a step verified guesses
        plot.setLogMode(y=True)
        plot.ctrl.logYCheck.toggled.connect(self._log_toggled)
        self.bars: dict[Phase, PhaseBars] = {}
        for phase, color in PHASE_COLORS.items():
            self.bars[phase] = PhaseBars(color)
            plot.addItem(self.bars[phase])
        # speculative decoding's verification steps (decode steps of 1 + K tokens a request) in a colour of their own
        self.verify_bars = PhaseBars(VERIFY_COLOR)
        plot.addItem(self.verify_bars)
        vb = plot.getViewBox()
        vb.setAutoVisible(y=True)
        vb.enableAutoRange(axis="y")
        vb.setLimits(xMin=-1000.0)
        vb.setXRange(0.0, 1000.0, padding=0)   # an empty strip shows its first second, not ±0.5 ms
        vb.sigRangeChangedManually.connect(lambda *_: self.set_follow(False))
        vb.sigXRangeChanged.connect(self._draw)
        vb.sigResized.connect(self._draw)
        self.scene().sigMouseMoved.connect(self._hovered)
        self.empty_label = pg.TextItem("", color="#777", anchor=(0.5, 0.5))
        self.empty_label.setParentItem(vb)
        vb.sigResized.connect(self._place_empty_label)
        self.kv = KvOverlay(plot, store)

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
            self._page = None

    def set_running(self, running: bool) -> None:
        self._running = running
        self._seen_version = -1
        self._page = None

    def set_empty_message(self, text: str) -> None:
        """Said in the middle of the strip when there are no steps to show (e.g. a sweep)."""
        self.empty_label.setText(text)
        self._place_empty_label()
        self._seen_version = -1

    def _place_empty_label(self, *_) -> None:
        self.empty_label.setPos(self.getPlotItem().getViewBox().boundingRect().center())

    def _log_toggled(self, log: bool) -> None:
        self.kv.axis.setLogMode(False, False)   # the KV lines' percentages stay linear whatever the bars' axis
        self._painted_bars = None
        self._seen_version = -1
        self.refresh()

    # ---- painting ----------------------------------------------------------------------------

    def refresh(self) -> None:
        if self._seen_version == self.store.version:
            return
        self._seen_version = self.store.version
        bars = self.store.bars
        log = self.getPlotItem().ctrl.logYCheck.isChecked()
        if self._painted_bars != (self.store.generation, bars.num_appended, log):
            start, end = bars.column("start"), bars.column("end")
            tokens, phase = bars.column("tokens"), bars.column("phase")
            verifies = bars.column("proposed") > 0
            base = np.log10(BASELINE) if log else BASELINE
            masks = [(item, (phase == PHASE_CODE[p]) & ~verifies) for p, item in self.bars.items()]
            for item, mask in masks + [(self.verify_bars, verifies)]:
                height = np.log10(np.maximum(tokens[mask], BASELINE)) if log else tokens[mask]
                item.set_bars(start[mask], end[mask], height, base)
                self.getPlotItem().getViewBox().itemBoundsChanged(item)
            if bool(verifies.any()) != self._verifies:
                self._verifies = bool(verifies.any())
                set_title(self.getPlotItem(), strip_title(self._verifies))
            self._painted_bars = (self.store.generation, bars.num_appended, log)
            self._draw()
        self.empty_label.setVisible(len(bars) == 0 and bool(self.empty_label.toPlainText()))
        self.kv.refresh(self._running)
        if self._follow:
            self._follow_edge()

    def _draw(self, *_) -> None:
        """Redraw the bars in view (after new data, a zoom, a pan or a resize)."""
        vb = self.getPlotItem().getViewBox()
        (lo, hi), px = vb.viewRange()[0], vb.viewPixelSize()[0]
        for item in (*self.bars.values(), self.verify_bars):
            item.draw(lo, hi, px)

    def _follow_edge(self) -> None:
        now = self.store.now_ms()
        if not self._running:
            now = max(now, self.extent_ms)
        if now <= 0:
            return
        vb = self.getPlotItem().getViewBox()
        if not self._running:
            vb.setXRange(0.0, now, padding=0.02)
            return
        page = follow_page(now)
        if page != self._page:
            self._page = page
            vb.setXRange(*page, padding=0)

    # ---- hover -------------------------------------------------------------------------------

    def hover_text(self, x_ms: float) -> str:
        index = self.store.step_at(x_ms)
        if index is not None:
            return describe_step(self.store.step(index))
        bar = self.store.bar_at(x_ms)
        return "" if bar is None else describe_bar(bar)

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
