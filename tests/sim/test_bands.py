"""backend/sim/bands.py: the split-conformal edges, the first rule's widest edge over a figure's regimes, the
published figures' regimes, the shipped table's provenance and rule (fitted set only), and a simulated run's summary
carrying its bands."""
from __future__ import annotations

import math

import pytest

from backend.sim import bands
from backend.sim.band_rules import Quantile, own_edges
from backend.sim.bands import Regime, Residual
from backend.sim.published_figures import FIGURES, is_held_out
from backend.summary import Band, Summary


def table(by_regime: dict[Regime, list[float]]) -> bands.BandTable:
    rows = [Residual(f"X{regime.value}{i}", "ttft_ms", (regime,), 1.0, 1.0, r)
            for regime, values in by_regime.items() for i, r in enumerate(values)]
    return bands.BandTable(rows, [])


def conformal(values: list[float], level: float):
    return own_edges(values, level, Quantile.CONFORMAL, symmetric=False)


def test_the_conformal_edges_are_the_finite_sample_order_statistics():
    values = [float(i) for i in range(1, 20)]   # 19 residuals: (n + 1) x 0.1 = 2, (n + 1) x 0.9 = 18
    assert conformal(values, 0.8) == (2.0, 18.0)
    assert conformal(values[:8], 0.8) is None   # too few for an 80% band: no band, never a guess


def test_under_the_first_rule_a_figure_takes_the_widest_edge_of_its_regimes_and_the_pool_when_none_has_a_band():
    narrow, wide = [0.01 * i for i in range(-9, 10)], [0.05 * i for i in range(-9, 10)]
    t = table({Regime.PREFILL: narrow, Regime.TP: [x + 0.5 for x in wide], Regime.MOE: [0.0, 0.1]})
    edges = t.edges((Regime.PREFILL, Regime.TP, Regime.MOE), 0.8)
    assert edges.regimes == (Regime.PREFILL, Regime.TP)   # MoE has too few residuals: not used
    assert edges.low == pytest.approx(-0.08) and edges.high == pytest.approx(0.9)   # prefill's low, TP's high
    alone = t.edges((Regime.BATCH1_DECODE,), 0.8)
    assert alone.regimes == (Regime.ALL,)
    pooled = conformal(t.of(Regime.ALL), 0.8)
    assert (alone.low, alone.high) == pooled


def test_a_rate_band_is_the_inverse_of_its_time_band():
    edges = bands.Edges(-0.2, 0.4, (Regime.ALL,))
    time, rate = edges.of_time(10.0), edges.of_rate(100.0)
    assert time.low == pytest.approx(10 * math.exp(-0.2)) and time.high == pytest.approx(10 * math.exp(0.4))
    # a step slower than simulated (the time's high edge) is a lower throughput (the rate's low edge)
    assert rate.low == pytest.approx(100 * math.exp(-0.4)) and rate.high == pytest.approx(100 * math.exp(0.2))


def test_the_published_figures_regimes():
    by_id = {f.id: f for f in FIGURES}
    assert bands.published_regimes(by_id["F19"]) == (Regime.PREFILL, Regime.LOW_PRECISION)
    assert bands.published_regimes(by_id["F31"]) == (Regime.BATCHED_DECODE,)
    assert bands.published_regimes(by_id["F43"]) == (Regime.BATCH1_DECODE, Regime.TP, Regime.LOW_PRECISION)
    assert bands.published_regimes(by_id["F18"]) == (Regime.SATURATION, Regime.MOE, Regime.TP, Regime.LOW_PRECISION)
    assert bands.published_regimes(by_id["F38"])[0] is Regime.BATCH1_DECODE   # NIM's ITL at concurrency 1


def test_the_shipped_table_holds_the_fitted_figures_only_with_their_regimes():
    shipped = bands.shipped()
    by_id = {f.id: f for f in FIGURES}
    assert shipped.residuals and shipped.provenance and shipped.rule is not None   # --select wrote its rule
    assert not [r.figure for r in shipped.residuals if is_held_out(by_id[r.figure])]
    for r in shipped.residuals:
        fig = by_id[r.figure]
        assert r.regimes == bands.published_regimes(fig) and r.measured == pytest.approx(fig.value, rel=1e-5)
        assert r.residual == pytest.approx(bands.time_residual(fig.metric, r.measured, r.predicted), abs=1e-5)


def test_a_summary_writes_each_band_beside_its_figure_and_reads_it_back():
    s = Summary(ttft_p50_ms=10.0, tpot_p50_ms=2.0, band_level=0.8, band_regimes="prefill: all",
                bands={"ttft_p50_ms": Band(8.0, 14.0)})
    flat = s.to_json()
    keys = list(flat)
    assert keys[keys.index("ttft_p50_ms") + 1:keys.index("ttft_p50_ms") + 3] == ["ttft_p50_ms_low", "ttft_p50_ms_high"]
    back = Summary.from_json(flat)
    assert back.bands == {"ttft_p50_ms": Band(8.0, 14.0)} and back.band_level == 0.8 and not back.extra
    half = Summary.from_json({"tpot_p50_ms": 2.0, "tpot_p50_ms_low": 1.0})   # half a band: kept, not a band
    assert half.bands == {} and half.extra == {"tpot_p50_ms_low": 1.0}


