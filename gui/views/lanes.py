"""Request lanes: one row per request with its queued, prefill and decode segments and token ticks."""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from backend.records import Phase, RequestStatus

from gui.views.plot_style import (HIGHLIGHT_COLOR, PHASE_COLORS, QUEUED_COLOR, TICK_COLOR, cosmetic_pen, outline_color,
                         rect_path, set_title, style_plot, swatch_title, tick_path)

TRANSFER_COLOR = "#1fa187"   # a disaggregated run's KV hand-off, between its prefill and its decode
REUSED_COLOR = "#f6cfae"     # the prefill colour, paled: the share of a prompt found in the prefix cache
from gui.state.run_store import STATUS_CODE, RunStore

ROW_HALF = 0.38        # a lane's half height, in rows
MAX_TICKS = 20_000     # ticks are drawn only when this few are in view: denser ones would be a solid smear
SEGMENTS = ("queued", "prefill", "KV transfer", "decode")
SEGMENT_COLORS = {"queued": QUEUED_COLOR, "prefill": PHASE_COLORS[Phase.PREFILL], "KV transfer": TRANSFER_COLOR,
                  "decode": PHASE_COLORS[Phase.DECODE]}
# a remote request's queue is the server's, unseen: from sending to the first token is its TTFT
REMOTE_NAMES = {"prefill": "sent → first token", "decode": "streaming"}


def lane_segments(store: RunStore, running: bool) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(start, end, row) of every queued, prefill and decode segment.

    Requests still running end at the live edge. Prefill starts when the request was first
    admitted to a step: the engine reports it in the batch of that step, so a chunked
    prefill spread over many steps shows whole while it runs. (A request whose admission
    was never reported shows its queue up to its first token.)

    A request of a disaggregated run, once finished, has its prefill end where its KV was
    complete; its KV transfer follows, and its decode starts when the KV was in the decode
    worker's cache (the first decode step is the decode segment's first part).
    """
    lanes = store.lanes
    n = len(lanes)
    rows = np.arange(n, dtype=np.float64)
    now = store.now_ms()
    arrival, scheduled = lanes.column("arrival_ms"), lanes.column("scheduled_ms")
    first, last, finish = lanes.column("first_token_ms"), lanes.column("last_token_ms"), lanes.column("finish_ms")
    done = lanes.column("status") >= STATUS_CODE[RequestStatus.FINISHED]
    # where a segment has no end yet it runs to the live edge (or, after the run, to the last token)
    open_end = np.where(np.isnan(finish), now if running else np.fmax(last, arrival), finish)
    open_end = np.where(np.isnan(open_end), now, open_end)
    pre_start = np.where(np.isnan(scheduled), first, scheduled)
    # a rejected request never starts: its queue segment ends when it was turned away
    queue_end = np.where(np.isnan(pre_start), np.where(done & ~np.isnan(finish), finish, open_end), pre_start)
    pre_end = np.where(np.isnan(first), open_end, first)
    handed = ~np.isnan(lanes.column("kv_transfer_ms")) & ~np.isnan(lanes.column("prefill_ms")) & ~np.isnan(pre_start)
    kv_start = np.where(handed, pre_start + np.nan_to_num(lanes.column("prefill_ms")), np.nan)
    kv_end = kv_start + lanes.column("kv_transfer_ms")
    pre_end = np.where(handed, kv_start, pre_end)
    out = {
        "queued": (arrival, queue_end, rows),
        "prefill": (pre_start, pre_end, rows),
        "KV transfer": (kv_start, kv_end, rows),
        "decode": (np.where(handed, kv_end, first), open_end, rows),
    }
    result = {}
    for name, (x0, x1, r) in out.items():
        keep = ~np.isnan(x0) & ~np.isnan(x1) & (x1 >= x0)
        result[name] = (x0[keep], x1[keep], r[keep])
    return result


def reused_parts(store: RunStore, prefill: tuple[np.ndarray, np.ndarray, np.ndarray]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x0, x1, y0, y1) of the reused share of each prefill segment: the top `cached / prompt` of its
    height, paled. A cached prefix takes no time, so it is a share of the bar's height, not of its length:
    the part of the prompt the prefill skipped."""
    x0, x1, row = prefill
    rows = row.astype(np.intp)
    cached, prompt = store.lanes.column("cached_tokens")[rows], store.lanes.column("prompt_tokens")[rows]
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.clip(np.nan_to_num(cached / prompt), 0.0, 1.0)
    keep = share > 0
    top = row[keep] - ROW_HALF
    return x0[keep], x1[keep], top, top + 2 * ROW_HALF * share[keep]


