"""What a tour step found, as plain data: the figure to draw (curves, bars, what to highlight),
the sentence computed from the measured numbers and the table behind it (the step's CSV).

No Qt here: the measurements (gui/tour/measure.py) build these from the runs' records and are
tested without a window; gui/tour/figure.py draws them with pyqtgraph.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from backend.records import RunData

PREFILL = "#e6772e"   # the window's phase colours (gui/views/plot_style.PHASE_COLORS), without importing Qt
DECODE = "#2f6fd6"
MIXED = "#8e44ad"
GREY = "#7f7f7f"
RED = "#c0392b"
GREEN = "#27ae60"
PHASE = {"prefill": PREFILL, "decode": DECODE, "mixed": MIXED}


@dataclass(slots=True)
class Outcome:
    """One finished run of a step, as the window held it when it ended."""

    name: str                                      # "static", "prompt 128", ...
    data: RunData                                  # steps, requests, tokens, summary (gui.state.run_store.to_run_data)
    sweep_points: list = field(default_factory=list)       # SweepPoint (a batch sweep)
    precision_points: list = field(default_factory=list)   # PrecisionPoint (a precision sweep)
    # a disaggregated run: each worker's steps as (start_ms, end_ms, tokens, phase) ("prefill-0": [...])
    worker_steps: dict[str, list[tuple[float, float, int, str]]] = field(default_factory=dict)


@dataclass(slots=True)
class Curve:
    """A line through points (symbols at each); `dash` for a prediction."""

    name: str
    x: list[float]
    y: list[float]
    color: str
    dash: bool = False
    symbol: str | None = "o"
    line: bool = True


@dataclass(slots=True)
class Rects:
    """Filled rectangles in data units: bars of a chart or an engine's steps on a time axis."""

    name: str
    x0: list[float]
    x1: list[float]
    y0: list[float]
    y1: list[float]
    color: str


@dataclass(slots=True)
class Mark:
    """What to look at. kind: "region" (x0..x1 shaded, text at its top), "vline" (at x0), or
    "point" (an arrow to (x0, y) with its text)."""

    kind: str
    text: str
    x0: float
    x1: float = math.nan
    y: float = math.nan
    color: str = RED


@dataclass(slots=True)
class Figure:
    title: str
    x_label: str
    y_label: str
    curves: list[Curve] = field(default_factory=list)
    rects: list[Rects] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    log_x: bool = False          # log2 ticks (batch sizes, prompt lengths)
    log_y: bool = False
    x_ticks: list[tuple[float, str]] | None = None   # named ticks (precisions, policies, requests)
    y_ticks: list[tuple[float, str]] | None = None


@dataclass(slots=True)
class Finding:
    sentence: str                 # said from this run's numbers
    figure: Figure
    header: list[str]             # the table behind the sentence: the step's CSV
    rows: list[list]


def median(values) -> float:
    values = sorted(v for v in values if v is not None and not math.isnan(v))
    if not values:
        return math.nan
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def ms(value: float) -> str:
    """212 ms, 24.1 ms, 3.62 ms, 12.5 s: three significant figures or whole milliseconds."""
    if math.isnan(value):
        return "—"
    if value >= 10_000:
        return f"{value / 1000:.1f} s"
    return f"{value:,.0f} ms" if value >= 100 else f"{value:.1f} ms" if value >= 10 else f"{value:.2f} ms"


def times(a: float, b: float) -> str:
    """How many times b is a: "3.1x"."""
    return f"{b / a:.1f}x" if a and not math.isnan(a) and not math.isnan(b) else "—"


def faster(before: float, after: float) -> str:
    """"2.6x faster" when `after` is the shorter time, "1.2x slower" when it is not."""
    if not before or not after or math.isnan(before) or math.isnan(after):
        return "—"
    return f"{before / after:.1f}x faster" if after <= before else f"{after / before:.1f}x slower"