def test_a_simulated_run_carries_a_band_around_each_figure():
    from backend.config import Deployment, ModelChoice, RunConfig
    from backend.session import execute
    from backend.workload.spec import LengthDist, WorkloadSpec
    spec = WorkloadSpec(name="t", num_requests=40, arrival="poisson", rate=8.0, prompt_len=LengthDist("fixed", 256),
                        output_len=LengthDist("fixed", 32), seed=0)
    config = RunConfig(mode="load", simulate=True, profile="h100-sxm", model=ModelChoice("llama-3.1-70b", dtype="fp8"),
                       workload=spec, deployment=Deployment(tp=4))
    s = execute(config, lambda e: None, lambda: False).summary
    assert s.band_level == bands.DEFAULT_LEVEL
    assert "tp>1" in s.band_regimes and "fp8/fp4" in s.band_regimes
    for name in ("ttft_p50_ms", "tpot_p50_ms", "itl_p99_ms", "output_tokens_per_s", "cost_per_m_output_usd"):
        band = s.bands[name]
        assert band.low < getattr(s, name) < band.high, name
    # the same regimes' edges: a time and a rate move in opposite senses by the same ratios
    t, r = s.bands["tpot_p50_ms"], s.bands["decode_tokens_per_s"]
    assert t.high / s.tpot_p50_ms == pytest.approx(s.decode_tokens_per_s / r.low)


def test_the_cli_band_lines():
    from backend.results.band_text import band_lines
    s = Summary(tpot_p50_ms=10.0, band_level=0.8, band_regimes="decode: all", bands={"tpot_p50_ms": Band(7.5, 15.25)})
    lines = band_lines(s)
    assert "80%" in lines[0] and "decode: all" in lines[0] and "TPOT p50 7.50–15.25 ms" in lines[1]
    assert band_lines(Summary(tpot_p50_ms=10.0)) == []   # a measured run: no band line


def test_the_slo_attainment_at_the_edges_counts_each_request_at_its_times_edges():
    from backend.config import ModelChoice, RunConfig
    from backend.session import execute
    from backend.workload.spec import LengthDist, WorkloadSpec
    spec = WorkloadSpec(name="t", num_requests=60, arrival="poisson", rate=10.0, prompt_len=LengthDist("fixed", 512),
                        output_len=LengthDist("fixed", 32), seed=0)
    config = RunConfig(mode="load", simulate=True, profile="h100-sxm", model=ModelChoice("llama-8b"), workload=spec,
                       slo_ttft_ms=40.0, slo_tpot_ms=12.0)
    finished = execute(config, lambda e: None, lambda: False)
    s, requests = finished.summary, finished.data.requests
    band = s.bands["slo_attainment"]
    assert band.low <= s.slo_attainment <= band.high and band.low < band.high   # objectives near the figures
    t_high = s.bands["ttft_p50_ms"].high / s.ttft_p50_ms
    d_high = s.bands["tpot_p50_ms"].high / s.tpot_p50_ms
    done = [r for r in requests if r.status.value == "finished"]
    recount = sum(r.ttft_ms * t_high <= 40.0 and (r.tpot_ms is None or r.tpot_ms * d_high <= 12.0) for r in done)
    assert band.low == pytest.approx(recount / len(done))
    assert s.bands["goodput_requests_per_s"].low == pytest.approx(recount / s.duration_s)


def test_a_simulated_disaggregated_run_takes_the_tp_regime_of_its_wider_pool():
    from backend.config import Deployment, EngineConfig, ModelChoice, RunConfig
    from backend.session import execute
    from backend.workload.spec import LengthDist, WorkloadSpec
    spec = WorkloadSpec(name="t", num_requests=30, arrival="poisson", rate=4.0, prompt_len=LengthDist("fixed", 1024),
                        output_len=LengthDist("fixed", 64), seed=0)
    config = RunConfig(mode="load", simulate=True, profile="h200-sxm", model=ModelChoice("llama-3.1-70b", dtype="fp8"),
                       workload=spec, engine=EngineConfig(policy="disaggregated", max_batch=32, prefill_workers=1,
                                                          decode_workers=1),
                       deployment=Deployment(tp=2, prefill_tp=2, decode_tp=2))
    s = execute(config, lambda e: None, lambda: False).summary
    assert s.band_level == bands.DEFAULT_LEVEL and "tp>1" in s.band_regimes
    assert s.bands["ttft_p50_ms"].low < s.ttft_p50_ms < s.bands["ttft_p50_ms"].high
