"""Throughput against batch size (or prompt length): measured sweep points and the roofline's prediction."""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore

from backend.profiles import GpuProfile, dtype_bytes, dtype_key
from backend.roofline import CROSSOVER_CAP, crossover_batch, predict_decode, predict_prefill

from .plot_style import LOCAL_COLOR, MEASURED_COLOR, PREDICTED_COLOR, STEP_TIME_COLOR, cosmetic_pen, style_plot
from .run_store import RunStore

BATCH_RANGE = (1, 1024)        # the prediction curve's x range for batch sweeps
PROMPT_RANGE = (16, 32768)     # ... and for prompt-length sweeps


class Log2Axis(pg.AxisItem):
    """An axis for data plotted as log2(x), labelled with x itself (1, 2, 4, ...)."""

    def tickValues(self, minVal, maxVal, size):
        lo, hi = math.floor(minVal), math.ceil(maxVal)
        step = max(1, math.ceil((hi - lo + 1) / max(2, size / 45)))   # about one label per 45 px
        return [(float(step), [float(v) for v in range(lo, hi + 1, step)])]

    def tickStrings(self, values, scale, spacing):
        return [f"{2.0 ** v:g}" if v >= 0 else f"1/{2.0 ** -v:g}" for v in values]


def prediction_dtype(profile: GpuProfile, run_dtype: str) -> str:
    """The run's dtype when the profile has a figure for it, else the profile's first (e.g. a T4's fp16)."""
    key = dtype_key(run_dtype)
    return key if key in profile.tflops else profile.dtypes[0]


