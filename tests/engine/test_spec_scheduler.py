"""Both schedulers with speculating decodes, a fake verifier in place of the model (no torch): the guesses
are counted in the step, trimmed to the budget and the cache, the blocks of rejected guesses go back,
and the stops apply inside the kept run."""
from __future__ import annotations

import pytest

from backend.engine.paged_scheduler import scheduler_for
from backend.engine.request import Request
from backend.engine.scheduler import SchedulerConfig
from backend.records import RequestStatus


def make(policy: str, layout: str, kv: int = 4096, chunk: int = 512, max_batch: int = 4):
    return scheduler_for(SchedulerConfig(policy=policy, max_batch=max_batch, kv_capacity=kv, max_len=256,
                                         chunk_tokens=chunk, kv_layout=layout, block_size=8))


def step(sched, keep: int, guesses: list[int], token: int = 99, stop_ids=frozenset()):
    """Guess `guesses` for every decoding request, schedule, keep `keep` of each, sample `token`."""
    for r in sched.running_requests:
        r.spec_ids = list(guesses) if r.status is RequestStatus.DECODING else []
    out = sched.schedule(0.0)
    sampled = {}
    for c in out.prefill:
        if c.samples:
            sampled[c.request.request_id] = token
    for r in out.decode:
        sampled[r.request_id] = token
        if r.spec_ids:
            out.accepted[r.request_id] = min(keep, len(r.spec_ids))
    finished = sched.update(out, sampled, 1.0)
    return out, finished


@pytest.mark.parametrize("layout", ["slots", "paged"])
@pytest.mark.parametrize("policy", ["static", "continuous", "chunked"])
def test_a_verification_counts_its_guesses_and_advances_by_the_kept_ones_plus_one(policy, layout):
    sched = make(policy, layout)
    r = Request(0, list(range(20)), 40, 0.0)
    sched.add(r)
    step(sched, 0, [])   # the prefill: 1 token out
    out, _ = step(sched, 2, [5, 6, 7, 8])
    assert out.num_draft_tokens == 4 and out.num_tokens == 5 and out.decode == [r]
    assert r.output_ids == [99, 5, 6, 99] and r.num_computed == 20 + 1 + 2
    assert r.spec_proposed == [4] and r.spec_accepted == [2] and out.emitted == {0: 3}
    if layout == "paged":   # blocks for the 23 computed tokens only: the rejected guesses' went back
        assert len(r.block_ids) == 3 and sched.pool.num_used_blocks == 3


@pytest.mark.parametrize("layout", ["slots", "paged"])
def test_stops_apply_inside_the_kept_run(layout):
    sched = make("continuous", layout)
    r = Request(0, list(range(10)), 4, 0.0, stop_ids=frozenset({6}))
    sched.add(r)
    step(sched, 0, [])
    # 3 tokens left: the speculator would cap at 2 guesses; the scheduler caps too
    out, finished = step(sched, 4, [5, 6, 7, 8])
    assert r.output_ids == [99, 5, 6] and r.finish_reason == "eos" and finished == [r]
    assert out.num_draft_tokens == 2
    r2 = Request(1, list(range(10)), 3, 0.0)
    sched.add(r2)
    step(sched, 0, [])
    step(sched, 4, [5, 6, 7, 8])
    assert r2.output_ids == [99, 5, 99] and r2.finish_reason == "length"   # never past max_new_tokens


@pytest.mark.parametrize("layout", ["slots", "paged"])
def test_guesses_take_only_the_budget_left_oldest_request_first(layout):
    sched = make("chunked", layout, chunk=8)
    a, b = Request(0, list(range(6)), 40, 0.0), Request(1, list(range(6)), 40, 0.0)
    sched.add(a)
    sched.add(b)
    step(sched, 0, [])   # both prompts in one chunk of 8? 6 + 2 of b
    while b.status is not RequestStatus.DECODING:
        step(sched, 0, [])
    out, _ = step(sched, 0, [1, 2, 3, 4, 5, 6])
    # 8 tokens: two decodes, 6 guesses, all to the older request
    assert out.num_tokens == 8 and out.num_draft_tokens == 6
    assert a.spec_proposed[-1] == 6 and (not b.spec_proposed)


def test_a_paged_cache_without_room_for_the_guesses_verifies_fewer_and_preempts_nobody():
    sched = make("continuous", "paged", kv=56, max_batch=2)   # 7 blocks of 8
    a, b = Request(0, list(range(20)), 7, 0.0), Request(1, list(range(20)), 7, 0.0)
    sched.add(a)
    sched.add(b)
    step(sched, 0, [])   # 3 blocks each, 20 tokens computed, 21 known: one block free
    assert sched.pool.num_free_blocks == 1
    out, _ = step(sched, 5, [5, 6, 7, 8, 9])
    # the older takes the free block for its 5 guesses; the newer has room for 3 in its third block
    assert out.num_draft_tokens == 8 and not out.preempted
    assert a.output_ids == [99, 5, 6, 7, 8, 9, 99] and b.output_ids == [99, 5, 6, 7, 99]