def room_for(rows: int, running: bool) -> int:
    """Rows the lanes make room for: while a run adds requests, the next of 16, 24, 32, 48, 64, 96, ...

    The row axis then changes a few times as a run grows, not with every arrival (each change
    re-lays out its labels); once the run ends, exactly its rows."""
    if not running or rows <= 16:
        return max(rows, 1)
    half = 2 ** (math.floor(math.log2(rows - 1)) - 1)
    return math.ceil(rows / half) * half


def describe_request(lane: dict) -> str:
    def ms(name):
        v = lane[name]
        return "—" if np.isnan(v) else f"{v:.1f} ms"
    prompt = lane["prompt_tokens"]
    return (f"request {lane['request_id']} · {lane['status'].value}\n"
            f"prompt {'—' if np.isnan(prompt) else int(prompt)} tokens{_cached(lane)}, "
            f"output {int(lane['output_tokens'])} tokens\n"
            f"arrived {ms('arrival_ms')}, scheduled {ms('scheduled_ms')}\n"
            f"first token {ms('first_token_ms')}, finished {ms('finish_ms')}\n"
            f"queue {ms('queue_ms')}, TTFT {ms('ttft_ms')}, TPOT {ms('tpot_ms')}, end-to-end {ms('e2e_ms')}")


def _cached(lane: dict) -> str:
    cached = lane.get("cached_tokens", np.nan)
    return "" if np.isnan(cached) or cached <= 0 else f" ({int(cached)} reused from the prefix cache)"


class RowAxis(pg.AxisItem):
    """Rows are requests: whole numbers only (a tick between two rows would name no request)."""

    def tickValues(self, minVal, maxVal, size):
        levels = [(spacing, values) for spacing, values in super().tickValues(minVal, maxVal, size) if spacing >= 1]
        return levels or [(1.0, [float(v) for v in range(math.ceil(minVal), math.floor(maxVal) + 1)])]


