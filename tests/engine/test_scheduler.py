"""The scheduler driven by a fake clock and a fake step cost; no model, no torch."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.errors import InputError
from backend.records import Phase, RequestStatus
from backend.engine.request import Request
from backend.engine.scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from backend.workload.arrivals import WorkloadSource
from backend.workload.spec import apply_overrides, load_workload

EOS = 2


def config(policy: str = "continuous", max_batch: int = 4, kv: int = 10_000, max_len: int = 4096,
           chunk: int = 512) -> SchedulerConfig:
    return SchedulerConfig(policy=policy, max_batch=max_batch, kv_capacity=kv, max_len=max_len, chunk_tokens=chunk)


def req(rid: int, prompt: int, new: int, arrival: float = 0.0, **kw) -> Request:
    return Request(rid, [10 + rid] * prompt, new, arrival, **kw)


def fake_cost(out: SchedulerOutput) -> float:
    return 2.0 + 0.05 * out.num_tokens


def run_step(sched: Scheduler, now: float, token: int = 7) -> tuple[SchedulerOutput, float, list[Request]]:
    """One step: schedule, check the invariants every step must hold, pay its cost, update."""
    out = sched.schedule(now)
    cfg = sched.config
    if out.is_empty:
        assert not (sched.num_waiting or sched.num_running), "work waiting but nothing scheduled"
        return out, now, []
    assert sched.kv_tokens_used + out.num_tokens <= cfg.kv_capacity
    if cfg.policy == "chunked":
        assert out.num_tokens <= cfg.chunk_tokens
    slots = [r.slot for r in [c.request for c in out.prefill] + out.decode]
    assert len(set(slots)) == len(slots) and all(0 <= s < cfg.max_batch for s in slots)
    now += fake_cost(out)
    sampled = {c.request.request_id: token for c in out.chunks if c.samples}
    finished = sched.update(out, sampled, now)
    return out, now, finished


@dataclass
class Sim:
    requests: list[Request] = field(default_factory=list)
    outputs: list[SchedulerOutput] = field(default_factory=list)
    end_ms: float = 0.0


def simulate(source: WorkloadSource, cfg: SchedulerConfig, max_steps: int = 200_000) -> Sim:
    """A WorkloadSource through a Scheduler on a fake clock; every step costs fake_cost(out) ms."""
    sched, sim, now = Scheduler(cfg), Sim(), 0.0
    for _ in range(max_steps):
        for spec in source.due(now):
            sim.requests.append(Request.from_spec(spec))
            sched.add(sim.requests[-1])
        if not sched.has_work:
            if source.is_exhausted():
                sim.end_ms = now
                return sim
            now = max(now, source.next_arrival_ms())
            continue
        out, now, finished = run_step(sched, now)
        if not out.is_empty:
            sim.outputs.append(out)
        for _ in out.rejected + finished:
            source.on_finish(now)
    raise AssertionError("simulation did not end")


def drain(sched: Scheduler, now: float = 0.0, max_steps: int = 10_000) -> list[SchedulerOutput]:
    outs = []
    for _ in range(max_steps):
        if not sched.has_work:
            return outs
        out, now, _ = run_step(sched, now)
        outs.append(out)
    raise AssertionError("scheduler did not drain")


def test_config_errors_are_input_errors():
    with pytest.raises(InputError, match="chunk_tokens"):
        Scheduler(config("chunked", chunk=0))
    with pytest.raises(InputError, match="policy"):
        Scheduler(config("fifo"))
    with pytest.raises(InputError, match="max_batch"):
        Scheduler(config(max_batch=0))


def test_rejections_carry_reasons_and_come_back_in_the_next_schedule():
    too_long, too_big, empty, fine = req(0, 590, 20), req(1, 400, 20), req(2, 0, 5), req(3, 10, 2)
    sched = Scheduler(config(kv=400, max_len=600))
    for r in (too_long, too_big, empty, fine):
        sched.add(r)
    out = sched.schedule(0.0)
    assert out.rejected == [too_long, too_big, empty]
    assert all(r.status is RequestStatus.REJECTED for r in out.rejected)
    assert too_long.finish_reason == "prompt of 590 tokens + 20 output tokens exceeds the 600-token slot"
    assert too_big.finish_reason == "needs 420 KV tokens, the cache holds 400"
    assert empty.finish_reason == "empty prompt"
    assert [c.request for c in out.prefill] == [fine]
    assert sched.schedule(1.0).rejected == []


def test_continuous_admits_fcfs_into_the_lowest_slots_and_prefills_alone():
    sched = Scheduler(config("continuous", max_batch=2))
    a, b, c = req(0, 8, 3), req(1, 5, 3), req(2, 6, 3)
    for r in (a, b, c):
        sched.add(r)
    out, now, _ = run_step(sched, 0.0)
    assert out.phase is Phase.PREFILL and [ch.request for ch in out.prefill] == [a, b]
    assert (a.slot, b.slot) == (0, 1) and sched.num_waiting == 1
    assert [ch.num_tokens for ch in out.prefill] == [8, 5] and a.scheduled_ms == 0.0
    assert a.status is RequestStatus.DECODING and len(a.output_ids) == 1 and a.first_token_ms == now
    out, now, _ = run_step(sched, now)
    assert out.phase is Phase.DECODE and out.decode == [a, b]
    out, now, finished = run_step(sched, now)
    assert finished == [a, b] and all(r.finish_reason == "length" for r in finished)
    # The freed slots go to the waiting request, whose prefill runs alone.
    out, now, _ = run_step(sched, now)
    assert out.phase is Phase.PREFILL and [ch.request for ch in out.prefill] == [c] and c.slot == 0


def test_continuous_new_arrival_takes_a_prefill_step_while_decodes_wait():
    sched = Scheduler(config("continuous"))
    a = req(0, 4, 10)
    sched.add(a)
    _, now, _ = run_step(sched, 0.0)
    _, now, _ = run_step(sched, now)
    sched.add(req(1, 300, 5, arrival=now))
    out, now, _ = run_step(sched, now)
    assert out.phase is Phase.PREFILL and out.decode == []
    out, now, _ = run_step(sched, now)
    assert out.phase is Phase.DECODE and len(out.decode) == 2


def test_static_never_admits_while_its_batch_runs():
    sched = Scheduler(config("static", max_batch=3))
    batch = [req(0, 5, 2), req(1, 5, 6), req(2, 5, 4)]
    for r in batch:
        sched.add(r)
    sched.add(req(3, 5, 2))
    out, now, _ = run_step(sched, 0.0)
    assert out.phase is Phase.PREFILL and len(out.prefill) == 3
    late = req(4, 5, 2, arrival=now)
    sched.add(late)
    while any(not r.is_finished for r in batch):
        out, now, finished = run_step(sched, now)
        assert out.phase is Phase.DECODE and out.prefill == []
        assert sched.num_waiting == 2
    # Only now does the next batch start, from the lowest slots.
    out, now, _ = run_step(sched, now)
    assert [c.request.request_id for c in out.prefill] == [3, 4] and late.slot == 1


def test_static_reserves_prompt_plus_output_per_request():
    sched = Scheduler(config("static", max_batch=8, kv=100))
    for i in range(4):
        sched.add(req(i, 20, 20))     # 40 reserved each: two fit in 100
    out = sched.schedule(0.0)
    assert len(out.prefill) == 2 and sched.num_waiting == 2


def test_chunked_splits_prompts_and_mixes_with_decodes():
    sched = Scheduler(config("chunked", chunk=64))
    a = req(0, 10, 50)
    sched.add(a)
    _, now, _ = run_step(sched, 0.0)
    big = req(1, 200, 3, arrival=now)
    sched.add(big)
    chunks = []
    while big.status is not RequestStatus.DECODING:
        out, now, _ = run_step(sched, now)
        assert out.phase is Phase.MIXED and out.decode == [a] and out.num_tokens <= 64
        chunks.append((out.prefill[0].start, out.prefill[0].num_tokens))
    assert chunks == [(0, 63), (63, 63), (126, 63), (189, 11)]
    assert len(big.output_ids) == 1 and big.first_token_ms == now


def test_chunked_budget_smaller_than_the_batch_delays_decodes_but_finishes():
    sched = Scheduler(config("chunked", max_batch=6, chunk=2))
    rs = [req(i, 3, 4) for i in range(6)]
    for r in rs:
        sched.add(r)
    outs = drain(sched)
    assert all(o.num_tokens <= 2 for o in outs)
    assert all(r.status is RequestStatus.FINISHED and len(r.output_ids) == 4 for r in rs)


def test_preemption_recomputes_the_newest_and_it_still_finishes():
    sched = Scheduler(config("continuous", max_batch=4, kv=60))
    rs = [req(i, 10, 20) for i in range(3)]
    for r in rs:
        sched.add(r)
    outs = drain(sched)
    preempted = [r for o in outs for r in o.preempted]
    assert preempted and preempted[0] is rs[-1]
    assert rs[-1].num_preemptions >= 1
    assert all(r.status is RequestStatus.FINISHED and len(r.output_ids) == 20 for r in rs)
    # The recompute prefill covers the prompt and the outputs sampled before the preemption.
    recompute = next(c for o in outs for c in o.prefill if c.request is rs[-1] and c.start == 0
                     and c.num_tokens > 10)
    assert recompute.token_ids[:10] == rs[-1].prompt_ids


def test_stop_token_finishes_unless_ignore_eos():
    sched = Scheduler(config())
    stops = req(0, 4, 10, stop_ids=frozenset({EOS}))
    keeps = req(1, 4, 3, stop_ids=frozenset({EOS}), ignore_eos=True)
    sched.add(stops)
    sched.add(keeps)
    now = 0.0
    for _ in range(3):
        out, now, _ = run_step(sched, now, token=EOS)
    assert stops.finish_reason == "eos" and len(stops.output_ids) == 1
    assert keeps.finish_reason == "length" and keeps.output_ids == [EOS] * 3


def test_missing_sample_is_an_error():
    sched = Scheduler(config())
    sched.add(req(0, 4, 3))
    out = sched.schedule(0.0)
    with pytest.raises(ValueError, match="request 0"):
        sched.update(out, {}, 1.0)


@settings(max_examples=60, deadline=None)
@given(policy=st.sampled_from(["static", "continuous", "chunked"]),
       max_batch=st.integers(1, 6), kv=st.integers(40, 400), chunk=st.integers(1, 64),
       lengths=st.lists(st.tuples(st.integers(0, 120), st.integers(0, 30)), min_size=1, max_size=12))
def test_every_request_finishes_or_is_rejected(policy, max_batch, kv, chunk, lengths):
    sched = Scheduler(config(policy, max_batch=max_batch, kv=kv, max_len=128, chunk=chunk))
    rs = [req(i, p, n) for i, (p, n) in enumerate(lengths)]
    for r in rs:
        sched.add(r)
    outs = drain(sched)
    rejected = {r.request_id for o in outs for r in o.rejected}
    for r in rs:
        if r.request_id in rejected:
            assert r.status is RequestStatus.REJECTED and r.finish_reason
        else:
            assert r.status is RequestStatus.FINISHED and len(r.output_ids) == r.max_new_tokens
    if policy == "static":
        assert not any(o.preempted for o in outs)


def spec_source(name: str, **overrides) -> WorkloadSource:
    return WorkloadSource(apply_overrides(load_workload(name), **overrides), None, vocab_size=1000)


# The fake step costs a few ms, far less than a CPU's; the presets' arrival rates are raised to
# match, so that requests overlap in the engine as they do on real hardware.
def test_continuous_finishes_a_mixed_workload_sooner_than_static():
    cfg = dict(max_batch=8, kv=64 * 1024, max_len=2048)
    static = simulate(spec_source("mixed-lengths", rate=40.0), config("static", **cfg))
    cont = simulate(spec_source("mixed-lengths", rate=40.0), config("continuous", **cfg))
    for sim in (static, cont):
        assert len(sim.requests) == 64 and all(r.status is RequestStatus.FINISHED for r in sim.requests)
    assert [len(r.output_ids) for r in static.requests] == [len(r.output_ids) for r in cont.requests]
    assert cont.end_ms < static.end_ms


def worst_itl(sim: Sim) -> float:
    return max(b - a for r in sim.requests for a, b in zip(r.token_times_ms, r.token_times_ms[1:]))


def test_chunked_prefill_lowers_the_worst_inter_token_latency():
    cfg = dict(max_batch=8, kv=64 * 1024, max_len=2048)
    cont = simulate(spec_source("long-prompts-during-decode", rate=20.0), config("continuous", **cfg))
    chunked = simulate(spec_source("long-prompts-during-decode", rate=20.0), config("chunked", chunk=256, **cfg))
    assert all(r.status is RequestStatus.FINISHED for r in cont.requests + chunked.requests)
    assert any(o.phase is Phase.MIXED for o in chunked.outputs)
    assert worst_itl(chunked) < worst_itl(cont)


def test_closed_loop_through_the_scheduler_keeps_its_users():
    sim = simulate(spec_source("closed-loop-8", prompt_source="synthetic"), config("chunked", max_batch=4, chunk=128))
    assert len(sim.requests) == 48 and all(r.status is RequestStatus.FINISHED for r in sim.requests)
