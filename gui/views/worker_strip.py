"""The step strip of a disaggregated run: one row per worker, prefill workers above, decode workers below.

Each row holds that worker's steps as bars in time (a worker's steps never overlap, so a row
reads like the single engine's strip), coloured by phase, each bar's height its share of the
row on a log scale of its tokens. The store's `WorkerRows` (gui/state/worker_rows.py) keeps the bars;
the view paints those in view when the window's timer fires. Its time axis is linked to the
strip and the lanes.
"""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6 import QtWidgets

from backend.records import Phase

from gui.views.plot_style import PHASE_COLORS, cosmetic_pen, outline_color, rect_path, set_title, style_plot, swatch_title
from gui.state.worker_rows import PHASE_CODE

ROW_HEIGHT = 0.8      # of one row's unit: the gap between rows is the rest


def is_replicas(names) -> bool:
    """Whether the rows are a simulated data-parallel run's replicas (replica-0, replica-1, ...)."""
    return bool(names) and all(str(n).startswith("replica-") for n in names)


def strip_title(replicas: bool) -> str:
    text = ("Engine steps by replica: one row per data-parallel replica" if replicas else
            "Engine steps by worker: prefill workers above, decode workers below")
    return swatch_title(text, [(p.value, c) for p, c in PHASE_COLORS.items()])


class WorkerStripView(pg.PlotWidget):
    """Repainted by the window's timer through refresh(); slots never paint."""

    def __init__(self, store, parent=None):
        super().__init__(parent)
        self.setObjectName("workerStripPlot")
        self.store = store
        self._seen_version = -1
        plot = self.getPlotItem()
        style_plot(plot, strip_title(False), "time since run start (ms)", "")
        self._replicas = False   # the rows are a simulated --dp run's replicas, not disaggregated workers
        plot.setMouseEnabled(x=True, y=False)
        self.items: dict[Phase, QtWidgets.QGraphicsPathItem] = {}
        for phase, color in PHASE_COLORS.items():
            item = QtWidgets.QGraphicsPathItem()
            item.setPen(cosmetic_pen(outline_color(color)))
            item.setBrush(pg.mkBrush(color))
            plot.addItem(item)
            self.items[phase] = item
        self.scene().sigMouseMoved.connect(self._hovered)
        plot.getViewBox().sigXRangeChanged.connect(self._range_changed)

    def _range_changed(self, *_) -> None:
        self._seen_version = -1   # the bars in view change: the next tick redraws them

    @property
    def names(self) -> list[str]:
        return self.store.workers.names

    def row_of(self, name: str) -> float:
        """The bottom of a worker's row: the first worker's row is the top one."""
        return float(len(self.names) - 1 - self.names.index(name))

    def refresh(self) -> None:
        if self._seen_version == self.store.version:
            return
        self._seen_version = self.store.version
        rows = self.store.workers
        replicas = is_replicas(rows.names)
        if replicas != self._replicas:
            self._replicas = replicas
            set_title(self.getPlotItem(), strip_title(replicas))
        top = max((float(np.max(buf.column("tokens"))) for buf in rows.rows.values() if len(buf)), default=1.0)
        scale = np.log10(max(top, 2.0))
        paths = {phase: ([], [], [], []) for phase in Phase}
        lo, hi = self.getPlotItem().getViewBox().viewRange()[0]
        for name in rows.names:
            buf = rows.rows[name]
            if not len(buf):
                continue
            base = self.row_of(name)
            start, end, tokens, phase = (buf.column(c) for c in ("start", "end", "tokens", "phase"))
            a, b = int(np.searchsorted(end, lo, side="left")), int(np.searchsorted(start, hi, side="right"))
            start, end, tokens, phase = start[a:b], end[a:b], tokens[a:b], phase[a:b]   # the bars in view
            height = ROW_HEIGHT * np.clip(0.25 + 0.75 * np.log10(np.maximum(tokens, 1.0)) / scale, 0.25, 1.0)
            for p in Phase:
                mask = phase == PHASE_CODE[p]
                if mask.any():
                    x0, x1, y0, y1 = paths[p]
                    x0.append(start[mask])
                    x1.append(end[mask])
                    y0.append(np.full(int(mask.sum()), base))
                    y1.append(base + height[mask])
        for p, item in self.items.items():
            x0, x1, y0, y1 = (np.concatenate(part) if part else np.empty(0) for part in paths[p])
            item.setPath(rect_path(x0, x1, y0, y1))
        ticks = [(self.row_of(name) + ROW_HEIGHT / 2, name) for name in rows.names]
        axis = self.getPlotItem().getAxis("left")
        axis.setTicks([ticks, []])
        self.getPlotItem().getViewBox().setYRange(-0.1, max(1, len(rows.names)) - 0.1, padding=0)

    def hover_text(self, x_ms: float, y: float) -> str:
        for name in self.names:
            base = self.row_of(name)
            if base <= y <= base + ROW_HEIGHT:
                step = self.store.workers.step_at(name, x_ms)
                if step is not None:
                    return (f"{name} · {step['phase'].value}\nstart {step['start']:.1f} ms, took "
                            f"{step['end'] - step['start']:.2f} ms\n{step['tokens']} tokens")
        return ""

    def _hovered(self, scene_pos) -> None:
        vb = self.getPlotItem().getViewBox()
        if not vb.sceneBoundingRect().contains(scene_pos):
            return
        point = vb.mapSceneToView(scene_pos)
        text = self.hover_text(point.x(), point.y())
        if text:
            QtWidgets.QToolTip.showText(self.mapToGlobal(self.mapFromScene(scene_pos)), text, self)
        else:
            QtWidgets.QToolTip.hideText()
