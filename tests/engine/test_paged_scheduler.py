"""The scheduler under the paged layout: admission and preemption by blocks, prefix hits; no model, no torch."""
from __future__ import annotations

import random

import pytest

from backend.engine.decode_batch import DecodeBatch
from backend.engine.paged_scheduler import CACHED_FREE, FREE, PagedScheduler, scheduler_for
from backend.engine.request import Request
from backend.engine.scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from backend.errors import InputError
from backend.records import RequestStatus


def paged(policy: str = "continuous", max_batch: int = 4, kv: int = 64, block: int = 4, caching: bool = False,
          chunk: int = 512, max_len: int = 4096) -> Scheduler:
    return scheduler_for(SchedulerConfig(policy=policy, max_batch=max_batch, kv_capacity=kv, max_len=max_len,
                                         chunk_tokens=chunk, kv_layout="paged", block_size=block,
                                         prefix_caching=caching))


def step(sched: Scheduler, now: float = 0.0) -> tuple[SchedulerOutput, list[Request]]:
    """One step, checking what every paged step must hold: each token it computes has a block, and
    the blocks running requests hold are the pool's used ones (a shared block once)."""
    out = sched.schedule(now)
    bs, pool = sched.config.block_size, sched.pool
    for chunk in out.chunks:
        assert len(chunk.request.block_ids) * bs >= chunk.start + chunk.num_tokens
    held = {b for r in sched._running for b in r.block_ids}
    assert len(held) == pool.num_used_blocks <= pool.num_blocks
    sampled = {c.request.request_id: 7 for c in out.chunks if c.samples}
    return out, sched.update(out, sampled, now + 1.0)


def test_paged_config_builds_the_paged_scheduler_and_slots_the_old_one():
    assert isinstance(paged(), PagedScheduler)
    slots = SchedulerConfig(policy="continuous", max_batch=2, kv_capacity=64, max_len=64)
    assert type(scheduler_for(slots)) is Scheduler
    with pytest.raises(ValueError, match="paged scheduler"):   # the slot scheduler would ignore the blocks
        Scheduler(SchedulerConfig(policy="continuous", max_batch=2, kv_capacity=64, max_len=64, kv_layout="paged"))


@pytest.mark.parametrize("block, kv, batch, message", [
    (12, 64, 2, "power of two"),
    (16, 40, 4, "fewer than one per request"),
])
def test_bad_paged_settings_are_one_line_each(block, kv, batch, message):
    with pytest.raises(InputError, match=message):
        paged(block=block, kv=kv, max_batch=batch, max_len=64)


def test_a_sequence_longer_than_every_block_is_rejected_with_the_blocks_named():
    sched = paged(kv=16, block=4, max_batch=2)   # 4 blocks of 4
    r = Request(1, [5] * 14, 3, 0.0)             # 17 tokens: 5 blocks
    sched.add(r)
    out = sched.schedule(0.0)
    assert out.rejected == [r] and "4 blocks" in r.finish_reason


def test_admission_counts_whole_blocks():
    """Two 17-token prompts in 4 blocks of 16: the first takes 2, the second would need 2 and a block of
    headroom for the first's decode. The slot scheduler counts 17 + 1 + 1 + 17 = 36 of 64 tokens and takes both."""
    sched = paged(kv=64, block=16)
    a, b = Request(1, [1] * 17, 4, 0.0), Request(2, [2] * 17, 4, 0.0)
    sched.add(a)
    sched.add(b)
    out, _ = step(sched)
    assert [c.request for c in out.prefill] == [a] and len(a.block_ids) == 2 and sched.num_waiting == 1
    slots = Scheduler(SchedulerConfig(policy="continuous", max_batch=4, kv_capacity=64, max_len=4096))
    slots.add(Request(1, [1] * 17, 4, 0.0))
    slots.add(Request(2, [2] * 17, 4, 0.0))
    assert len(slots.schedule(0.0).prefill) == 2


