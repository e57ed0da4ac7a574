"""Throughput against batch size (or prompt length): measured sweep points and the roofline's prediction.

The prediction follows the arithmetic the run's products ran in (run.json's "matmul"): on a CPU
whose kernels ran bfloat16 products, a step of many rows is priced on the profile's bf16 roof and
a small decode batch on the fp32 FMA roof (backend/roofline/roofs.py). The profile's compute
roofs are drawn too, as the tokens/s each peak alone allows: both of a CPU's (fp32 FMA, bf16 on its
matrix unit), each labelled with the rows that ran under it, and a GPU's one.
"""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from backend.config import SweepKind
from backend.errors import InputError
from backend.roofline.profiles import GpuProfile, as_precision, dtype_bytes, dtype_key
from backend.roofline.cost import CROSSOVER_CAP, crossover_batch, predict_decode, predict_prefill, step_cost
from backend.roofline.roofs import Roof, compute_roofs, math_from_info, runs_bf16
from backend.run_info import RunInfo

from gui.views.plot_style import (CROSSOVER_COLOR, LOCAL_COLOR, MEASURED_COLOR, PREDICTED_COLOR, PROFILE_SIMULATED_COLOR,
                         ROOF_COLORS, SIMULATED_COLOR, STEP_TIME_COLOR, cosmetic_pen, RateAxis, set_title, style_plot,
                         swatch_title)
from gui.state.run_store import RunStore
from gui.views.label_place import place_labels

BAND_RGBA = (143, 179, 217, 90)   # a simulated sweep's band, light: the points stay readable over it
BATCH_RANGE = (1, 1024)        # the prediction curve's x range for batch sweeps
PROMPT_RANGE = (16, 32768)     # ... and for prompt-length sweeps
FLOAT_NAMES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}   # a roof's key, in words


class Log2Axis(pg.AxisItem):
    """An axis for data plotted as log2(x), labelled with x itself (1, 2, 4, ...)."""

    def tickValues(self, minVal, maxVal, size):
        lo, hi = math.floor(minVal), math.ceil(maxVal)
        step = max(1, math.ceil((hi - lo + 1) / max(2, size / 45)))   # about one label per 45 px
        return [(float(step), [float(v) for v in range(lo, hi + 1, step)])]

    def tickStrings(self, values, scale, spacing):
        return [f"{2.0 ** v:g}" if v >= 0 else f"1/{2.0 ** -v:g}" for v in values]


def is_moe(shape) -> bool:
    return bool(getattr(shape, "num_experts", 0))


def prediction_dtype(profile: GpuProfile, run_dtype) -> tuple:
    """(what to price the prediction at, its bytes): the run's precision where the profile has a
    peak for it, else the profile's first dtype (e.g. a T4's fp16), at that dtype's bytes."""
    try:
        precision = as_precision(run_dtype)
    except InputError:
        precision = None
    if precision is not None and profile.has_peak(precision):
        return precision, precision
    key = profile.dtypes[0]
    return key, dtype_bytes(key)


