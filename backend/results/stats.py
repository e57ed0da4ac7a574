"""How sure a figure is: Student's t intervals over repeats, and a seeded bootstrap over samples.

`t_quantile` is computed here (no scipy in the environment): the t distribution's CDF from the
regularized incomplete beta function (a Lentz continued fraction), inverted by bisection. It
agrees with the tables to their printed digits (t(0.975, 2) = 4.303, t(0.975, 9) = 2.262).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from backend.records import Interval

NAN = float("nan")
LEVEL = 0.95


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t value below which a share p of Student's t(df) lies (0 < p < 1, df > 0)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, high * 2.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * max(1.0, high):
            break
    return 0.5 * (low + high)


def interval_of(values: Sequence[float], level: float = LEVEL) -> Interval:
    """The mean and the t interval of finite values (NaN ones are left out; NaN figures for none)."""
    data = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(data)
    if n == 0:
        return Interval(NAN, NAN, NAN, NAN, NAN, 0, [])
    mean = sum(data) / n
    if n == 1:
        return Interval(mean, NAN, NAN, NAN, NAN, 1, data)
    sd = math.sqrt(sum((v - mean) ** 2 for v in data) / (n - 1))
    half = t_quantile(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    cv = sd / abs(mean) if mean != 0 else NAN
    return Interval(mean, mean - half, mean + half, half, cv, n, data)


# ---- bootstrap -------------------------------------------------------------------------------

Statistic = Callable[[np.ndarray], np.ndarray]   # (resamples, n[, 2]) -> (resamples,)


def _percentile(q: float) -> Statistic:
    return lambda x: np.percentile(x, q, axis=1)


STATISTICS: dict[str, Statistic] = {
    "mean": lambda x: x.mean(axis=1),
    "p50": _percentile(50), "p90": _percentile(90), "p99": _percentile(99),
    # pairs (part, whole) per sample: the share of the sums, e.g. decode time over latency
    "ratio": lambda x: x[..., 0].sum(axis=1) / x[..., 1].sum(axis=1),
}


def statistic_of(samples: np.ndarray, stat: str) -> float:
    """One statistic of one run's samples (the same function the bootstrap resamples)."""
    if len(samples) == 0:
        return NAN
    return float(STATISTICS[stat](samples[None, ...])[0])


def bootstrap_difference(a: np.ndarray, b: np.ndarray, stat: str, resamples: int = 1000, seed: int = 0,
                         level: float = LEVEL) -> tuple[float, float]:
    """The `level` percentile interval of stat(b*) - stat(a*) over seeded resamples of each run's
    samples (each resampled apart, with replacement). Memory stays bounded: resamples go in chunks."""
    if len(a) < 2 or len(b) < 2:
        return NAN, NAN
    rng = np.random.default_rng(seed)
    f = STATISTICS[stat]
    diffs = np.empty(resamples)
    chunk = max(1, 4_000_000 // max(len(a), len(b)))
    for start in range(0, resamples, chunk):
        r = min(chunk, resamples - start)
        ra = a[rng.integers(0, len(a), size=(r, len(a)))]
        rb = b[rng.integers(0, len(b), size=(r, len(b)))]
        diffs[start:start + r] = f(rb) - f(ra)
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(diffs, [tail, 100.0 - tail])
    return float(low), float(high)
