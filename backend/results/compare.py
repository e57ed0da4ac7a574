"""Runs side by side: each metric's value per run, its change against the first run, and whether
that change is larger than the noise.

The test, per metric and run: where both runs have repeats (a repeats folder: its metrics carry
95% Student's t intervals over the repeats), the change counts when the two intervals do not
overlap; otherwise, where the metric has samples (requests, tokens or steps) in both runs, a
seeded bootstrap: `resamples` resamples of each run's samples, the difference of the metric
each time, significant when the 95% percentile interval of the differences excludes 0. A figure
with one value per run and no repeats (throughput, a sweep point) gets no test.
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field

import numpy as np

from backend.config import SweepKind
from backend.events import LoadPoint
from backend.results.figures import METRICS, Metric, RunFigures, point_metrics
from backend.results.plots import Plot, Series, cdf_series
from backend.results.stats import bootstrap_difference, interval_of
from backend.records import Interval

TESTS = {"ci": "95% t intervals over repeats do not overlap",
         "bootstrap": "bootstrap, 1000 seeded resamples of the difference: its 95% interval excludes 0",
         "none": "one value per run, no repeats: no test"}


@dataclass(slots=True)
class Side:
    """One column: a run folder, or a repeats folder counted as one run (its repeats pooled)."""

    label: str
    path: str
    kind: str
    values: dict[str, float] = field(default_factory=dict)
    intervals: dict[str, Interval] = field(default_factory=dict)   # n >= 2 repeats
    samples: dict[str, np.ndarray] = field(default_factory=dict)   # pooled over repeats
    missing: dict[str, str] = field(default_factory=dict)
    points: list = field(default_factory=list)                     # the last repeat's sweep points
    num_repeats: int = 1


def side_of(label: str, path: str, repeats: list[RunFigures]) -> Side:
    """The column of one run (one RunFigures) or of a repeats folder (one per repeat)."""
    last = repeats[-1]
    side = Side(label, path, last.kind, missing=dict(last.missing), points=list(last.points),
                num_repeats=len(repeats))
    keys = list(dict.fromkeys(k for f in repeats for k in f.values))
    for key in keys:
        values = [f.values.get(key, math.nan) for f in repeats]
        if len(repeats) > 1:
            iv = interval_of(values)
            side.values[key] = iv.mean
            if iv.n >= 2:
                side.intervals[key] = iv
        else:
            side.values[key] = values[0]
    for name in dict.fromkeys(k for f in repeats for k in f.samples):
        side.samples[name] = np.concatenate([f.samples[name] for f in repeats if name in f.samples])
    return side


@dataclass(slots=True)
class Cell:
    value: float | None = None        # shown x metric.scale; None: n/a
    low: float | None = None          # the interval over repeats
    high: float | None = None
    missing: str = ""                 # why n/a
    change_pct: float | None = None   # against the first run
    significant: bool | None = None
    test: str = ""                    # "ci" | "bootstrap" | "none" ("" for the first run)


@dataclass(slots=True)
class Row:
    metric: Metric
    cells: list[Cell]


def metrics_for(sides: list[Side]) -> list[Metric]:
    """The fixed metrics any run has, then every sweep point's, in order of kind and size."""
    fixed = [m for m in METRICS if any(_finite(s.values.get(m.key)) for s in sides)]
    found: dict[str, tuple[tuple, Metric]] = {}
    for s in sides:
        for order, m in point_metrics(s.points):
            found.setdefault(m.key, (order, m))
    return fixed + [m for _, m in sorted(found.values(), key=lambda t: t[0])]


def compare(sides: list[Side], resamples: int = 1000, seed: int = 0) -> list[Row]:
    rows = []
    for m in metrics_for(sides):
        cells = [_cell(s, m) for s in sides]
        base, base_cell = sides[0], cells[0]
        for side, cell in zip(sides[1:], cells[1:]):
            if cell.value is None or base_cell.value is None:
                continue
            if base_cell.value != 0:
                cell.change_pct = (cell.value - base_cell.value) / abs(base_cell.value) * 100.0
            cell.significant, cell.test = _test(base, side, m, resamples, seed)
        rows.append(Row(m, cells))
    return rows


