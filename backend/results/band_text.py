"""A simulated run's bands in words: the CLI summary's `band` lines, shared with the window's tables.

The band is how far the simulator's figure can be from a real deployment's, by the simulator's own
cross-validated errors on published figures (backend/sim/bands.py); a measured run has none.
"""
from __future__ import annotations

import math

from backend.summary import Summary

# the figures the summary names, in the order it prints them: (field, label, unit, digits)
HEADLINE = (("ttft_p50_ms", "TTFT p50", "ms", 1), ("ttft_p99_ms", "TTFT p99", "ms", 1),
            ("tpot_p50_ms", "TPOT p50", "ms", 2), ("tpot_p99_ms", "TPOT p99", "ms", 2),
            ("itl_p50_ms", "ITL p50", "ms", 2), ("e2e_p50_ms", "end-to-end p50", "ms", 0),
            ("output_tokens_per_s", "output", "tok/s", 0),
            ("cost_per_m_output_usd", "cost $", "per million output tokens", 2))


def span(low: float, high: float, digits: int) -> str:
    """'7.52–15.06': a band's two edges at the figure's precision."""
    return f"{low:,.{digits}f}–{high:,.{digits}f}"


def band_of(s: Summary, name: str, digits: int = 1) -> str:
    """The figure's band as text, '' where it has none (a measured run, a figure the run did not make)."""
    band = s.bands.get(name)
    if band is None or not (math.isfinite(band.low) and math.isfinite(band.high)):
        return ""
    return span(band.low, band.high, digits)


def band_lines(s: Summary) -> list[str]:
    """The CLI's band lines: the level and where its errors come from, then the headline figures' edges."""
    if not s.bands or s.band_level is None:
        return []
    parts = [f"{label}{'' if label.endswith('$') else ' '}{band_of(s, name, digits)} {unit}" for name, label, unit, digits in HEADLINE
             if band_of(s, name, digits)]
    return [f"band     {s.band_level:.0%} interval of each simulated figure, from the simulator's cross-validated "
            f"errors on published figures ({s.band_regimes}); every figure's edges are in summary.csv",
            "         " + ", ".join(parts)]


def ratios(s: Summary, name: str) -> tuple[float, float] | None:
    """The figure's band as ratios to the figure (low / value, high / value): what scales a whole distribution
    of it (the window's CDF); None where it has no band."""
    band, value = s.bands.get(name), getattr(s, name, None)
    if band is None or value is None or not value or not math.isfinite(value):
        return None
    return band.low / value, band.high / value


# the window's metrics panel: the figures its rows show, with their band
PANEL = (("ttft_mean_ms", "TTFT mean", " ms", 1), ("ttft_p99_ms", "TTFT p99", " ms", 1),
         ("tpot_mean_ms", "TPOT mean", " ms", 2), ("tpot_p99_ms", "TPOT p99", " ms", 2),
         ("output_tokens_per_s", "output tokens/s", "", 0), ("cost_per_m_output_usd", "$/1M output tokens", "", 2),
         ("slo_attainment", "SLO attainment", "", 2))


def panel_parts(s: Summary) -> list[str]:
    """'TTFT mean 10.1–24.7 ms', ... for the panel's figures that have a band."""
    return [f"{label} {band_of(s, name, digits)}{unit}" for name, label, unit, digits in PANEL if band_of(s, name, digits)]
