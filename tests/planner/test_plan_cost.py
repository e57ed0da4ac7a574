"""Dollars per million tokens: the devices' price per hour over the tokens served per hour."""
import math

import pytest

from backend.planner.candidates import Candidate
from backend.planner.evaluate import cost_per_million, costs
from backend.summary import Summary


def test_cost_per_million_arithmetic():
    # $3/h for 1,000 tokens/s: 3.6 M tokens an hour, so $0.8333 per million
    assert cost_per_million(3.0, 1000.0) == pytest.approx(3.0 / 3.6)
    assert math.isnan(cost_per_million(3.0, 0.0))


def test_colocated_split_by_busy_time_and_devices():
    c = Candidate("h100-sxm", "fp8", "chunked", 64, tp=2, dp=2)   # 4 devices
    summary = Summary(duration_s=100.0, num_input_tokens=720_000, num_output_tokens=180_000,
                      prefill_time_ms=20_000.0, decode_time_ms=50_000.0, mixed_time_ms=30_000.0,
                      mixed_prefill_tokens=1_000, mixed_decode_tokens=1_000)
    out = costs(summary, c, 3.0)
    assert out["usd_per_hour"] == 12.0
    # 9,000 tokens/s = 32.4 M tokens/h at $12/h
    assert out["usd_per_m_tokens"] == pytest.approx(12.0 / 32.4)
    share = (20_000 + 15_000) / 100_000   # the mixed steps split by their tokens: half and half
    assert out["usd_per_m_input"] == pytest.approx(12.0 * share / (7_200 * 3600) * 1e6)
    assert out["usd_per_m_output"] == pytest.approx(12.0 * (1 - share) / (1_800 * 3600) * 1e6)


def test_disaggregated_split_by_pool():
    c = Candidate("b200", "fp8", "disaggregated", 64, tp=2, prefill_workers=1, decode_workers=3)   # 8 devices
    summary = Summary(duration_s=10.0, num_input_tokens=36_000, num_output_tokens=3_600)
    out = costs(summary, c, 6.0)
    assert out["usd_per_hour"] == 48.0
    assert out["usd_per_m_input"] == pytest.approx(12.0 / (3_600 * 3600) * 1e6)    # one pool of 2 of 8
    assert out["usd_per_m_output"] == pytest.approx(36.0 / (360 * 3600) * 1e6)
