"""A simulated run's bands in the window: the metrics panel lists each figure's low–high, and the latency CDF
is shaded between its band's edges; a measured run shows neither."""
from __future__ import annotations

import math
import os
from dataclasses import replace

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

from gui.state.references import ReferenceSet
from gui.state.run_store import RunStore
from gui.views.distributions import DistributionsView
from gui.views.metrics import MetricsPanel


@pytest.fixture(scope="module")
def simulated():
    from backend.config import ModelChoice, RunConfig
    from backend.session import execute
    from backend.workload.spec import LengthDist, WorkloadSpec
    spec = WorkloadSpec(name="t", num_requests=30, arrival="poisson", rate=6.0, prompt_len=LengthDist("fixed", 200),
                        output_len=LengthDist("fixed", 24), seed=0)
    config = RunConfig(mode="load", simulate=True, profile="h100-sxm", model=ModelChoice("llama-8b"), workload=spec)
    return execute(config, lambda e: None, lambda: False).data


def store_of(run) -> RunStore:
    store = RunStore()
    store.load(run)
    return store


def test_the_metrics_panel_lists_each_figures_band(qtbot, simulated):
    panel = MetricsPanel(store_of(simulated))
    qtbot.addWidget(panel)
    panel.refresh()
    text = panel.band_label.text()
    assert not panel.band_label.isHidden() and "80% band" in text
    band = simulated.summary.bands["ttft_mean_ms"]
    assert f"TTFT mean {band.low:,.1f}–{band.high:,.1f} ms" in text
    measured = MetricsPanel(store_of(replace(simulated, summary=replace(simulated.summary, bands={}, band_level=None))))
    qtbot.addWidget(measured)
    measured.refresh()
    assert measured.band_label.isHidden()


@pytest.mark.parametrize("metric", ["ttft", "tpot", "itl"])
def test_the_cdf_is_shaded_between_the_bands_edges(qtbot, simulated, metric):
    view = DistributionsView(store_of(simulated), ReferenceSet())
    qtbot.addWidget(view)
    view.set_metric(metric)
    view.refresh()
    x, _ = view.current.getData()
    low, high = (edge.getData()[0] for edge in view.band_edges)
    s = simulated.summary
    band, p50 = s.bands[f"{metric}_p50_ms"], getattr(s, f"{metric}_p50_ms")
    assert len(x) and np.allclose(low, x * band.low / p50) and np.allclose(high, x * band.high / p50)
    assert (low < x).all() and (high > x).all()


def test_a_measured_run_has_no_shading(qtbot, simulated):
    measured = replace(simulated, summary=replace(simulated.summary, bands={}, band_level=None))
    view = DistributionsView(store_of(measured), ReferenceSet())
    qtbot.addWidget(view)
    view.refresh()
    assert all(len(edge.getData()[0] if edge.getData()[0] is not None else []) == 0 for edge in view.band_edges)


def test_a_simulated_load_sweeps_points_carry_their_band_and_the_front_is_shaded(qtbot, simulated):
    from backend.config import SweepKind
    from backend.sweeps.load import mark_front, point_from_summary
    from gui.views.load_sweep import LoadSweepView
    s = simulated.summary
    points = [point_from_summary(SweepKind.RATE, x, s, num_devices=n) for x, n in ((2.0, 1), (4.0, 2))]
    p = points[0]
    assert p.per_device_low < p.tokens_per_s_per_device < p.per_device_high
    assert p.per_user_low < p.tokens_per_s_per_user < p.per_user_high
    assert p.per_user_low == pytest.approx(1000.0 / s.bands["tpot_p50_ms"].high)
    mark_front(points)
    store = RunStore()
    store.load_points = points
    view = LoadSweepView(store)
    qtbot.addWidget(view)
    view.refresh()
    assert view.banded == 2 and "shaded: the simulated front" in "\n".join(view.notes())
    low_x, low_y = view.band_edges[0].getData()
    assert list(low_x) == [q.per_user_low for q in points if q.pareto]
    measured = [point_from_summary(SweepKind.RATE, 2.0, replace(s, bands={}))]
    assert math.isnan(measured[0].per_device_low)
    store.load_points = measured
    store.generation += 1
    view.refresh()
    assert view.banded == 0 and "shaded" not in "\n".join(view.notes())


def test_a_simulated_batch_sweep_is_shaded_between_its_points_band_edges(qtbot, tmp_path):
    from backend.cli.main import main
    from backend.results.export import read_run
    from backend.sim import bands
    from backend.sweeps.points import read_points
    from gui.views.throughput import ThroughputView
    assert main(["sweep", "batch", "--simulate", "--profile", "h100-sxm", "--model", "llama-3.1-70b", "--dtype", "fp8",
                 "--tp", "2", "--batches", "1,8", "--out", str(tmp_path)]) == 0
    run = read_run(tmp_path)
    store = RunStore()
    store.load(run, sweep=read_points(tmp_path)[1])
    view = ThroughputView(store)
    qtbot.addWidget(view)
    view.refresh()
    assert "shaded: the simulated points' 80% band" in view.note.text()
    low = 10 ** np.asarray(view.band_edges[0].getData()[1])   # the plot's y is log10
    setup = (bands.Regime.TP, bands.Regime.LOW_PRECISION)
    points = store.sweep_points
    expected = [p.tokens_per_s * math.exp(-bands.step_edges(True, p.x, setup).high) for p in points]
    assert np.allclose(low, expected)
    assert bands.step_edges(True, 1, setup).regimes != bands.step_edges(False, 1, setup).regimes   # decode, prefill
