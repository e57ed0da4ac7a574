"""The KV cache tab: a map of every block, coloured by who holds it, and its occupancy and hit rate over time.

The map is the newest snapshot the engine sent (backend/engine/kv_watch.py: a few a second and one at
the end): a cell per block of `block_size` tokens, a colour per request holding it (paler while it is
only partly written), grey for a block no request holds that keeps a prefix a later request can reuse,
dark for an empty one; under the slot layout a row per slot, its room not yet written in pink: held for
its request, holding nothing (the waste paging removes). Blocks a newly admitted request found cached
are outlined for a moment.

A run folder opened later shows the snapshots it recorded (kv_map.jsonl): the last one, and a slider
that steps through them (its moment marked on the plot below); a folder without them says so in the
map's place.

Under the map, the cache over the run's time: the share held (every step's exact count), the share
cached but free and, for slots, reserved (from the snapshots), and the prefix hit rate so far (the
steps' reused prompt tokens over the prompt tokens processed, kept by the store for the whole run).
Beside the map they explain each other; the held share and the hit rate are also drawn over the
engine-step strip (gui/views/kv_overlay.py), where they explain its bars.
"""
from __future__ import annotations

import math
import time

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from backend.engine.kv_watch import RESERVED, STATE_NAMES
from backend.engine.paged_scheduler import CACHED_FREE, FREE

from gui.layout import set_minimum_heights
from gui.state.run_store import RunStore
from gui.views.plot_style import cosmetic_pen, rect_path, set_title, style_plot, swatch_title

# a colour per request (by id, cycling): qualitative hues, none of them grey, pink or dark
REQUEST_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#17becf", "#bcbd22",
                  "#3a5fcd", "#e377c2", "#00a087", "#f0a30a")
STATE_COLORS = {CACHED_FREE: "#a9a9a9", FREE: "#30343b", RESERVED: "#f7c6d0"}
REUSED_PEN = "#ffe000"
GAP_SCALE = 5            # pixels a cell of the image, one of them the gap to the next ...
GAP_MAX_CELLS = 20_000   # ... for caches of up to this many cells (a bigger one: a pixel each, no gaps)
REUSED_SHOW_S = 2.0      # how long the blocks a request found cached stay outlined
HELD_COLOR, CACHED_COLOR, RESERVED_COLOR, HIT_COLOR = "#1f77b4", "#7f7f7f", "#e0607e", "#e6772e"
EMPTY_MESSAGE = ("The map is drawn from the engine's snapshots while a run goes (local or simulated)\n"
                 "and replayed from the run folder that recorded them")


def _rgb(color: str) -> np.ndarray:
    c = QtGui.QColor(color)
    return np.array([c.red(), c.green(), c.blue()], dtype=np.float64)


FILL_LEVELS = 16
_PALETTE = np.array([_rgb(c) for c in REQUEST_COLORS])   # (P, 3)
# every request colour at every fill level, paled toward white the emptier the block: (P, FILL_LEVELS + 1, 3)
_SHADES = (255.0 - (255.0 - _PALETTE[:, None, :]) * (0.35 + 0.65 * np.linspace(0, 1, FILL_LEVELS + 1))[None, :, None]
           ).astype(np.uint8)
_STATES = {state: _rgb(color).astype(np.uint8) for state, color in STATE_COLORS.items()}


def grid_width(num_cells: int, cells_per_row: int) -> int:
    """Cells per row: a slot's under the slot layout, else about twice as wide as high."""
    if cells_per_row > 0:
        return cells_per_row
    return max(1, math.ceil(math.sqrt(2 * num_cells)))