class LanesView(pg.PlotWidget):
    requestClicked = QtCore.Signal(int)

    def __init__(self, store: RunStore, parent=None):
        super().__init__(parent, axisItems={"left": RowAxis("left")})
        self.setObjectName("requestLanesPlot")
        self.store = store
        self._seen = None
        self._room = -1               # rows the y range was last fitted to
        self._generation = -1         # the store's run whose rows those are
        self._zoomed = False          # the user zoomed or panned: the y range is theirs until the next run
        self._running = False
        self.selected_request: int | None = None
        plot = self.getPlotItem()
        style_plot(plot, "", "time since run start (ms)", "request (arrival order)")
        self.set_remote(False)
        vb = plot.getViewBox()
        vb.invertY(True)
        vb.enableAutoRange(axis="y", enable=False)
        vb.sigRangeChangedManually.connect(lambda *_: setattr(self, "_zoomed", True))
        self.items: dict[str, QtWidgets.QGraphicsPathItem] = {}
        for name in SEGMENTS:
            item = QtWidgets.QGraphicsPathItem()
            item.setPen(cosmetic_pen(outline_color(SEGMENT_COLORS[name])))
            item.setBrush(QtGui.QColor(SEGMENT_COLORS[name]))
            plot.addItem(item)
            self.items[name] = item
        self.reused = QtWidgets.QGraphicsPathItem()   # over the prefill segments: their cached share
        self.reused.setPen(QtGui.QPen(QtCore.Qt.PenStyle.NoPen))
        self.reused.setBrush(QtGui.QColor(REUSED_COLOR))
        plot.addItem(self.reused)
        self._reused_shown = False
        self.ticks = QtWidgets.QGraphicsPathItem()
        self.ticks.setPen(cosmetic_pen(TICK_COLOR))
        plot.addItem(self.ticks)
        self.highlight = pg.LinearRegionItem(orientation="horizontal", movable=False, brush=HIGHLIGHT_COLOR,
                                             pen=cosmetic_pen("#d4a000"))
        self.highlight.setZValue(-10)
        self.highlight.hide()
        plot.addItem(self.highlight, ignoreBounds=True)
        vb.sigXRangeChanged.connect(self._range_changed)
        self.scene().sigMouseMoved.connect(self._hovered)
        self.scene().sigMouseClicked.connect(self._clicked)

    def set_running(self, running: bool) -> None:
        self._running = running
        self._seen = None

    def set_remote(self, remote: bool) -> None:
        """A remote server's lanes are seen from the client: sent, first token, streaming."""
        self._remote = remote
        from gui.views.worker_strip import is_replicas
        workers = self.store.workers   # the KV transfer's swatch: a disaggregated run's only (not --dp replicas')
        self._transfer_shown = bool(workers) and not is_replicas(workers.names)
        names = REMOTE_NAMES if remote else {n: n for n in SEGMENTS if n != "KV transfer" or self._transfer_shown}
        swatches = [(names[n], SEGMENT_COLORS[n]) for n in names]
        if getattr(self, "_reused_shown", False):   # a prefix-cached run: the prefills' reused share
            swatches.insert(2, ("reused", REUSED_COLOR))
        title = swatch_title("Request lanes" + (" (client's clock)" if remote else ""), swatches)
        set_title(self.getPlotItem(), title + "&nbsp;&nbsp;white tick: a token")   # short: at 200% the longer one ran off the plot

    def select_request(self, request_id: int | None) -> None:
        self.selected_request = request_id
        row = self.store.rows.get(request_id) if request_id is not None else None
        if row is None:
            self.highlight.hide()
            return
        self.highlight.setRegion((row - 0.5, row + 0.5))
        self.highlight.show()

    # ---- painting ----------------------------------------------------------------------------

    def refresh(self) -> None:
        key = (self.store.version, self._running)
        if key == self._seen:
            return
        self._seen = key
        if self.store.generation != self._generation:
            self._generation, self._zoomed = self.store.generation, False
        room = room_for(self.store.num_requests, self._running)
        if room != self._room:
            self._room = room
            vb = self.getPlotItem().getViewBox()
            vb.setLimits(yMin=-0.6, yMax=room - 0.4)   # no panning into rows that cannot exist
            if not self._zoomed:
                vb.setYRange(-0.6, room - 0.4, padding=0)
        if bool(self.store.workers) != self._transfer_shown:
            self.set_remote(self._remote)
        segments = lane_segments(self.store, self._running)
        for name, (x0, x1, row) in segments.items():
            self.items[name].setPath(rect_path(x0, x1, row - ROW_HALF, row + ROW_HALF))
        reused = reused_parts(self.store, segments["prefill"])
        self.reused.setPath(rect_path(*reused))
        if bool(len(reused[0])) != self._reused_shown:
            self._reused_shown = bool(len(reused[0]))
            self.set_remote(self._remote)
        self._paint_ticks()
        if self.selected_request is not None:
            self.select_request(self.selected_request)

    def _range_changed(self, *_) -> None:
        self._paint_ticks()

    def visible_ticks(self) -> tuple[np.ndarray, np.ndarray]:
        """(time, row) of the tokens in the visible time range, or nothing when too many to draw."""
        tokens = self.store.tokens
        times = tokens.column("time_ms")
        lo, hi = self.getPlotItem().getViewBox().viewRange()[0]
        a, b = np.searchsorted(times, [lo, hi])
        if b - a > MAX_TICKS or b <= a:
            return np.empty(0), np.empty(0)
        ids = self.store.lanes.column("request_id")
        order = np.argsort(ids)
        tok_ids = tokens.column("request_id")[a:b]
        rows = order[np.clip(np.searchsorted(ids[order], tok_ids), 0, len(ids) - 1)].astype(np.float64)
        return times[a:b], rows

    def _paint_ticks(self) -> None:
        t, rows = self.visible_ticks()
        self.ticks.setPath(tick_path(t, rows - ROW_HALF, rows + ROW_HALF))

    # ---- hover and click ---------------------------------------------------------------------

    def row_at(self, y: float) -> int | None:
        row = int(np.floor(y + 0.5))
        return row if 0 <= row < self.store.num_requests else None

    def hover_text(self, y: float) -> str:
        row = self.row_at(y)
        return "" if row is None else describe_request(self.store.lane(row))

    def _hovered(self, scene_pos) -> None:
        vb = self.getPlotItem().getViewBox()
        if not vb.sceneBoundingRect().contains(scene_pos):
            return
        text = self.hover_text(vb.mapSceneToView(scene_pos).y())
        if text:
            QtWidgets.QToolTip.showText(self.mapToGlobal(self.mapFromScene(scene_pos)), text, self)
        else:
            QtWidgets.QToolTip.hideText()

    def _clicked(self, event) -> None:
        vb = self.getPlotItem().getViewBox()
        if event.button() != QtCore.Qt.MouseButton.LeftButton or not vb.sceneBoundingRect().contains(event.scenePos()):
            return
        row = self.row_at(vb.mapSceneToView(event.scenePos()).y())
        if row is not None:
            self.requestClicked.emit(self.store.lane(row)["request_id"])
