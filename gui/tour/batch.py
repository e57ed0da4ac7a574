"""The tour's batch step (4): decode tokens/s against the batch, beside this machine's calibrated
roofline, with where the measured growth slows taken from a fit of the whole curve
(backend/sweeps/crossover.py) and how far measurement and roof lie apart, said. Qt-free."""
from __future__ import annotations

import math
import os

from backend.config import SweepKind
from backend.roofline.profiles import LOCAL_KEY
from backend.summary import Crossovers
from backend.sweeps.crossover import BatchFit, fit_batch_curve, rising_part

from gui.tour.finding import DECODE, GREEN, GREY, RED, Curve, Figure, Finding, Mark, Outcome, ms, times

FIT_SAMPLES = 24   # the fitted curve is drawn through this many batch sizes, evenly on the log axis
# what a roofline leaves out of a decode step: why measured steps run below it
OVERHEADS = ("the roof counts only the weights' bytes and the matmuls' FLOPs, not the attention, the per-step Python "
             "and scheduling, the threads' synchronisation or the sampling")
# why a measured step can beat it: the roof's arithmetic peak is calibrate's probe of a matrix multiply
PROBE = "its arithmetic peak is calibrate's matmul probe, which this engine's kernels can beat on small products"


def _at(xs: list[float], ys: list[float], x: float) -> float:
    """ys at x, interpolated between the measured points on log axes (the figure's)."""
    if x <= xs[0]:
        return ys[0]
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if x <= x1:
            f = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
            return math.exp(math.log(y0) + f * (math.log(y1) - math.log(y0)))
    return ys[-1]


def _fit_curve(fit: BatchFit, lo: float, hi: float) -> Curve:
    xs = [lo * (hi / lo) ** (i / (FIT_SAMPLES - 1)) for i in range(FIT_SAMPLES)]
    return Curve(f"fit: {ms(fit.fixed_ms)} + {ms(fit.per_request_ms)} per request a step", xs,
                 [fit.tokens_per_s(x) for x in xs], GREY, dash=True, symbol=None)


def _gap(points, calibrated: bool, cores_note: str) -> str:
    """How far the measured points lie from the roof, at the largest batch and across the sweep, and why."""
    ratios = [(p.x, p.x * 1000.0 / p.predicted_local_ms / p.tokens_per_s) for p in points if p.predicted_local_ms]
    if not ratios:
        return ""
    roof = "the calibrated roof" if calibrated else "the generic roof"
    x, r = ratios[-1]
    at_last = (f"measured {r:.1f}x below {roof} at batch {x}" if r >= 1.05 else
               f"measured {1 / r:.1f}x above {roof} at batch {x}" if r <= 0.95 else
               f"measured within 5% of {roof} at batch {x}")
    lo, hi = min(r for _, r in ratios), max(r for _, r in ratios)
    spread = (f"{lo:.1f}x to {hi:.1f}x below across the sweep" if lo >= 1.05 else
              f"{1 / hi:.1f}x to {1 / lo:.1f}x above across the sweep" if hi <= 0.95 else
              f"from {_side(lo)} to {_side(hi)} across the sweep")
    if 0.95 < lo and hi < 1.05:
        return f" Measured against predicted: {at_last} (within 5% across the sweep)."
    below = OVERHEADS + cores_note
    why = f"{below}; and {PROBE}" if hi >= 1.05 and lo <= 0.95 else below if hi >= 1.05 else PROBE
    return f" Measured against predicted: {at_last} ({spread}); {why}."


def _side(r: float) -> str:
    """A measured/roof ratio in words: "1.4x below", "1.2x above", "within 5%"."""
    return "within 5%" if 0.95 < r < 1.05 else f"{r:.1f}x below" if r > 1 else f"{1 / r:.1f}x above"