class ThroughputView(pg.PlotWidget):
    def __init__(self, store: RunStore, parent=None):
        super().__init__(parent, axisItems={"bottom": Log2Axis("bottom")})
        self.setObjectName("throughputPlot")
        self.store = store
        self.kind = "batch"
        self.shape = None
        self.run_dtype = "float32"
        self.profile: GpuProfile | None = None
        self.context = 512
        self.crossover: int | None = None
        self._seen = None
        plot = self.getPlotItem()
        plot.showAxis("right")
        self.step_box = pg.ViewBox()   # step time on its own (right) axis
        plot.scene().addItem(self.step_box)
        plot.getAxis("right").linkToView(self.step_box)
        self.step_box.setXLink(plot)
        plot.getViewBox().sigResized.connect(self._sync_boxes)
        self.legend = plot.addLegend(offset=(10, 10), brush=(255, 255, 255, 210), labelTextSize="9pt")
        self.measured = plot.plot([], [], pen=cosmetic_pen(MEASURED_COLOR, 2), symbol="o", symbolSize=7,
                                  symbolBrush=MEASURED_COLOR, name="measured tokens/s")
        self.step_time = pg.PlotDataItem([], [], pen=pg.mkPen(STEP_TIME_COLOR, width=1, style=QtCore.Qt.PenStyle.DotLine),
                                         symbol="s", symbolSize=6, symbolBrush=STEP_TIME_COLOR)
        self.step_box.addItem(self.step_time)
        self.legend.addItem(self.step_time, "measured step ms (right)")
        self.predicted = plot.plot([], [], pen=pg.mkPen(PREDICTED_COLOR, width=1, style=QtCore.Qt.PenStyle.DashLine),
                                   name="profile prediction")
        self.local = plot.plot([], [], pen=pg.mkPen(LOCAL_COLOR, width=1, style=QtCore.Qt.PenStyle.DashLine),
                               symbol="t", symbolSize=6, symbolBrush=LOCAL_COLOR, name="this machine, predicted")
        self.crossover_line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen("#c0392b", width=1),
                                              label="", labelOpts={"position": 0.85, "color": "#c0392b",
                                                                   "fill": (255, 255, 255, 200)})
        plot.addItem(self.crossover_line, ignoreBounds=True)
        self.crossover_line.hide()
        self.note = pg.TextItem("", color="#555", anchor=(1, 1))   # what the plot cannot show, said in words
        self.note.setParentItem(plot.getViewBox())
        plot.getViewBox().sigResized.connect(self._place_note)
        self._label_axes()

    def _place_note(self, *_) -> None:
        rect = self.getPlotItem().getViewBox().boundingRect()
        self.note.setTextWidth(max(120.0, 0.7 * rect.width()))
        self.note.setPos(rect.right() - 6, rect.bottom() - 4)

    def _sync_boxes(self) -> None:
        self.step_box.setGeometry(self.getPlotItem().getViewBox().sceneBoundingRect())
        self.step_box.linkedViewChanged(self.getPlotItem().getViewBox(), self.step_box.XAxis)

    def _label_axes(self) -> None:
        plot = self.getPlotItem()
        if self.kind == "batch":
            style_plot(plot, "Decode throughput vs batch size", "batch size (requests, log2)", "decode")
            plot.setLabel("left", "decode", units="tokens/s")
            plot.setLabel("right", "decode step", units="ms")
        else:
            style_plot(plot, "Prefill throughput vs prompt length", "prompt length (tokens, log2)", "prefill")
            plot.setLabel("left", "prefill", units="tokens/s")
            plot.setLabel("right", "TTFT", units="ms")

    # ---- inputs ------------------------------------------------------------------------------

    def set_kind(self, kind: str) -> None:
        if kind != self.kind:
            self.kind = kind
            self._label_axes()
            self._seen = None

    def set_inputs(self, shape=None, run_dtype: str | None = None, profile: GpuProfile | None = None,
                   context: int | None = None) -> None:
        """What the prediction needs; any left as None keeps its value."""
        if shape is not None:
            self.shape = shape
        if run_dtype is not None:
            self.run_dtype = run_dtype
        if profile is not None:
            self.profile = profile
        if context is not None:
            self.context = context
        self._seen = None

    # ---- painting ----------------------------------------------------------------------------

    def refresh(self) -> None:
        points = [p for p in self.store.sweep_points if p.kind == self.kind]
        finished = self.store.finished
        key = (len(points), self.kind, id(self.shape), self.run_dtype, self.profile, self.context, id(finished))
        if key == self._seen:
            return
        self._seen = key
        x = np.log2([p.x for p in points]) if points else np.empty(0)
        self.measured.setData(x, [p.tokens_per_s for p in points])
        self.step_time.setData(x, [p.step_ms for p in points])
        local = [(xi, p.x / (p.predicted_local_ms / 1000.0)) for xi, p in zip(x, points) if p.predicted_local_ms]
        self.local.setData([a for a, _ in local], [b for _, b in local])
        notes = [] if points else [f"run a {'batch-size' if self.kind == 'batch' else 'prompt-length'} sweep "
                                   "to add measured points"]
        notes += self._paint_prediction()
        measured = finished.summary.get("measured_crossover_batch") if finished is not None else None
        if self.kind == "batch" and measured:
            notes.append(f"measured: tokens/s stops growing in proportion to the batch at batch {measured}")
        self.note.setText("\n".join(notes))
        self._place_note()

    def _paint_prediction(self) -> list[str]:
        """Draw the profile's curve and crossover; returns notes for what cannot be drawn."""
        self.crossover = None
        self.crossover_line.hide()
        if self.shape is None or self.profile is None:
            self.predicted.setData([], [])
            return ["the prediction appears once a model's shape is known (after a run starts)"]
        dtype = prediction_dtype(self.profile, self.run_dtype)
        nbytes = dtype_bytes(dtype)
        lo, hi = BATCH_RANGE if self.kind == "batch" else PROMPT_RANGE
        notes = []
        if self.kind == "batch":
            self.crossover = crossover_batch(self.shape, nbytes, self.context, self.profile, dtype)
            if self.crossover < CROSSOVER_CAP:
                hi = max(hi, 4 * self.crossover)
            else:
                notes.append(f"{self.profile.name}: decode stays memory-bound at context {self.context} "
                             "(no crossover batch)")
        # whole batch sizes / prompt lengths, four per octave
        xs = np.unique(np.round(2.0 ** np.arange(math.log2(lo), math.log2(hi) + 0.01, 0.25)))
        if self.kind == "batch":
            times = [predict_decode(self.shape, nbytes, int(b), self.context, self.profile, dtype).time_s for b in xs]
        else:
            times = [predict_prefill(self.shape, nbytes, int(n), self.profile, dtype).time_s for n in xs]
        self.predicted.setData(np.log2(xs), xs / np.array(times))
        self.legend.getLabel(self.predicted).setText(f"{self.profile.name} ({dtype}), predicted")
        if self.crossover is not None and self.crossover < CROSSOVER_CAP:
            self.crossover_line.setValue(math.log2(self.crossover))
            self.crossover_line.label.setFormat(f"crossover ≈ batch {self.crossover}\n"
                                                f"({self.profile.name}, {dtype}, context {self.context})")
            self.crossover_line.show()
        return notes
