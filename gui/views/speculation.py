"""The Speculation view: how many guesses each verification kept, the acceptance at each guess position, and
what a verification costs: the measured time of decode and verification steps against the tokens they computed,
beside the roofline's price of one request's step of that many tokens on the chosen profile (the why view's
inputs: the same model shape, precision and profile). At batch 1 the line stays flat while the step is
memory-bound, K+1 tokens for the price of one, and climbs past the crossover, where the tokens cost arithmetic.
"""
from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from backend.records import Phase
from backend.roofline.roofs import math_from_info

from gui.state.run_store import RunStore
from gui.state.spec_state import (MAX_TOKENS, Acceptance, PredictedSteps, StepTimes, predicted_at, predicted_steps,
                                  store_acceptance, store_step_times)
from gui.views.plot_style import (CROSSOVER_COLOR, PHASE_COLORS, PREDICTED_COLOR, VERIFY_COLOR, RateAxis,
                                  cosmetic_pen, set_title, style_plot, swatch_title)
from gui.views.throughput import Log2Axis, prediction_dtype

DECODE_COLOR = PHASE_COLORS[Phase.DECODE]
CONTEXT_STEP = 32   # tokens: the prediction is priced again when the steps' median context moves by this
NO_SPEC = ("This run did not speculate: choose a proposer (ngram, or a draft model) in the run form's "
           "Speculative decoding box, or open a run folder that did.")


def _fmt_ms(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.3g} ms" if value < 10 else f"{value:.1f} ms"


