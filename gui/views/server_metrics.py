"""The server's own view of its load under the lanes: requests running and waiting, and KV-cache use.

A remote run's server (vLLM, SGLang, TGI, llama.cpp) publishes these on its `/metrics`; the
coordinator reads them four times a second (backend.targets.remote.metrics), and a run folder
keeps them in server_metrics.csv. The time axis is the lanes' (linked, with the same left axis
width), so a queue building on the server lines up with the lanes' time to first token growing.
Running and waiting are counts on the left axis; the KV cache's use is a shaded area whose full
height is 100% (a right axis would narrow the plot and break the alignment with the lanes), its
value in the title and under the pointer. The view shows only for a run that has readings.
"""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from gui.views.plot_style import set_title, style_plot, swatch_title

RUNNING_COLOR = "#2f6fd6"
WAITING_COLOR = "#e6772e"
KV_COLOR = (39, 174, 96, 70)
KV_EDGE = "#27ae60"


def server_series(readings) -> dict[str, np.ndarray]:
    """time_ms and each gauge as arrays (NaN where a reading lacks it)."""
    def column(name):
        return np.array([np.nan if getattr(r, name) is None else getattr(r, name) for r in readings], dtype=np.float64)
    return {"time_ms": np.array([r.time_ms for r in readings], dtype=np.float64),
            "running": column("running"), "waiting": column("waiting"), "kv_usage": column("kv_usage")}


class ServerMetricsView(pg.PlotWidget):
    """Repainted by the window's timer through refresh(); slots never paint."""

    def __init__(self, store, parent=None):
        super().__init__(parent)
        self.setObjectName("serverMetricsPlot")
        self.store = store
        self._seen = (-1, -1)
        plot = self.getPlotItem()
        style_plot(plot, self._title(None), "time since run start (ms)", "requests")
        plot.setMouseEnabled(x=True, y=False)
        # the KV cache's use in a view box of its own, 0..1 over the full height, behind the counts
        self.kv_box = pg.ViewBox(enableMouse=False)
        self.kv_box.setYRange(0.0, 1.0, padding=0.0)
        self.kv_box.setXLink(plot.getViewBox())
        self.kv_box.setZValue(-10)
        plot.scene().addItem(self.kv_box)
        plot.getViewBox().sigResized.connect(self._fit_kv_box)
        self.kv_curve = pg.PlotDataItem(pen=pg.mkPen(KV_EDGE, width=1), fillLevel=0.0, brush=pg.mkBrush(KV_COLOR),
                                        stepMode=None)
        self.kv_box.addItem(self.kv_curve)
        self.running_curve = plot.plot(pen=pg.mkPen(RUNNING_COLOR, width=1))
        self.waiting_curve = plot.plot(pen=pg.mkPen(WAITING_COLOR, width=1))
        for curve in (self.running_curve, self.waiting_curve, self.kv_curve):
            curve.setClipToView(True)
        self.series: dict[str, np.ndarray] = server_series([])
        self.scene().sigMouseMoved.connect(self._hovered)

    def _fit_kv_box(self) -> None:
        self.kv_box.setGeometry(self.getPlotItem().getViewBox().sceneBoundingRect())

    def _title(self, engine: str | None, kv: bool = True) -> str:
        items = [("running", RUNNING_COLOR), ("waiting", WAITING_COLOR)]
        if kv:
            items.append(("KV cache used (0-100%)", KV_EDGE))
        who = f"{engine}'s" if engine else "the server's"
        return swatch_title(f"Server load, from {who} /metrics", items)

    def has_data(self) -> bool:
        return bool(self.store.server_readings)

    def refresh(self) -> None:
        readings = self.store.server_readings
        key = (id(readings), len(readings))
        if key == self._seen:
            return
        self._seen = key
        self.series = s = server_series(readings)
        t = s["time_ms"]
        has_kv = bool(np.isfinite(s["kv_usage"]).any())
        engine = readings[-1].engine if readings and readings[-1].engine else None
        set_title(self.getPlotItem(), self._title(engine, has_kv))
        for curve, name in ((self.running_curve, "running"), (self.waiting_curve, "waiting")):
            y = s[name]
            ok = np.isfinite(y)
            curve.setData(t[ok], y[ok])
        ok = np.isfinite(s["kv_usage"])
        self.kv_curve.setData(t[ok], s["kv_usage"][ok])
        top = np.nanmax(np.concatenate([s["running"], s["waiting"], [1.0]]))
        self.getPlotItem().getViewBox().setYRange(0.0, float(top) * 1.1, padding=0.0)
        self._fit_kv_box()

    def hover_text(self, x_ms: float) -> str:
        t = self.series["time_ms"]
        if not len(t):
            return ""
        i = int(np.clip(np.searchsorted(t, x_ms, side="right") - 1, 0, len(t) - 1))   # the reading in force
        parts = [f"at {t[i]:.0f} ms"]
        for name, label in (("running", "running"), ("waiting", "waiting")):
            if np.isfinite(self.series[name][i]):
                parts.append(f"{label} {self.series[name][i]:g}")
        if np.isfinite(self.series["kv_usage"][i]):
            parts.append(f"KV cache {100.0 * self.series['kv_usage'][i]:.1f}% used")
        return " · ".join(parts)

    def _hovered(self, scene_pos) -> None:
        vb = self.getPlotItem().getViewBox()
        if not vb.sceneBoundingRect().contains(scene_pos):
            return
        text = self.hover_text(vb.mapSceneToView(scene_pos).x())
        self.setToolTip(text)