def _cell(side: Side, m: Metric) -> Cell:
    value = side.values.get(m.key)
    if not _finite(value):
        why = side.missing.get(m.key) or ("not a sweep" if m.key not in {x.key for x in METRICS}
                                          and not side.kind.startswith("sweep") else "not measured")
        return Cell(missing=why)
    iv = side.intervals.get(m.key)
    return Cell(value * m.scale, iv.low * m.scale if iv else None, iv.high * m.scale if iv else None)


def _test(a: Side, b: Side, m: Metric, resamples: int, seed: int) -> tuple[bool | None, str]:
    ia, ib = a.intervals.get(m.key), b.intervals.get(m.key)
    if ia is not None and ib is not None:
        return not ia.overlaps(ib), "ci"
    sa, sb = a.samples.get(m.samples), b.samples.get(m.samples)
    if m.samples and sa is not None and sb is not None and len(sa) >= 2 and len(sb) >= 2:
        low, high = bootstrap_difference(sa, sb, m.stat, resamples, seed)
        return bool(low > 0 or high < 0), "bootstrap"
    return None, "none"


def _finite(value) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


CSV_COLUMNS = ["metric", "label", "run", "value", "ci_low", "ci_high", "change_pct", "significant", "test", "note"]


def compare_csv(rows: list[Row], sides: list[Side]) -> str:
    """compare.csv: one line per metric and run; empty cells where there is nothing (never a zero)."""
    def text(v):
        return "" if v is None else v
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for row in rows:
        for side, c in zip(sides, row.cells):
            sig = "" if c.significant is None else ("yes" if c.significant else "no")
            w.writerow([row.metric.key, row.metric.label, side.label, text(c.value), text(c.low), text(c.high),
                        text(c.change_pct), sig, c.test, f"n/a ({c.missing})" if c.missing else ""])
    return buf.getvalue()


def plots_of(sides: list[Side], short: list[str]) -> list[Plot]:
    """The latency CDFs (one curve per run that has the samples) and the sweeps' curves."""
    plots = []
    for name, label in [("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E")]:
        series = [cdf_series(tag, s.samples[name]) for tag, s in zip(short, sides) if len(s.samples.get(name, ())) > 0]
        if series:
            plots.append(Plot(f"{name}_cdf", f"{label} distribution", f"{label} (ms)", "share of requests"
                              if name != "itl" else "share of gaps", series, log_x=True, steps=True))
    for kind, x_label in [(SweepKind.BATCH, "batch size"), (SweepKind.PROMPT, "prompt length (tokens)")]:
        series = [Series(tag, [float(p.x) for p in pts], [p.tokens_per_s for p in pts])
                  for tag, s in zip(short, sides)
                  if (pts := [p for p in s.points if getattr(p, "kind", None) == kind])]
        if series:
            plots.append(Plot(f"sweep_{kind}_tokens_per_s", f"tokens/s by {x_label}", x_label, "tokens/s", series,
                              log_x=True))
    for kind, x_label in [(SweepKind.RATE, "arrival rate (requests/s)"), (SweepKind.CONCURRENCY, "users")]:
        series = [Series(tag, [p.x for p in pts], [p.tokens_per_s_per_device for p in pts])
                  for tag, s in zip(short, sides)
                  if (pts := [p for p in s.points if isinstance(p, LoadPoint) and p.kind == kind])]
        if series:
            plots.append(Plot(f"sweep_{kind}_tokens_per_s", f"output tokens/s per device by {x_label}", x_label,
                              "tokens/s per device", series))
    series = [Series(tag, [p.weight_bits for p in pts], [p.decode_tokens_per_s for p in pts])
              for tag, s in zip(short, sides) if (pts := [p for p in s.points if hasattr(p, "weight_bits")])]
    if series:
        plots.append(Plot("sweep_precision_decode", "decode tokens/s by bits per weight", "bits per weight",
                          "decode tokens/s", series))
    return plots
