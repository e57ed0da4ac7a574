"""A rate sweep over a trace scales the trace's speed; a concurrency sweep of one is refused."""
from __future__ import annotations

from pathlib import Path

import pytest

from backend.errors import InputError
from backend.sweeps.load import _point_workload
from backend.workload.spec import workload_from_dict

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "azure-conv-50.csv"


def test_each_rate_sets_the_speed_that_gives_the_trace_that_mean_rate():
    spec = workload_from_dict({"trace": str(TRACE)}, "t")
    point = _point_workload(spec, "rate", 2 * spec.rate)
    assert point.trace == spec.trace and point.trace_speed == pytest.approx(2.0) and point.rate == 2 * spec.rate


def test_a_concurrency_sweep_of_a_trace_is_one_line(tmp_path):
    from backend.config import RunConfig, SweepSpec
    from backend.sweeps.load import run_load_sweep
    config = RunConfig(mode="sweep-concurrency", workload=workload_from_dict({"trace": str(TRACE)}, "t"),
                       sweep=SweepSpec(kind="concurrency"))
    with pytest.raises(InputError, match="replays its own arrivals"):
        run_load_sweep(config, lambda e: None, lambda: False, target=None)