def test_decodes_take_a_block_when_they_cross_one_and_preemption_frees_the_newest():
    sched = paged(kv=16, block=4, max_batch=2)   # 4 blocks
    a, b = Request(1, [1] * 4, 9, 0.0), Request(2, [2] * 4, 9, 0.0)
    sched.add(a)
    sched.add(b)
    step(sched)                       # both prompts: a block each
    assert (len(a.block_ids), len(b.block_ids)) == (1, 1)
    out, _ = step(sched)              # the decode of token 4 starts a block each: 4 of 4 used
    assert out.decode == [a, b] and sched.pool.num_free_blocks == 0
    for _ in range(3):
        out, _ = step(sched)          # tokens 5-7 fit the second blocks
        assert out.preempted == []
    out, _ = step(sched)              # token 8 starts a third block each: only 0 free, so b goes
    assert out.preempted == [b] and out.decode == [a]
    assert b.block_ids == [] and b.num_computed == 0 and b.status is RequestStatus.WAITING and b.num_preemptions == 1
    assert len(a.block_ids) == 3


def test_a_prefix_hit_starts_the_request_after_its_cached_tokens():
    sched = paged(kv=64, block=4, caching=True)
    shared = list(range(100, 108))               # two full blocks
    first = Request(1, shared + [1], 1, 0.0)
    sched.add(first)
    out, finished = step(sched)
    assert finished == [first] and out.num_reused_tokens == 0
    second = Request(2, shared + [2, 3, 4], 2, 0.0)
    sched.add(second)
    out, _ = step(sched)
    chunk = out.prefill[0]
    assert (chunk.start, chunk.num_tokens, chunk.token_ids) == (8, 3, [2, 3, 4])
    assert out.num_reused_tokens == 8 and second.num_cached_tokens == 8
    assert second.to_record().cached_prompt_tokens == 8
    assert sched.pool.stats.num_hit_requests == 1


def test_without_prefix_caching_the_same_prompts_are_computed_whole():
    sched = paged(kv=64, block=4, caching=False)
    shared = list(range(100, 108))
    sched.add(Request(1, shared + [1], 1, 0.0))
    step(sched)
    sched.add(Request(2, shared + [2, 3, 4], 2, 0.0))
    out, _ = step(sched)
    assert (out.prefill[0].start, out.prefill[0].num_tokens, out.num_reused_tokens) == (0, 11, 0)


def test_a_preempted_request_recomputes_from_its_cached_blocks():
    sched = paged(kv=16, block=4, max_batch=2, caching=True)
    a, b = Request(1, [1] * 4, 9, 0.0), Request(2, [2] * 5, 9, 0.0)
    sched.add(a)
    sched.add(b)
    preempted = None
    for _ in range(20):
        out, _ = step(sched)
        if out.preempted:
            preempted = out.preempted[0]
            break
    assert preempted is b
    while b.status is RequestStatus.WAITING:
        out, _ = step(sched)
    assert out.num_reused_tokens > 0 and b.num_computed >= 4   # its full blocks stayed cached


@pytest.mark.parametrize("policy", ["static", "continuous", "chunked"])
@pytest.mark.parametrize("caching", [False, True])
def test_every_request_finishes_under_every_policy(policy, caching):
    rng = random.Random(f"{policy}{caching}")
    system = [rng.randrange(1000) for _ in range(24)]   # a shared prefix for a third of the prompts
    sched = paged(policy, max_batch=6, kv=256, block=8, caching=caching, chunk=48)
    requests = []
    for i in range(40):
        n = rng.randint(1, 60)
        prompt = (system + [rng.randrange(1000) for _ in range(n)]) if i % 3 == 0 else \
            [rng.randrange(1000) for _ in range(n)]
        requests.append(Request(i, prompt, rng.randint(1, 40), 0.0))
    for r in requests:
        sched.add(r)
    computed = reused = 0
    for _ in range(10_000):
        if not sched.has_work:
            break
        out, _ = step(sched)
        computed += out.num_tokens
        reused += out.num_reused_tokens
    assert all(r.status is RequestStatus.FINISHED for r in requests)
    assert sched.pool.num_used_blocks == 0
    if policy == "static":
        assert sum(r.num_preemptions for r in requests) == 0
    if caching and policy != "static":   # a static batch admits together: nothing is computed before it looks up
        assert reused > 0


