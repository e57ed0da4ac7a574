"""Closed-loop users: their staggered start (ramp_ms), their think time, and lockstep at ramp 0."""
from __future__ import annotations

import heapq

import pytest

from backend.errors import InputError
from backend.workload.arrivals import DEFAULT_RAMP_MS_PER_TOKEN, WorkloadSource, closed_loop_ramp_ms
from backend.workload.spec import LengthDist, WorkloadSpec, apply_overrides, load_workload, validate_workload


def closed(**fields) -> WorkloadSpec:
    base = dict(name="t", num_requests=40, arrival="closed", concurrency=4, output_len=LengthDist("fixed", 50))
    return validate_workload(WorkloadSpec(**{**base, **fields}))


def serve(source: WorkloadSource, service_ms: float) -> list[tuple[float, float]]:
    """A fake server answering every request service_ms after it arrives: (arrival, finish) of each."""
    busy, log = [], []
    while not source.is_exhausted() or busy:
        nxt = source.next_arrival_ms()
        if nxt is not None and (not busy or nxt <= busy[0][0]):
            for r in source.due(nxt):
                heapq.heappush(busy, (nxt + service_ms, r.request_id))
                log.append((r.request_id, nxt))
            continue
        finish, _ = heapq.heappop(busy)
        source.on_finish(finish)
    return [t for _, t in sorted(log)]


def test_users_start_evenly_over_the_ramp():
    source = WorkloadSource(closed(ramp_ms=400.0), None, 100)
    assert [r.arrival_ms for r in source.due(float("inf"))] == [0.0, 100.0, 200.0, 300.0]
    default = closed()
    assert closed_loop_ramp_ms(default) == DEFAULT_RAMP_MS_PER_TOKEN * 50    # one guessed service time
    starts = [r.arrival_ms for r in WorkloadSource(default, None, 100).due(float("inf"))]
    assert starts == [i * DEFAULT_RAMP_MS_PER_TOKEN * 50 / 4 for i in range(4)]
    uniform = closed(output_len=LengthDist("uniform", low=10, high=30))
    assert closed_loop_ramp_ms(uniform) == DEFAULT_RAMP_MS_PER_TOKEN * 20


def test_ramp_zero_is_the_old_lockstep_and_the_stagger_persists():
    lockstep = serve(WorkloadSource(closed(ramp_ms=0.0), None, 100), service_ms=100.0)
    assert lockstep[:8] == [0.0] * 4 + [100.0] * 4
    staggered = serve(WorkloadSource(closed(ramp_ms=100.0), None, 100), service_ms=100.0)
    # each user keeps its offset: arrivals 25 ms apart all along
    assert staggered[:8] == [0.0, 25.0, 50.0, 75.0, 100.0, 125.0, 150.0, 175.0]


def test_a_user_thinks_before_its_next_request():
    arrivals = serve(WorkloadSource(closed(ramp_ms=0.0, think_ms=30.0, concurrency=1, num_requests=4), None, 100),
                     service_ms=100.0)
    assert arrivals == [0.0, 130.0, 260.0, 390.0]
    timed = closed(num_requests=None, duration_s=1.0, concurrency=1, ramp_ms=0.0, think_ms=400.0)
    assert serve(WorkloadSource(timed, None, 100), service_ms=100.0) == [0.0, 500.0]   # 1000 is past the end


def test_think_times_can_reorder_users_and_requests_stay_in_time_order():
    source = WorkloadSource(closed(ramp_ms=1000.0, think_ms=0.0, concurrency=2, num_requests=4), None, 100)
    first = source.due(0.0)
    assert [r.arrival_ms for r in first] == [0.0] and source.next_arrival_ms() == 500.0
    source.on_finish(10.0)                                   # user 0 is back before user 1 starts
    assert source.next_arrival_ms() == 10.0
    assert [r.arrival_ms for r in source.due(600.0)] == [10.0, 500.0]


def test_reproducible_prompts_whatever_the_ramp():
    a = WorkloadSource(closed(ramp_ms=0.0, prompt_len=LengthDist("uniform", low=4, high=40)), None, 100)
    b = WorkloadSource(closed(ramp_ms=300.0, prompt_len=LengthDist("uniform", low=4, high=40)), None, 100)
    assert [r.prompt_ids for r in a.due(1e9)] == [r.prompt_ids for r in b.due(1e9)]


def test_flags_and_keys_of_the_closed_loop():
    spec = apply_overrides(load_workload("closed-loop-8"), think_ms=250.0, ramp_ms=0.0)
    assert (spec.think_ms, spec.ramp_ms) == (250.0, 0.0) and validate_workload(spec) == spec
    with pytest.raises(InputError, match="--think-ms: must be a number, 0 or more"):
        apply_overrides(load_workload("closed-loop-8"), think_ms=-1.0)
    with pytest.raises(InputError, match="--ramp-ms: is for a closed loop's users"):
        apply_overrides(load_workload("poisson-chat"), ramp_ms=100.0)
    with pytest.raises(InputError, match="--think-ms: is for a closed loop's users"):
        apply_overrides(load_workload("poisson-chat"), think_ms=100.0)
    assert apply_overrides(load_workload("poisson-chat"), think_ms=0.0).think_ms == 0.0
