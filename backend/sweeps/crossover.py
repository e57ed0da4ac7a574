"""Where a measured batch sweep's throughput stops growing with the batch: a fit of the whole curve.

A decode step of B requests costs about t(B) = a + b·B: `a` what every step pays whatever the
batch (reading the weights, launching the step), `b` what each request adds (its arithmetic, its
attention, its sampling). Throughput is then B / t(B): in proportion to B while a dominates,
flat at 1/b once b·B does. Those two lines (B/a and 1/b, the fitted curve's own two roofs) cross
at B* = a/b, the measured counterpart of the roofline's crossover, and the batch at which growth
visibly slows: doubling the batch there gives 1.33x the tokens/s, not 2x.

The first point that grew by less than proportional, the rule this replaces, is one noisy step
away from a wrong answer: a batch-2 point measured slow (another program on the cores) reported
a crossover at 2 while the curve went on climbing to 6x at batch 16. A least-squares fit over
every point is not moved by one. The fit weighs each point by its relative error (1/t²), so the
largest batch's long steps do not outweigh the small batches' short ones.

A curve that *falls* past its peak (measured here: 611 tokens/s at batch 8, 397 at 16, where the
CPU's products of 16 rows and more went to another unit) is another effect than growth that
slows, one B / (a + b·B) cannot draw: fitted with the rest it bent the curve at batch 1 while the
points climbed to 8. The points after the peak that fell below FALL of it are left out of the fit
(rising_part); a plateau's noise (98 against a peak of 106) is not a fall. Pure arithmetic: no
numpy, no torch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

FALL = 0.8   # past the peak, a point below this share of it has fallen, not levelled off


@dataclass(frozen=True, slots=True)
class BatchFit:
    """t(B) = fixed_ms + per_request_ms · B, fitted to a sweep's decode steps."""

    fixed_ms: float          # a: what a step costs whatever its batch
    per_request_ms: float    # b: what each request of the batch adds
    rms_error: float         # the fit's root-mean-square relative error over the points (0.05: 5%)

    @property
    def knee(self) -> float:
        """B* = a / b, where the fitted curve's two asymptotes cross (inf: it never bends)."""
        if self.per_request_ms <= 0:
            return math.inf
        return self.fixed_ms / self.per_request_ms

    @property
    def ceiling_tokens_per_s(self) -> float:
        """What the fitted curve tends to at large batches (1/b)."""
        return math.inf if self.per_request_ms <= 0 else 1000.0 / self.per_request_ms

    def step_ms(self, batch: float) -> float:
        return self.fixed_ms + self.per_request_ms * batch

    def tokens_per_s(self, batch: float) -> float:
        return batch * 1000.0 / self.step_ms(batch)

    def crossover(self, largest: int) -> int | None:
        """The knee as a batch size, when the sweep reached it (it measured up to `largest`); None when
        the fitted curve is still climbing in proportion at the largest batch measured."""
        knee = self.knee
        if not math.isfinite(knee) or knee > largest:
            return None
        return max(1, round(knee))


def fit_batch_curve(batches: list[float], tokens_per_s: list[float]) -> BatchFit | None:
    """The least-squares fit of t(B) = a + b·B (relative errors) to the points; None with fewer than
    two distinct batch sizes or a point without a positive throughput. a and b are kept >= 0: a
    negative one is no step the machine could run, and means the other term alone fits best."""
    points = [(float(b), b * 1000.0 / r) for b, r in zip(batches, tokens_per_s)
              if b > 0 and r is not None and math.isfinite(r) and r > 0]
    if len(points) < 2 or len({b for b, _ in points}) < 2 or len(points) != len(batches):
        return None
    w = [1.0 / (t * t) for _, t in points]   # relative error: each point's residual over its own step time
    s0 = sum(w)
    s1 = sum(wi * b for wi, (b, _) in zip(w, points))
    s2 = sum(wi * b * b for wi, (b, _) in zip(w, points))
    t0 = sum(wi * t for wi, (_, t) in zip(w, points))
    t1 = sum(wi * b * t for wi, (b, t) in zip(w, points))
    det = s0 * s2 - s1 * s1
    a, b = (t0 * s2 - s1 * t1) / det, (s0 * t1 - s1 * t0) / det
    if b <= 0:     # the step time does not grow with the batch: throughput in proportion all along
        a, b = t0 / s0, 0.0
    elif a < 0:    # no fixed part: every request costs the same, batching gains nothing
        a, b = 0.0, t1 / s2
    errors = [((a + b * x) / t - 1.0) ** 2 for x, t in points]
    return BatchFit(a, b, math.sqrt(sum(errors) / len(errors)))


def rising_part(tokens_per_s: list[float]) -> int:
    """How many leading points the fit takes: all of them, but for those from the first point after
    the peak whose throughput fell below FALL of the peak's."""
    if not tokens_per_s:
        return 0
    peak = max(range(len(tokens_per_s)), key=tokens_per_s.__getitem__)
    for i in range(peak + 1, len(tokens_per_s)):
        if tokens_per_s[i] < FALL * tokens_per_s[peak]:
            return i
    return len(tokens_per_s)


def measured_crossover(batches: list[int], tokens_per_s: list[float]) -> int | None:
    """The batch where a sweep's tokens/s stops growing in proportion: the bend of the fit of its
    rising part, None when it still climbs at the largest batch fitted (or too few points)."""
    n = rising_part(tokens_per_s)
    fit = fit_batch_curve(batches[:n], tokens_per_s[:n])
    return fit.crossover(max(batches[:n])) if fit is not None else None