class SpeculationView(QtWidgets.QWidget):
    """Repainted by the window's timer through refresh() while on screen; `inputs` is the why view
    (gui/views/throughput.py), whose model shape, run precision and profile price the prediction."""

    def __init__(self, store: RunStore, inputs, parent=None):
        super().__init__(parent)
        self.setObjectName("speculationView")
        self.store, self.inputs = store, inputs
        self._seen = None
        self._predicted_key = None
        self.prediction: PredictedSteps | None = None
        self.accept: Acceptance | None = None
        self.times: StepTimes | None = None
        # three plot widgets (not one layout of plots), each keeping the window's least readable height
        self.histogram_plot, self.position_plot = pg.PlotWidget(), pg.PlotWidget()
        self.steps_plot = pg.PlotWidget(axisItems={"bottom": Log2Axis("bottom"), "left": RateAxis("left")})
        for plot, name in ((self.histogram_plot, "specHistogramPlot"), (self.position_plot, "specPositionPlot"),
                           (self.steps_plot, "specStepsPlot")):
            plot.setObjectName(name)
        top = QtWidgets.QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.histogram_plot, 1)
        top.addWidget(self.position_plot, 1)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(top, 2)
        layout.addWidget(self.steps_plot, 3)
        self.histogram = self.histogram_plot.getPlotItem()
        style_plot(self.histogram, "Guesses kept per verification", "guesses kept", "verifications")
        self.histogram_bars = pg.BarGraphItem(x=[], height=[], width=0.7, brush=VERIFY_COLOR,
                                              pen=cosmetic_pen(VERIFY_COLOR))
        self.histogram.addItem(self.histogram_bars)
        self.histogram.getAxis("bottom").setTickSpacing(1, 1)
        self.position = self.position_plot.getPlotItem()
        style_plot(self.position, "Acceptance by guess position", "guess position", "share kept")
        self.position_bars = pg.BarGraphItem(x=[], height=[], width=0.7, brush=VERIFY_COLOR,
                                             pen=cosmetic_pen(VERIFY_COLOR))
        self.position.addItem(self.position_bars)
        self.position.getAxis("bottom").setTickSpacing(1, 1)
        self.position.setYRange(0.0, 1.05, padding=0)
        self.position.getViewBox().setMouseEnabled(y=False)
        self.steps = self.steps_plot.getPlotItem()
        style_plot(self.steps, self._steps_title("profile"), "tokens computed in the step (log)",
                   "step time (ms, log)")
        self.steps.setLogMode(x=False, y=True)
        self.steps.getViewBox().setAutoVisible(y=True)   # the y range fits what is in view, not the line to 1,024
        self.predicted = self.steps.plot([], [], pen=pg.mkPen(PREDICTED_COLOR, width=1,
                                                              style=QtCore.Qt.PenStyle.DashLine))
        # the same prediction through the measured decode step: its shape where the measured points are
        self.scaled = self.steps.plot([], [], pen=pg.mkPen(PREDICTED_COLOR, width=1, style=QtCore.Qt.PenStyle.DotLine))
        self.decode_points = self.steps.plot([], [], pen=None, symbol="o", symbolSize=6, symbolBrush=DECODE_COLOR,
                                             symbolPen=None)
        self.verify_points = self.steps.plot([], [], pen=None, symbol="d", symbolSize=8, symbolBrush=VERIFY_COLOR,
                                             symbolPen=None)
        self.decode_line = pg.InfiniteLine(angle=0, movable=False,
                                           pen=pg.mkPen(DECODE_COLOR, width=1, style=QtCore.Qt.PenStyle.DotLine))
        self.steps.addItem(self.decode_line, ignoreBounds=True)
        self.crossover_line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen(CROSSOVER_COLOR, width=1))
        self.steps.addItem(self.crossover_line, ignoreBounds=True)
        self.crossover_label = pg.TextItem("", color=CROSSOVER_COLOR, anchor=(1, 1), fill=(255, 255, 255, 210))
        self.steps.addItem(self.crossover_label, ignoreBounds=True)
        self.empty = pg.TextItem("", color="#777", anchor=(0.5, 0.5))
        self.empty.setParentItem(self.histogram.getViewBox())
        self.note = QtWidgets.QLabel()
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: #555;")
        self.note.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)

    def _steps_title(self, predicted: str) -> str:
        return (swatch_title("Step time against the tokens it computed", [
            ("decode", DECODE_COLOR, "&#9679;"), ("verification (1 + guesses)", VERIFY_COLOR, "&#9670;")])
            + "<br>" + swatch_title("", [(predicted, PREDICTED_COLOR, "- -"),
                                         ("the same, through the measured decode step", PREDICTED_COLOR, "&middot;&middot;")]))

    # ---- painting ----------------------------------------------------------------------------

    def refresh(self) -> None:
        i = self.inputs
        key = (self.store.version, id(i.shape), i.run_dtype, i.profile)
        if key == self._seen:
            return
        self._seen = key
        self.accept = store_acceptance(self.store)
        self.times = store_step_times(self.store)
        self._paint_acceptance(self.accept)
        notes = self._paint_steps(self.times)
        self.note.setText("\n\n".join([self._acceptance_note(self.accept)] + notes))

    def _paint_acceptance(self, a: Acceptance) -> None:
        self.histogram_bars.setOpts(x=np.arange(len(a.histogram)), height=a.histogram)
        self.position_bars.setOpts(x=np.arange(1, len(a.by_position) + 1), height=np.nan_to_num(a.by_position))
        self.empty.setText("" if a.num_verifications else "no verification yet")
        self.empty.setPos(self.histogram.getViewBox().boundingRect().center())
        if a.num_verifications:
            set_title(self.histogram, f"Guesses kept: {a.num_verifications:,} verifications, "
                                      f"{a.mean_length:.2f} tokens each")
            set_title(self.position, "Acceptance by guess position")
            self.histogram.setXRange(-0.6, len(a.histogram) - 0.4, padding=0)
            self.position.setXRange(0.4, len(a.by_position) + 0.6, padding=0)
        else:
            set_title(self.histogram, "Guesses kept per verification")
            set_title(self.position, "Acceptance by guess position")

    def _acceptance_note(self, a: Acceptance) -> str:
        if not a.num_verifications:
            return NO_SPEC
        where = ("from the finished requests' records" if a.source == "requests" else
                 "live, from the steps that verified one request's guesses (the requests' records replace it as "
                 "they finish)")
        rates = ", ".join("—" if math.isnan(r) else f"{r:.0%}" for r in a.by_position)
        return (f"{a.num_verifications:,} verifications ({where}) emitted {a.mean_length:.2f} tokens each: the "
                "guesses kept and the model's own next token. The histogram counts them by guesses kept; beside "
                f"it, the share kept at each guess position among the verifications that proposed one ({rates}): "
                "a later guess counts only if every earlier one was kept.")

    def _paint_steps(self, t: StepTimes) -> list[str]:
        self.decode_points.setData(np.log2(np.maximum(t.decode_tokens, 1)), t.decode_ms)
        self.verify_points.setData(np.log2(np.maximum(t.verify_tokens, 1)), t.verify_ms)
        decode_ms = float(np.median(t.decode_ms)) if len(t.decode_ms) else math.nan
        verify_ms = float(np.median(t.verify_ms)) if len(t.verify_ms) else math.nan
        self.decode_line.setVisible(not math.isnan(decode_ms))
        if not math.isnan(decode_ms):
            self.decode_line.setValue(math.log10(decode_ms))
        notes = []
        if not math.isnan(decode_ms) and not math.isnan(verify_ms):
            tokens = float(np.median(t.verify_tokens))
            notes.append(f"measured: a verification step of {tokens:g} tokens took {_fmt_ms(verify_ms)} (median), "
                         f"{verify_ms / decode_ms:.2f}x a plain decode step ({_fmt_ms(decode_ms)}, the dotted "
                         "line)" + ("" if t.single else "; steps of several requests are plotted by all their "
                                    "tokens"))
        notes += self._paint_prediction(t, decode_ms, verify_ms)
        return notes

    def _paint_prediction(self, t: StepTimes, decode_ms: float, verify_ms: float) -> list[str]:
        i = self.inputs
        self.crossover_line.hide()
        self.crossover_label.hide()
        if i.shape is None or i.profile is None:
            self.predicted.setData([], [])
            set_title(self.steps, self._steps_title("profile (predicted)"))
            return ["the roofline's line appears once a model's shape is known (after a run starts)"]
        dtype, nbytes = prediction_dtype(i.profile, i.run_dtype)
        matmul = math_from_info(i._run_info())
        # in steps of CONTEXT_STEP: a live run's context grows every step, and the line (a few ms to price) barely
        # moves with it
        context = max(CONTEXT_STEP * round(t.context / CONTEXT_STEP), 1)
        key = (id(i.shape), nbytes, i.profile, dtype, matmul, context)
        if key != self._predicted_key:
            self._predicted_key = key
            self.prediction = predicted_steps(i.shape, nbytes, i.profile, dtype, matmul, context)
        p = self.prediction
        self.predicted.setData(np.log2(p.tokens), p.ms)
        one = predicted_at(p, 1)
        if math.isnan(decode_ms):
            self.scaled.setData([], [])
        else:
            self.scaled.setData(np.log2(p.tokens), p.ms * decode_ms / one)
        measured = np.concatenate([t.decode_tokens, t.verify_tokens, [16.0]])
        right = max(float(measured.max()) * 4, 2.0 * (p.crossover or 0))
        self.steps.setXRange(-0.3, math.log2(min(right, float(p.tokens[-1]))) + 0.3, padding=0)
        label = dtype.name if hasattr(dtype, "name") else dtype
        set_title(self.steps, self._steps_title(f"{i.profile.key} {label}, one request (predicted)"))
        notes = []
        if p.crossover is not None:
            self.crossover_line.setValue(math.log2(p.crossover))
            self.crossover_label.setText(f"compute-bound from {p.crossover} tokens")
            self.crossover_label.setPos(math.log2(p.crossover), math.log10(one))
            self.crossover_line.show()
            self.crossover_label.show()
        if len(t.verify_tokens):
            n = float(np.median(t.verify_tokens))
            notes.append(f"predicted on {i.profile.name} ({label}, context {context}): one request's step of "
                         f"{n:g} tokens {predicted_at(p, n) / one:.2f}x a one-token decode step "
                         + ("(memory-bound: the weights are read once for all of them)" if
                            p.crossover is None or n < p.crossover else "(past the crossover: the tokens cost "
                            "arithmetic)")
                         + (f"; from {p.crossover} tokens a step is compute-bound and its time grows with them"
                            if p.crossover is not None else f"; no step up to {MAX_TOKENS} tokens turns compute-bound"))
        elif p.crossover is not None:
            notes.append(f"predicted on {i.profile.name}: a step of one request stays about one decode step's price "
                         f"up to {p.crossover - 1} tokens, then grows with them")
        return notes
