"""Plot data for a renderer outside the backend: the backend draws nothing itself (no Qt here, and
no plotting library is a dependency), it hands these plain records to a `RenderPlots` callable
(the window's libraries draw them offscreen: see backend.cli.main's `render_plots`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


@dataclass(slots=True)
class Series:
    """One curve: a run's label and its points, in drawing order."""

    label: str
    xs: list[float]
    ys: list[float]


@dataclass(slots=True)
class Plot:
    """One overlaid plot, one curve per run; written as `<name>.png`."""

    name: str          # file stem, e.g. "ttft_cdf"
    title: str
    x_label: str
    y_label: str
    series: list[Series] = field(default_factory=list)
    log_x: bool = False    # spans orders of magnitude (latency CDFs)
    steps: bool = False    # drawn as a step function (an empirical CDF)

    @property
    def file_name(self) -> str:
        return f"{self.name}.png"


# (the plots, the folder to write them in) -> the PNG files written
RenderPlots = Callable[[list[Plot], Path], list[Path]]


def cdf_series(label: str, values, max_points: int = 2000) -> Series:
    """The empirical CDF of values: sorted values against the share at or below each; at most
    max_points points (evenly spaced in rank), so a million inter-token gaps stay drawable."""
    data = sorted(float(v) for v in values)
    n = len(data)
    if n > max_points:
        ranks = [round(i * (n - 1) / (max_points - 1)) for i in range(max_points)]
    else:
        ranks = list(range(n))
    return Series(label, [data[r] for r in ranks], [(r + 1) / n for r in ranks])