def test_a_paged_decode_batch_reserves_blocks_and_takes_them_as_tokens_arrive():
    batch = DecodeBatch(max_batch=4, kv_capacity=32, max_len=64, kv_layout="paged", block_size=8)   # 4 blocks
    a, b = Request(1, [1] * 9, 7, 0.0), Request(2, [2] * 9, 8, 0.0)   # 16 tokens (2 blocks), 17 tokens (3 blocks)
    assert batch.fits_ever(a) and batch.fits_ever(b)
    batch.admit(a, 8)
    assert len(a.block_ids) == 2 and not batch.can_admit(b)   # 2 reserved + 3 > 4
    b_small = Request(3, [3] * 9, 7, 0.0)
    assert batch.can_admit(b_small)
    batch.admit(b_small, 8)
    while batch.num_running:
        out = batch.schedule()
        for r in out.decode:
            assert len(r.block_ids) * 8 >= r.num_computed + 1
        batch.update(out, {r.request_id: 5 for r in out.decode}, 0.0)
    assert batch.pool.num_used_blocks == 0
    assert not DecodeBatch(4, 32, 64, "paged", 8).fits_ever(Request(4, [1] * 30, 3, 0.0))   # 33 tokens: 5 blocks


@pytest.mark.parametrize("seed", range(40))
def test_random_small_caches_never_stall_or_leak_blocks(seed):
    """Random block sizes, caches, batches and budgets, prompts half sharing a prefix, arrivals mid-run:
    a step with work always schedules something, every request ends, and every block comes back."""
    rng = random.Random(seed)
    bs = rng.choice([1, 2, 4, 8, 16])
    max_batch, max_len = rng.randint(1, 8), rng.randint(16, 120)
    sched = paged(rng.choice(["static", "continuous", "chunked"]), max_batch=max_batch, block=bs,
                  kv=rng.randint(max(max_batch * bs, max_len), 600), caching=rng.random() < 0.5,
                  chunk=rng.randint(max_batch + 1, 64), max_len=max_len)
    shared = [rng.randrange(50) for _ in range(40)]
    requests = [Request(i, shared[:rng.randint(0, 40)] + [rng.randrange(50) for _ in range(rng.randint(1, 80))],
                        rng.randint(1, 40), 0.0) for i in range(30)]
    for r in requests[:10]:
        sched.add(r)
    later = requests[10:]
    for _ in range(50_000):
        if not (sched.has_work or later):
            break
        if later and rng.random() < 0.3:
            sched.add(later.pop(0))
        out, _ = step(sched)
        assert not (out.is_empty and not out.rejected and not later and (sched.num_running or sched.num_waiting))
    assert all(r.status in (RequestStatus.FINISHED, RequestStatus.REJECTED) for r in requests)
    assert sched.pool.num_used_blocks == 0


def test_the_kv_map_shows_owners_cached_free_and_free_blocks():
    sched = paged(kv=32, block=4, max_batch=2, caching=True)   # 8 blocks
    first = Request(1, list(range(9)), 1, 0.0)                   # 3 blocks, 2 of them full
    sched.add(first)
    step(sched)                                                  # finished: its full blocks stay cached
    assert sorted(sched.kv_map()) == [FREE] * 6 + [CACHED_FREE] * 2
    second = Request(2, list(range(8)) + [50], 3, 0.0)           # finds both, takes one more
    sched.add(second)
    step(sched)
    states = sched.kv_map()
    assert states.count(2) == 3 and states.count(FREE) == 5 and CACHED_FREE not in states