def map_image(owners: np.ndarray, tokens: np.ndarray, block_size: int, width: int) -> np.ndarray:
    """(rows, width, 4) uint8 RGBA of the cells in row-major order; a request's cell is paler the fewer
    tokens it holds yet (a block taken for tokens about to be computed), the padding after the last cell
    transparent."""
    n = len(owners)
    level = np.minimum(tokens.astype(np.int32) * FILL_LEVELS // max(block_size, 1), FILL_LEVELS)
    rgb = _SHADES[np.mod(owners, len(_PALETTE)), level]                           # (n, 3) by table: no float math
    for state, color in _STATES.items():
        rgb[owners == state] = color
    rows = -(-n // width)
    image = np.zeros((rows * width, 4), dtype=np.uint8)
    image[:n, :3] = rgb
    image[:n, 3] = 255
    return image.reshape(rows, width, 4)


def with_gaps(image: np.ndarray, scale: int = GAP_SCALE) -> np.ndarray:
    """Each cell as scale x scale pixels, its last row and column transparent: a thin gap shows every
    block as a cell of its own (a run of one request's blocks would otherwise read as one bar)."""
    if scale <= 1:
        return image
    big = np.repeat(np.repeat(image, scale, axis=0), scale, axis=1)   # (rows*scale, width*scale, 4)
    big[scale - 1::scale, :, 3] = 0
    big[:, scale - 1::scale, 3] = 0
    return big


def describe_cell(index: int, owner: int, tokens: int, block_size: int, per_slot: int) -> str:
    where = (f"slot {index // per_slot}, tokens {index % per_slot * block_size}–{(index % per_slot + 1) * block_size - 1}"
             if per_slot else f"block {index}")
    if owner >= 0:
        return f"{where} · request {owner} · {tokens} / {block_size} tokens"
    if owner == CACHED_FREE:
        return f"{where} · cached, free: {tokens} tokens of a prefix a later request can reuse (until evicted)"
    if owner == RESERVED:
        return f"{where} · reserved for its slot's request, holding nothing yet"
    return f"{where} · free"


class KvMapView(QtWidgets.QWidget):
    """Repainted by the window's timer through refresh() while visible."""

    def __init__(self, store: RunStore, parent=None):
        super().__init__(parent)
        self.store = store
        self._seen = None           # (run, snapshots, outline shown) last painted on the map
        self._seen_history = None   # (run, steps taken in, snapshots) the history last drew
        self._width = 1
        self._layout = "paged"
        self.note = QtWidgets.QLabel()
        self.summary = QtWidgets.QLabel(" ")
        self.summary.setObjectName("kvSummary")
        self.map = pg.PlotWidget()
        self.map.setObjectName("kvMapPlot")
        plot = self.map.getPlotItem()
        set_title(plot, self._title("paged"))
        plot.hideAxis("left")
        plot.hideAxis("bottom")
        plot.setMenuEnabled(False)
        vb = plot.getViewBox()
        vb.invertY(True)
        vb.setAspectLocked(True)
        self.image = pg.ImageItem(axisOrder="row-major")
        plot.addItem(self.image)
        self.outline = QtWidgets.QGraphicsPathItem()
        self.outline.setPen(cosmetic_pen(REUSED_PEN, 2))
        plot.addItem(self.outline)
        self.empty_label = pg.TextItem(EMPTY_MESSAGE, color="#777", anchor=(0.5, 0.5))
        self.empty_label.setParentItem(vb)
        vb.sigResized.connect(lambda *_: self.empty_label.setPos(vb.boundingRect().center()))
        self.map.scene().sigMouseMoved.connect(self._hovered)

        # an opened run's recorded snapshots: which one the map shows
        self.slider = QtWidgets.QSlider(QtCore.Qt.Orientation.Horizontal)
        self.slider.setObjectName("kvSnapshotSlider")
        self.slider.setToolTip("The snapshots of the cache the run recorded (kv_map.jsonl): drag to see it at "
                               "another moment, marked on the plot below")
        self.slider_label = QtWidgets.QLabel()
        self.slider_row = QtWidgets.QWidget()
        row = QtWidgets.QHBoxLayout(self.slider_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(QtWidgets.QLabel("Snapshot"))
        row.addWidget(self.slider, 1)
        row.addWidget(self.slider_label)
        self.slider_row.setVisible(False)
        self.slider.valueChanged.connect(self._picked)
        self._slider_for = None     # (run, snapshots) the slider's range was set for

        self.history = pg.PlotWidget()
        self.history.setObjectName("kvHistoryPlot")
        hp = self.history.getPlotItem()
        style_plot(hp, swatch_title("The cache over time", [("held", HELD_COLOR), ("cached, free", CACHED_COLOR),
                                                              ("reserved, unused", RESERVED_COLOR),
                                                              ("prefix hit rate so far", HIT_COLOR)]),
                   "time since run start (ms)", "% of the cache · hit %")
        hp.setYRange(0, 100, padding=0.02)
        hp.getViewBox().enableAutoRange(axis="y", enable=False)
        self.curves = {}
        for name, color in (("held", HELD_COLOR), ("cached", CACHED_COLOR), ("reserved", RESERVED_COLOR),
                            ("hit", HIT_COLOR)):
            curve = hp.plot(pen=cosmetic_pen(color, 2), stepMode=None)
            curve.setDownsampling(auto=True, method="peak")
            curve.setClipToView(True)
            self.curves[name] = curve
        self.moment = pg.InfiniteLine(angle=90, movable=False, pen=cosmetic_pen("#888", 1))   # the snapshot shown
        self.moment.setVisible(False)
        hp.addItem(self.moment, ignoreBounds=True)

        splitter = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        splitter.setChildrenCollapsible(False)
        splitter.addWidget(self.map)
        splitter.addWidget(self.history)
        splitter.setSizes([420, 200])
        set_minimum_heights(self.map, self.history)
        column = QtWidgets.QVBoxLayout(self)
        column.setContentsMargins(4, 2, 4, 2)
        column.addWidget(self.summary)
        column.addWidget(self.slider_row)
        column.addWidget(splitter, 1)
        self.note.setText("<b>KV cache.</b> Every block of the cache is a cell: a colour per request holding it "
                          "(paler while partly written), grey when no request holds it but it keeps a prefix a "
                          "later request can reuse, dark when empty; a yellow outline marks blocks a request just "
                          "found cached. Under <code>--kv-layout slots</code> each row is a slot and its pink room "
                          "is reserved for its request but holds nothing: the waste paged blocks remove. Below, "
                          "the share of the cache held, cached and reserved, and the prefix hit rate so far. "
                          "An opened run shows the snapshots its folder recorded: the Snapshot slider steps "
                          "through them.")

    @staticmethod
    def _title(layout: str) -> str:
        # short: the map's width is the central area's, and the summary line above says the rest
        swatches = [("a request each", REQUEST_COLORS[0]), ("cached, free", STATE_COLORS[CACHED_FREE]),
                    ("free", STATE_COLORS[FREE])]
        if layout == "slots":   # nothing is ever cached or found cached in a slot
            swatches = [swatches[0], swatches[2], ("reserved, unused", STATE_COLORS[RESERVED])]
        else:
            swatches.append(("just reused", REUSED_PEN, "&#9633;"))
        return swatch_title("KV cache" + (" by slot" if layout == "slots" else ""), swatches)

    # ---- painting ----------------------------------------------------------------------------

    def refresh(self) -> None:
        kv = self.store.kv
        # a replay outlines what its snapshot found cached for as long as it is shown
        outlined = kv.is_replay or time.monotonic() - kv.reused_at < REUSED_SHOW_S
        self._sync_slider()
        key = (self.store.generation, kv.version, outlined)   # the map changes with a snapshot only
        if key != self._seen:
            self._seen = key
            snap = kv.latest
            self.empty_label.setVisible(snap is None)
            self.empty_label.setText(kv.missing or EMPTY_MESSAGE)
            self.moment.setVisible(kv.is_replay)
            if kv.is_replay:
                self.moment.setValue(snap.time_ms)
            if snap is None:
                self.image.clear()
                self.outline.setPath(QtGui.QPainterPath())
                self.summary.setText(" ")
            else:
                self._paint_map(snap, outlined)
        history = (self.store.generation, self.store.kv_curve.num_appended, kv.num_snapshots)
        if history != self._seen_history:   # new steps or a new snapshot: not every batch of tokens
            self._seen_history = history
            self._paint_history()

    def _paint_map(self, snap, outlined: bool) -> None:
        kv = self.store.kv
        width = self._width = grid_width(kv.num_cells, snap.cells_per_row)
        image = map_image(kv.owners, kv.tokens, snap.block_size, width)
        rows = image.shape[0]
        self.image.setImage(with_gaps(image) if kv.num_cells <= GAP_MAX_CELLS else image, autoLevels=False)
        self.image.setRect(QtCore.QRectF(0, 0, width, rows))   # a cell is one unit, whatever its pixels
        if snap.layout != self._layout:   # a title re-lays out the plot: only when it changes
            self._layout = snap.layout
            set_title(self.map.getPlotItem(), self._title(snap.layout))
        if outlined and len(kv.reused):
            cells = kv.reused[kv.reused < kv.num_cells]
            x, y = (cells % width).astype(np.float64), (cells // width).astype(np.float64)
            self.outline.setPath(rect_path(x + 0.08, x + 0.92, y + 0.08, y + 0.92))
        else:
            self.outline.setPath(QtGui.QPainterPath())
        self.summary.setText(self.describe())

    def describe(self) -> str:
        """One line of the map's counts, e.g. '1,024 blocks of 16 tokens: 300 held by 8 requests, ...'."""
        kv, snap = self.store.kv, self.store.kv.latest
        owners = kv.owners
        held = owners >= 0
        parts = [f"{int(held.sum()):,} held by {len(np.unique(owners[held]))} requests"]
        for state in (CACHED_FREE, RESERVED, FREE):
            count = int((owners == state).sum())
            if count or state != RESERVED:
                parts.append(f"{count:,} {STATE_NAMES[state]}")
        unit = f"cells ({snap.cells_per_row} a slot)" if snap.layout == "slots" else "blocks"
        when = "at the end" if snap.final else f"at {snap.time_ms / 1000:.1f} s"
        if kv.is_replay:
            when += f" (recorded snapshot {kv.shown + 1} of {len(kv.recorded)})"
        return f"{kv.num_cells:,} {unit} of {snap.block_size} tokens, {when}: " + ", ".join(parts)

    def _sync_slider(self) -> None:
        """The slider spans an opened run's snapshots (hidden for a live run, or one snapshot)."""
        kv = self.store.kv
        key = (self.store.generation, len(kv.recorded))
        if key == self._slider_for:
            return
        self._slider_for = key
        self.slider_row.setVisible(len(kv.recorded) > 1)
        self.slider.blockSignals(True)
        self.slider.setRange(0, max(len(kv.recorded) - 1, 0))
        self.slider.setValue(max(kv.shown, 0))
        self.slider.blockSignals(False)
        self._label_slider()

    def _label_slider(self) -> None:
        kv = self.store.kv
        self.slider_label.setText(f"{kv.latest.time_ms / 1000:.1f} s" if kv.is_replay else "")

    def _picked(self, index: int) -> None:
        self.store.kv.show(index)
        self._label_slider()
        self.refresh()

    def _paint_history(self) -> None:
        curve = self.store.kv_curve   # per step held: the run's hit rate so far, exact after older steps drop
        t = curve.column("time_ms")
        if len(t):
            self.curves["held"].setData(t, 100.0 * np.nan_to_num(curve.column("held")), skipFiniteCheck=True)
            self.curves["hit"].setData(t, 100.0 * np.nan_to_num(curve.column("hit")), skipFiniteCheck=True)
        else:
            self.curves["held"].setData([], [])
            self.curves["hit"].setData([], [])
        kv = self.store.kv
        for name in ("cached", "reserved"):
            x, share = kv.fractions(name)
            if len(x) and share.any():
                self.curves[name].setData(x, 100.0 * share, skipFiniteCheck=True)
            else:
                self.curves[name].setData([], [])

    # ---- hover -------------------------------------------------------------------------------

    def cell_at(self, x: float, y: float) -> int | None:
        kv = self.store.kv
        col, row = math.floor(x), math.floor(y)
        if kv.latest is None or not (0 <= col < self._width) or row < 0:
            return None
        index = row * self._width + col
        return index if index < kv.num_cells else None

    def hover_text(self, x: float, y: float) -> str:
        index = self.cell_at(x, y)
        if index is None:
            return ""
        kv = self.store.kv
        return describe_cell(index, int(kv.owners[index]), int(kv.tokens[index]), kv.latest.block_size,
                             kv.latest.cells_per_row)

    def _hovered(self, scene_pos) -> None:
        vb = self.map.getPlotItem().getViewBox()
        if not vb.sceneBoundingRect().contains(scene_pos):
            return
        point = vb.mapSceneToView(scene_pos)
        text = self.hover_text(point.x(), point.y())
        if text:
            QtWidgets.QToolTip.showText(self.map.mapToGlobal(self.map.mapFromScene(scene_pos)), text, self.map)
        else:
            QtWidgets.QToolTip.hideText()
