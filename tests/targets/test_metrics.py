"""Run summaries on hand-built records; percentiles against numpy."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from backend.results.summary import inter_token_latencies, percentiles, summarize
from backend.records import Phase, RequestRecord, RequestStatus, StepRecord, TokenRecord


def test_percentiles_match_numpy():
    rng = random.Random(3)
    values = [rng.expovariate(0.1) for _ in range(101)]
    got = percentiles(values)
    assert got["mean"] == pytest.approx(np.mean(values))
    for q in (50, 90, 99):
        assert got[f"p{q}"] == pytest.approx(np.percentile(values, q))
    assert all(math.isnan(v) for v in percentiles([]).values())


def step(i: int, phase: Phase, start: float, dur: float, prefill: int, decode: int) -> StepRecord:
    return StepRecord("run", i, phase, 1, int(prefill > 0), decode, prefill + decode, prefill, decode,
                      prefill + decode, prefill + decode, start, dur, 0, 100)


def records():
    steps = [step(0, Phase.PREFILL, 0.0, 40.0, 100, 0),     # 2.5 tokens/ms
             step(1, Phase.DECODE, 40.0, 10.0, 0, 2),      # 0.2 tokens/ms
             step(2, Phase.MIXED, 50.0, 20.0, 30, 1),
             step(3, Phase.DECODE, 70.0, 10.0, 0, 2)]
    requests = [
        RequestRecord(0, RequestStatus.FINISHED, 60, 3, 0.0, 0.0, 40.0, 80.0, 40.0, 20.0, 80.0, 0.0),
        RequestRecord(1, RequestStatus.FINISHED, 40, 2, 0.0, 0.0, 40.0, 70.0, 40.0, 30.0, 70.0, 0.0),
        RequestRecord(2, RequestStatus.REJECTED, 5000, 0, 10.0, finish_reason="too long"),
    ]
    tokens = [TokenRecord(0, 0, 40.0), TokenRecord(0, 1, 50.0), TokenRecord(0, 2, 80.0),
              TokenRecord(1, 1, 70.0), TokenRecord(1, 0, 40.0)]
    return steps, requests, tokens


def test_inter_token_latencies_follow_token_order_per_request():
    assert sorted(inter_token_latencies(records()[2])) == [10.0, 30.0, 30.0]


def test_summary_on_hand_built_records():
    s = summarize(*records())
    assert (s.num_requests, s.num_finished, s.num_rejected, s.num_steps) == (3, 2, 1, 4)
    assert s.duration_s == pytest.approx(0.08)
    assert s.requests_per_s == pytest.approx(25.0)
    assert s.output_tokens_per_s == pytest.approx(5 / 0.08)
    assert s.total_tokens_per_s == pytest.approx(105 / 0.08)     # the rejected prompt is not counted
    assert s.ttft_mean_ms == 40.0 and s.tpot_mean_ms == 25.0
    assert s.e2e_p50_ms == pytest.approx(75.0) and s.e2e_p99_ms == pytest.approx(79.9)
    assert s.itl_p50_ms == 30.0 and s.queue_mean_ms == 0.0
    assert (s.prefill_time_ms, s.decode_time_ms, s.mixed_time_ms) == (40.0, 20.0, 20.0)
    assert s.prefill_tokens_per_s == pytest.approx(2500.0)
    assert s.decode_tokens_per_s == pytest.approx(200.0)
    assert s.decode_prefill_cost_ratio == pytest.approx(12.5)
    assert s.decode_share == pytest.approx((40 + 30) / (80 + 70))
    assert s.goodput_requests_per_s is None   # no SLO given: not recorded
    # what the roofline needs, per phase, of the prefill-only and decode-only steps (the mixed one in neither)
    assert (s.prefill_steps, s.prefill_tokens, s.prefill_context_tokens, s.prefill_logit_rows) == \
        (1, 100, 100, 1)
    assert s.prefill_attention_pairs == 100 * 101 / 2          # the causal triangle of a fresh prompt
    assert (s.decode_steps, s.decode_tokens, s.decode_context_tokens, s.decode_logit_rows) == \
        (2, 4, 4, 4)
    assert s.decode_attention_pairs == 4                       # one per context token of a decode step


def test_goodput_counts_requests_meeting_both_slos():
    s = summarize(*records(), slo_ttft_ms=50.0, slo_tpot_ms=25.0)
    assert s.slo_attainment == 0.5 and s.goodput_requests_per_s == pytest.approx(1 / 0.08)
    assert summarize(*records(), slo_ttft_ms=10.0).goodput_requests_per_s == 0.0


def test_empty_run_gives_nan_not_zero_division():
    s = summarize([], [], [])
    assert s.num_requests == 0 and math.isnan(s.requests_per_s) and math.isnan(s.ttft_p50_ms)