def batch_sweep(outcomes: list[Outcome], cores: int | None = None) -> Finding:
    """(4) decode tokens/s against the batch, beside this machine's roofline and its crossover.
    `cores`: what calibrate measured the roof with (all of this machine's)."""
    out = outcomes[0]
    cores = cores or os.cpu_count() or 1
    threads = out.data.info.local.threads if out.data.info.local is not None else None
    # the roof is every core's FLOP/s and bandwidth; the window's run leaves it one
    cores_note = (f", and this step ran on {threads} of the {cores} cores the roof was measured on"
                  if threads and threads < cores else "")
    points = sorted((p for p in out.sweep_points if p.kind == SweepKind.BATCH), key=lambda p: p.x)
    xs, ys = [p.x for p in points], [p.tokens_per_s for p in points]
    sweep = out.data.info.sweep
    calibrated = sweep is not None and sweep.local_profile == LOCAL_KEY
    roof_name = "roofline (this machine, calibrated)" if calibrated else "roofline (generic CPU: not calibrated)"
    fig = Figure("Decode throughput against the batch", "batch (requests decoded in one step)", "tokens/s",
                 log_x=True, log_y=True, curves=[Curve("measured", xs, ys, DECODE)])
    predicted = [(p.x, p.x * 1000.0 / p.predicted_local_ms) for p in points if p.predicted_local_ms]
    if predicted:
        fig.curves.append(Curve(roof_name, [x for x, _ in predicted], [y for _, y in predicted], GREEN, dash=True,
                                symbol=None))
    if len(points) < 2:
        return Finding("Not enough batch sizes ran to compare.", fig, [], [])
    first, last = points[0], points[-1]
    n = rising_part(ys)   # a fall past the peak is left out: another effect than growth that slows
    top = points[n - 1]
    fit = fit_batch_curve(xs[:n], ys[:n])
    knee_at = fit.crossover(top.x) if fit is not None else None
    if fit is not None:
        fig.curves.append(_fit_curve(fit, first.x, top.x))
    predicted_at = (out.data.summary.crossover or Crossovers()).predicted_local
    fig.marks.append(Mark("point", f"batch {last.x}: {times(first.tokens_per_s, last.tokens_per_s)} the tokens/s",
                          last.x, y=last.tokens_per_s, color=DECODE))
    if predicted_at:
        fig.marks.append(Mark("vline", f"roofline crossover: batch {predicted_at}", predicted_at, color=GREEN))
    if knee_at is not None:
        at = max(fit.knee, first.x)   # a bend below the first batch (no fixed cost a step) is marked there
        fig.marks.append(Mark("point", f"growth slows: batch {knee_at} (the fit's bend)", at, y=_at(xs, ys, at),
                              color=RED))
    which = "This machine's calibrated roofline" if calibrated else \
        "The generic CPU profile's roofline (this machine was not calibrated: Run › Calibrate)"
    where = (f" {which} puts its crossover at batch {predicted_at}." if predicted_at else
             f" {which} puts no crossover within reach.")
    which_points = "every point" if n == len(points) else f"the points up to batch {top.x}"
    if fit is None:
        seen = ""
    elif knee_at is not None:
        seen = (f" A fit of {which_points} (a step costs {ms(fit.fixed_ms)} plus {ms(fit.per_request_ms)} a request) "
                f"bends at batch {knee_at}: there the growth slows, toward {fit.ceiling_tokens_per_s:,.0f} tokens/s.")
    else:
        seen = (f" A fit of {which_points} (a step costs {ms(fit.fixed_ms)} plus {ms(fit.per_request_ms)} a request) "
                f"has not bent by batch {top.x}: tokens/s was still climbing"
                + (f" (its bend lies near batch {fit.knee:,.0f})." if math.isfinite(fit.knee) else "."))
    if n < len(points):
        peak, fell = max(points[:n], key=lambda p: p.tokens_per_s), points[n]
        seen += (f" At batch {fell.x} tokens/s fell to {fell.tokens_per_s:,.0f}, below the {peak.tokens_per_s:,.0f} "
                 f"of batch {peak.x}: a step that got slower a request is another effect than growth that slows "
                 f"(a different kernel or unit, the cache overflowing), so the fit leaves it out.")
    sentence = (f"At batch {first.x} a decode step took {ms(first.step_ms)} ({first.tokens_per_s:,.0f} tokens/s); at "
                f"batch {last.x}, {ms(last.step_ms)} ({last.tokens_per_s:,.0f} tokens/s): "
                f"{times(first.tokens_per_s, last.tokens_per_s)} the throughput for {last.x // first.x}x the "
                f"requests." + seen + where + _gap(points, calibrated, cores_note))
    rows = [[p.x, round(p.step_ms, 3), round(p.tokens_per_s, 1),
             p.predicted_local_ms and round(p.predicted_local_ms, 3),
             fit and round(fit.tokens_per_s(p.x), 1), p.bound] for p in points]
    return Finding(sentence, fig, ["batch", "step_ms", "tokens_per_s", "predicted_local_ms", "fit_tokens_per_s",
                                   "bound"], rows)