class ThroughputView(pg.PlotWidget):
    def __init__(self, store: RunStore, parent=None):
        super().__init__(parent, axisItems={"bottom": Log2Axis("bottom"), "left": RateAxis("left")})
        self.setObjectName("throughputPlot")
        self.store = store
        self.kind = SweepKind.BATCH
        self.shape = None
        self.run_dtype = "float32"
        self.profile: GpuProfile | None = None
        self.context = 512
        self.crossover: int | None = None
        self._seen = None
        self.references = None      # a ReferenceSet: one curve each (set_references)
        self.reference_curves: dict[int, pg.PlotDataItem] = {}
        self._predicted_name = "profile (predicted)"
        plot = self.getPlotItem()
        # measured points sit far below a datasheet's roofline on a small machine: only a log axis shows both
        plot.setLogMode(x=False, y=True)
        plot.showAxis("right")
        self.step_box = pg.ViewBox()   # step time on its own (right) axis
        plot.scene().addItem(self.step_box)
        plot.getAxis("right").setLogMode(False, False)   # step times stay linear on their own axis
        plot.getAxis("right").linkToView(self.step_box)
        self.step_box.setXLink(plot)
        plot.getViewBox().sigResized.connect(self._sync_boxes)
        self.measured = plot.plot([], [], pen=cosmetic_pen(MEASURED_COLOR, 2), symbol="o", symbolSize=7,
                                  symbolBrush=MEASURED_COLOR)
        # a simulated sweep's points: their band (backend.sim.bands), shaded between its two edges
        clear = pg.mkPen((0, 0, 0, 0))   # edges drawn by the fill alone (pen=None would leave them without a path)
        self.band_edges = (plot.plot([], [], pen=clear), plot.plot([], [], pen=clear))
        self.band = pg.FillBetweenItem(*self.band_edges, brush=pg.mkBrush(*BAND_RGBA))
        self.band.setZValue(-10)
        plot.addItem(self.band)
        dotted = pg.mkPen(STEP_TIME_COLOR, width=1, style=QtCore.Qt.PenStyle.DotLine)
        self.step_time = pg.PlotDataItem([], [], pen=dotted, symbol="s", symbolSize=6, symbolBrush=STEP_TIME_COLOR)
        self.step_box.addItem(self.step_time)
        # a mixture of experts: the right axis is the weights a step reads, measured and predicted
        self.predicted_bytes = pg.PlotDataItem([], [], pen=pg.mkPen(STEP_TIME_COLOR, width=1,
                                                                     style=QtCore.Qt.PenStyle.DashLine))
        self.step_box.addItem(self.predicted_bytes)
        self.predicted = plot.plot([], [], pen=pg.mkPen(PREDICTED_COLOR, width=1, style=QtCore.Qt.PenStyle.DashLine))
        self.local = plot.plot([], [], pen=pg.mkPen(LOCAL_COLOR, width=1, style=QtCore.Qt.PenStyle.DashLine),
                               symbol="t", symbolSize=6, symbolBrush=LOCAL_COLOR)
        # the cost model's prices: this machine's beside the measured points, the profile's beside its roofline
        self.simulated = plot.plot([], [], pen=pg.mkPen(SIMULATED_COLOR, width=1, style=QtCore.Qt.PenStyle.DotLine),
                                   symbol="x", symbolSize=8, symbolBrush=SIMULATED_COLOR, symbolPen=SIMULATED_COLOR)
        self.profile_simulated = plot.plot([], [], pen=pg.mkPen(PROFILE_SIMULATED_COLOR, width=1,
                                                                style=QtCore.Qt.PenStyle.DashDotLine))
        self._simulated_name = "profile (simulated)"
        # the profile's compute roofs (at most two: a CPU's fp32 FMA and bf16 roofs), each with its label
        self.roofs: list[Roof] = []
        self.roof_curves = [plot.plot([], [], pen=pg.mkPen(color, width=1)) for color in ROOF_COLORS]
        # a light fill keeps a label readable where a curve crosses it
        self.roof_labels = [pg.TextItem("", color=color, anchor=(0, 1), fill=(255, 255, 255, 180)) for color in ROOF_COLORS]
        for label in self.roof_labels:
            plot.addItem(label, ignoreBounds=True)
            label.hide()
        self.crossover_line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen(CROSSOVER_COLOR, width=1))
        plot.addItem(self.crossover_line, ignoreBounds=True)
        self.crossover_line.hide()
        self.crossover_label = pg.TextItem("", color=CROSSOVER_COLOR, anchor=(0, 0.5), fill=(255, 255, 255, 210))
        plot.addItem(self.crossover_label, ignoreBounds=True)
        self.crossover_label.hide()
        self._roof_lines: list[tuple[np.ndarray, np.ndarray]] = []   # each shown roof's (log2 x, rate), for its label
        plot.getViewBox().sigRangeChanged.connect(self._place_labels)
        plot.getViewBox().sigResized.connect(self._place_labels)
        # what the plot cannot show, said in words under it (the window places it; inside it would cover curves)
        self.note = QtWidgets.QLabel()
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: #555;")
        self._label_axes()

    def _place_labels(self, *_) -> None:
        """The crossover's label first, at the foot of its line (right of it, else left; else at its
        top): on a log-log roofline the curves rise from the lower left to the roofs' plateau at the
        top, so the bottom beside the crossover is where nothing else is drawn. Then each roof's label,
        under its line at the left edge, else over it, else at the right edge. None may overlap another
        (gui/views/label_place.py)."""
        vb = self.getPlotItem().getViewBox()
        (x0, x1), (y0, y1) = vb.viewRange()
        entries = []
        if self.crossover_line.isVisible():
            x = self.crossover_line.value()
            entries.append((self.crossover_label, [(QtCore.QPointF(x, y0), (0, 1)), (QtCore.QPointF(x, y0), (1, 1)),
                                                   (QtCore.QPointF(x, y1), (0, 0)), (QtCore.QPointF(x, y1), (1, 0))]))
        for label, (xs, rates) in zip(self.roof_labels, self._roof_lines):
            left, right = max(x0, xs[0]), min(x1, xs[-1])
            if left >= right:
                entries.append((label, []))
                continue
            # the plot's y axis is log10 of the rate
            at_left = QtCore.QPointF(left, float(np.log10(np.interp(left, xs, rates))))
            at_right = QtCore.QPointF(right, float(np.log10(np.interp(right, xs, rates))))
            entries.append((label, [(at_left, (0, 0)), (at_left, (0, 1)), (at_right, (1, 0)), (at_right, (1, 1))]))
        place_labels(vb, entries)

    def _sync_boxes(self) -> None:
        self.step_box.setGeometry(self.getPlotItem().getViewBox().sceneBoundingRect())
        self.step_box.linkedViewChanged(self.getPlotItem().getViewBox(), self.step_box.XAxis)

    def _label_axes(self) -> None:
        plot = self.getPlotItem()
        if self.kind == SweepKind.BATCH:
            style_plot(plot, self._title(), "batch size (requests, log2)", "decode tokens/s (log)")
            plot.setLabel("right", "weights read per step (MB)" if self._shows_bytes() else "decode step (ms)")
        else:
            style_plot(plot, self._title(), "prompt length (tokens, log2)", "prefill tokens/s (log)")
            plot.setLabel("right", "TTFT (ms)")

    def _title(self, predicted: str | None = None) -> str:
        """The title with the legend under it, in short lines (a legend box inside would cover the curves,
        and a long title would widen the plot past a narrow dock); the references three to a line."""
        predicted = predicted or self._predicted_name
        title = "Decode tokens/s vs batch size" if self.kind == SweepKind.BATCH else "Prefill tokens/s vs prompt length"
        measured = swatch_title("", [("simulated run" if self._run_simulated() else "measured", MEASURED_COLOR,
                                      "&#9679;"),
                                     (self._right_name(), STEP_TIME_COLOR)])
        predictions = swatch_title("", [(predicted, PREDICTED_COLOR, "- -"),
                                        ("this machine (predicted)", LOCAL_COLOR, "&#9660;")])
        predictions += "<br>" + swatch_title("", [(self._simulated_name, PROFILE_SIMULATED_COLOR, "-&middot;-"),
                                                  ("this machine (simulated)", SIMULATED_COLOR, "&times;")])
        shown = [r for r in self.references.visible()] if self.references is not None else []
        lines = [swatch_title("", [(r.name, r.color, "&#9679;") for r in shown[i:i + 3]])
                 for i in range(0, len(shown), 3)]
        refs = "".join(f"<br>{line}" for line in lines)
        return f'{title}<br><span style="font-size:8pt">{measured}<br>{predictions}{refs}</span>'

    def _shows_bytes(self) -> bool:
        """A batch sweep of a mixture of experts: its story is the weights a step reads, which grow
        with the batch (more experts touched); a dense model reads the same weights at every batch."""
        return self.kind == SweepKind.BATCH and is_moe(self.shape)

    def _right_name(self) -> str:
        if self._shows_bytes():
            return "weights MB/step (right; - - predicted)"
        return "step ms (right)" if self.kind == SweepKind.BATCH else "TTFT ms (right)"

    # ---- inputs ------------------------------------------------------------------------------

    def set_references(self, references) -> None:
        """The window's ReferenceSet: each reference's points drawn in its colour under the current run's."""
        self.references = references
        self._seen = None

    def set_kind(self, kind: SweepKind) -> None:
        if kind != self.kind:
            self.kind = kind
            self._label_axes()
            self._seen = None

    def set_inputs(self, shape=None, run_dtype: str | None = None, profile: GpuProfile | None = None,
                   context: int | None = None) -> None:
        """What the prediction needs; any left as None keeps its value."""
        if shape is not None:
            self.shape = shape
            self._label_axes()
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
        key = (self.store.generation, len(points), self.kind, id(self.shape), self.run_dtype, self.profile,
               self.context, id(finished), self.references.version if self.references is not None else None)
        if key == self._seen:
            return
        self._seen = key
        self._paint_references()
        x = np.log2([p.x for p in points]) if points else np.empty(0)
        self.measured.setData(x, [p.tokens_per_s for p in points])
        banded = self._paint_band(x, points)
        if self._shows_bytes():
            read = [(xi, p.weight_bytes / 1e6) for xi, p in zip(x, points) if p.weight_bytes]
            self.step_time.setData([a for a, _ in read], [b for _, b in read])
        else:
            self.step_time.setData(x, [p.step_ms for p in points])
        local = [(xi, p.x / (p.predicted_local_ms / 1000.0)) for xi, p in zip(x, points) if p.predicted_local_ms]
        self.local.setData([a for a, _ in local], [b for _, b in local])
        simulated = [(xi, p) for xi, p in zip(x, points) if p.simulated_ms]
        self.simulated.setData([a for a, _ in simulated], [p.x / (p.simulated_ms / 1000.0) for _, p in simulated])
        notes = [] if points else [f"run a {'batch-size' if self.kind == SweepKind.BATCH else 'prompt-length'} sweep "
                                   "to add measured points"]
        notes += self._simulation_notes(simulated)
        if banded:
            notes.append("shaded: the simulated points' 80% band (the simulator's cross-validated errors on "
                         "published figures of the same regimes)")
        notes += self._paint_prediction()
        notes += self._reference_notes()
        crossover = finished.summary.crossover if finished is not None else None
        measured = crossover.measured if crossover is not None else None
        if self.kind == SweepKind.BATCH and measured:
            notes.append(f"measured: tokens/s stops growing in proportion to the batch near batch {measured} "
                         f"(the knee of a fit over every point)")
        self.note.setText("\n".join(notes))
        self.note.setVisible(bool(notes))

    def _paint_band(self, x: np.ndarray, points: list) -> bool:
        """Shade a simulated sweep's points between their band's edges; False (nothing shaded) for a measured one."""
        if not points or not self._run_simulated():
            for edge in self.band_edges:
                edge.setData([], [])
            return False
        from backend.sim.bands import current_level, info_setup, step_edges
        setup = info_setup(self._run_info(), self.shape)
        is_batch = self.kind == SweepKind.BATCH
        edges = [step_edges(is_batch, p.x, setup, current_level()) for p in points]
        # a point's tokens/s is a rate: its low edge is the step time's high one
        self.band_edges[0].setData(x, [p.tokens_per_s * math.exp(-e.high) for p, e in zip(points, edges)])
        self.band_edges[1].setData(x, [p.tokens_per_s * math.exp(-e.low) for p, e in zip(points, edges)])
        return True

    def _run_simulated(self) -> bool:
        return self.store.info.is_simulated or self.store.info.device.startswith("simulated")

    def _run_info(self) -> RunInfo:
        """run.json's info of the run on the plot: the finished run's, else what the store knows of the live one."""
        finished = self.store.finished
        return finished.data.info if finished is not None and finished.data is not None else self.store.info

    def _simulation_notes(self, simulated: list) -> list[str]:
        """The cost model's error on the measured points, in words: measured and simulated side by side."""
        if not simulated:
            return []
        errors = [abs(p.simulated_ms - p.step_ms) / p.step_ms * 100 for _, p in simulated]
        sweep = self._run_info().sweep
        where = (sweep.local_profile if sweep is not None else None) or "this machine"
        try:
            from backend.roofline.profiles import find_profile
            fitted = bool(find_profile(where).simulation.get("fitted"))
        except InputError:
            fitted = False
        terms = "fitted" if fitted else "placeholder terms: `calibrate --fit`"
        return [f"× {where}'s cost model ({terms}): {sum(errors) / len(errors):.0f}% off on average, "
                f"{max(errors):.0f}% at worst"]

    def _reference_notes(self) -> list[str]:
        steps = [r.name for r in self.references.visible() if r.throughput_points(self.kind)[2] == "steps"] \
            if self.references is not None else []
        none = [r.name for r in self.references.visible() if r.throughput_points(self.kind)[2] == "none"] \
            if self.references is not None else []
        notes = []
        if steps:
            notes.append(f"{', '.join(steps)}: not sweeps: each batch size's median decode-only step of the run "
                         "(at the contexts it had)")
        if none:
            notes.append(f"{', '.join(none)}: no points on this plot")
        return notes

    def _paint_references(self) -> None:
        """A curve per reference, created once and kept until it is removed; hidden ones are kept hidden."""
        refs = {r.key: r for r in self.references} if self.references is not None else {}
        plot = self.getPlotItem()
        for gone in set(self.reference_curves) - set(refs):
            plot.removeItem(self.reference_curves.pop(gone))
        for key, ref in refs.items():
            curve = self.reference_curves.get(key)
            if curve is None:
                # drawn under the current run's points (a lower z): the new curve grows over the old one
                curve = plot.plot([], [], pen=cosmetic_pen(ref.color, 1), symbol="o", symbolSize=6,
                                  symbolBrush=ref.color, symbolPen=ref.color)
                curve.setZValue(-1)
                self.reference_curves[key] = curve
            x, y, _ = ref.throughput_points(self.kind)
            curve.setData(x, y)
            curve.setVisible(ref.visible)
        set_title(plot, self._title())

    def _paint_profile_simulation(self, xs, dtype) -> list[str]:
        """The selected profile's cost model over the same range: the roofline plus the efficiencies and overheads
        a real engine has (what `--simulate --profile` charges)."""
        from backend.precision import Precision
        from backend.sim.step_time import CostModel
        if not isinstance(dtype, Precision):
            self.profile_simulated.setData([], [])
            return []
        from backend.sim.fitted import priced_profile, simulated_math
        roofs = priced_profile(self.profile)   # a fitted profile's terms are fractions of the roofs it was fitted on
        unit_math = simulated_math(self.profile)    # and its runs' matrix unit
        try:
            model = CostModel.for_profile(roofs)
        except InputError as exc:
            self.profile_simulated.setData([], [])
            return [f"{self.profile.key}: no simulation ({exc})"]
        if self.kind == SweepKind.BATCH:
            times = [model.step_seconds(self.shape, dtype, roofs, [1] * int(b), [self.context] * int(b), math=unit_math)
                     for b in xs]
        else:
            times = [model.step_seconds(self.shape, dtype, roofs, [int(n)], [int(n)], math=unit_math) for n in xs]
        self.profile_simulated.setData(np.log2(xs), xs / np.array(times))
        self._simulated_name = f"{self.profile.key} (simulated)"
        self.profile_simulated.setToolTip(f"{self.profile.key}'s cost model: {model.source}")
        return []

    def _paint_predicted_bytes(self, xs, nbytes) -> list[str]:
        """An MoE's weights per decode step against the batch: the shared matrices plus the expected
        union of the routed experts (backend/roofline/moe.py), and what the sweep measured."""
        if not self._shows_bytes():
            self.predicted_bytes.setData([], [])
            return []
        from backend.roofline.cost import step_cost
        from backend.roofline.moe import expected_experts
        read = [step_cost(self.shape, nbytes, [1] * int(b), [self.context] * int(b)).weight_bytes / 1e6 for b in xs]
        self.predicted_bytes.setData(np.log2(xs), read)
        e, k = self.shape.num_experts, self.shape.experts_per_token
        points = [p for p in self.store.sweep_points if p.kind == SweepKind.BATCH and p.weight_bytes]
        note = (f"mixture of experts: a decode step reads the experts its tokens were routed to, "
                f"{e}·(1−(1−{k}/{e})^B) of {e} per layer under uniform routing: {read[0]:,.0f} MB at batch 1, "
                f"{read[-1]:,.0f} MB at batch {int(xs[-1])}")
        if points:
            last = points[-1]
            predicted = step_cost(self.shape, nbytes, [1] * last.x, [self.context] * last.x).weight_bytes / 1e6
            touched = expected_experts(e, k, last.x)
            note += (f"; measured {last.weight_bytes / 1e6:,.0f} MB at batch {last.x} "
                     f"(predicted {predicted:,.0f} MB, {touched:.1f} experts per layer)")
        return [note]

    def _paint_roofs(self, xs, nbytes, dtype, matmul) -> list[str]:
        """Each compute roof as the tokens/s its peak alone allows at each x (the step's FLOPs at that
        peak), labelled at its left end with the rows that ran under it."""
        self.roofs = compute_roofs(self.profile, dtype, matmul)
        if self.kind == SweepKind.BATCH:
            flops = [step_cost(self.shape, nbytes, [1] * int(b), [self.context] * int(b)).flops for b in xs]
        else:
            flops = [step_cost(self.shape, nbytes, [int(n)], [int(n)]).flops for n in xs]
        split = runs_bf16(self.profile, dtype, matmul)
        self._roof_lines = []
        for i, (curve, label) in enumerate(zip(self.roof_curves, self.roof_labels)):
            if i >= len(self.roofs):
                curve.setData([], [])
                label.hide()
                continue
            roof = self.roofs[i]
            rates = xs * roof.flops / np.array(flops)
            curve.setData(np.log2(xs), rates)
            if split:
                rows = f"{matmul.min_rows}+ rows" if roof.key == "bf16" else f"below {matmul.min_rows} rows, attention"
                text = f"{roof.label}: {rows}"
            else:
                text = roof.label if roof.used else f"{roof.label}: unused ({FLOAT_NAMES[dtype_key(dtype)]} products)"
            label.setText(text)
            self._roof_lines.append((np.log2(xs), rates))   # placed with the crossover's (_place_labels)
        if not split:
            return []
        return [f"prediction: as this run computed, products of {matmul.min_rows}+ rows on the bf16 roof "
                f"({matmul.unit}), fewer rows and attention on the fp32 FMA roof"]

    def _paint_prediction(self) -> list[str]:
        """Draw the profile's curve, its compute roofs and the crossover; returns notes for what cannot be drawn."""
        self.crossover = None
        self.crossover_line.hide()
        self.crossover_label.hide()
        if self.shape is None or self.profile is None:
            self.predicted.setData([], [])
            for curve, label in zip(self.roof_curves, self.roof_labels):
                curve.setData([], [])
                label.hide()
            self.roofs = []
            self._roof_lines = []
            return ["the prediction appears once a model's shape is known (after a run starts)"]
        dtype, nbytes = prediction_dtype(self.profile, self.run_dtype)
        matmul = math_from_info(self._run_info())   # the arithmetic the run's products ran in
        lo, hi = BATCH_RANGE if self.kind == SweepKind.BATCH else PROMPT_RANGE
        notes = []
        if self.kind == SweepKind.BATCH:
            self.crossover = crossover_batch(self.shape, nbytes, self.context, self.profile, dtype, matmul)
            if self.crossover < CROSSOVER_CAP:
                hi = max(hi, 4 * self.crossover)
            else:
                notes.append(f"{self.profile.name}: decode stays memory-bound at context {self.context} "
                             "(no crossover batch)")
        # whole batch sizes / prompt lengths, four per octave
        xs = np.unique(np.round(2.0 ** np.arange(math.log2(lo), math.log2(hi) + 0.01, 0.25)))
        if self.kind == SweepKind.BATCH:
            times = [predict_decode(self.shape, nbytes, int(b), self.context, self.profile, dtype, matmul).time_s
                     for b in xs]
        else:
            times = [predict_prefill(self.shape, nbytes, int(n), self.profile, dtype, matmul).time_s for n in xs]
        self.predicted.setData(np.log2(xs), xs / np.array(times))
        notes += self._paint_roofs(xs, nbytes, dtype, matmul)
        notes += self._paint_predicted_bytes(xs, nbytes)
        label = dtype.name if hasattr(dtype, "name") else dtype
        self._predicted_name = f"{self.profile.key} {label} (predicted)"
        notes += self._paint_profile_simulation(xs, dtype)
        set_title(self.getPlotItem(), self._title())
        if self.crossover is not None and self.crossover < CROSSOVER_CAP:
            self.crossover_line.setValue(math.log2(self.crossover))
            self.crossover_line.show()
            self.crossover_label.setText(f"crossover ≈ batch {self.crossover}\n(context {self.context})")
        self._place_labels()
        return notes
