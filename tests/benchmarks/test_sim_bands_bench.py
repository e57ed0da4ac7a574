"""bench/sim_bands.py's measures, on a made-up table: the leave-one-out check (backend/sim/band_rules.py) counts
a residual inside the band the others make, and a published figure's band is its simulated value's, inverted for a
rate."""
from __future__ import annotations

import math

import pytest

from backend.sim import bands
from backend.sim.bands import Regime, Residual
from backend.sim.published_figures import FIGURES
from backend.sim.band_rules import FIRST, leave_one_out
from bench.sim_bands import band_of
from bench.sim_vs_published import Result


def test_leave_one_out_counts_what_falls_inside_the_others_band():
    values = [0.01 * i for i in range(-10, 11)] + [5.0]   # 21 ordinary residuals and one far out
    table = bands.BandTable([Residual(f"X{i}", "ttft_ms", (Regime.PREFILL,), 1.0, 1.0, r)
                             for i, r in enumerate(values)], [])
    score = leave_one_out(FIRST, table.residuals, 0.8)
    inside, n, width = score.inside, score.n, score.median_width
    assert n == 22 and inside < n   # the far one is outside the band the others make
    # of 21 others the band is the 2nd smallest to the 20th: the two lowest and the highest ordinary one fall out too
    assert n - inside == 4
    assert 0 < width < 1


def test_a_figures_band_is_around_its_simulated_value():
    table = bands.BandTable([Residual(f"X{i}", "ttft_ms", (Regime.SATURATION,), 1.0, 1.0, 0.01 * i)
                             for i in range(-10, 11)], [])
    fig = next(f for f in FIGURES if f.metric == "tok_s_per_gpu")
    band = band_of(Result(fig, 1000.0), table, 0.8)
    assert band.low == pytest.approx(1000.0 * math.exp(-0.09)) and band.high == pytest.approx(1000.0 * math.exp(0.09))
