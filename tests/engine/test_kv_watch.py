"""The KV map's snapshots: cells, owners and tokens under both layouts, reused blocks marked, throttled
on the run's clock and the wall's, and emitted by a simulated run (few, and a last one at the end)."""
from __future__ import annotations

import numpy as np

from backend.cli.load import load_config
from backend.cli.main import build_parser
from backend.engine.kv_watch import RESERVED, KvWatch, cells
from backend.engine.paged_scheduler import CACHED_FREE, FREE, scheduler_for
from backend.engine.request import Request
from backend.engine.scheduler import SchedulerConfig
from backend.events import KvMap
from backend.session import execute


def scheduler(layout: str, caching: bool = True):
    return scheduler_for(SchedulerConfig(policy="continuous", max_batch=2, kv_capacity=32, max_len=16,
                                         kv_layout=layout, block_size=4, prefix_caching=caching))


def step(sched, watch=None):
    out = sched.schedule(0.0)
    for chunk in out.prefill:
        if watch is not None and chunk.start:
            watch.admitted(chunk.request, chunk.start)
    return sched.update(out, {c.request.request_id: 7 for c in out.chunks if c.samples}, 1.0)


def test_paged_cells_hold_owners_tokens_and_cached_blocks_and_mark_the_reused_ones():
    sched = scheduler("paged")                       # 8 blocks of 4
    watch = KvWatch(sched)
    sched.add(Request(1, list(range(9)), 1, 0.0))    # 9 tokens: 2 full blocks and one of 1 token
    step(sched, watch)                               # finished: its full blocks stay cached
    owners, tokens, per_row = cells(sched)
    assert per_row == 0 and len(owners) == 8
    assert sorted(owners.tolist()) == [FREE] * 6 + [CACHED_FREE] * 2
    assert tokens[owners == CACHED_FREE].tolist() == [4, 4]
    sched.add(Request(2, list(range(8)) + [50], 3, 0.0))   # finds both blocks, computes one token
    step(sched, watch)
    snap = watch.snapshot(5.0)
    owners = np.frombuffer(snap.owners, dtype=np.int32)
    tokens = np.frombuffer(snap.tokens, dtype=np.uint16)
    assert snap.num_cells == 8 and (owners == 2).sum() == 3
    assert sorted(tokens[owners == 2].tolist()) == [1, 4, 4]   # 9 written (the sampled token not yet)
    reused = np.frombuffer(snap.reused, dtype=np.int32)
    assert len(reused) == 2 and set(owners[reused]) == {2}
    assert snap.cached_tokens == {2: 8}
    assert watch.snapshot(6.0).reused == b""          # marked once


def test_a_slot_is_a_row_and_its_unwritten_room_is_reserved():
    sched = scheduler("slots")                       # 2 slots of 16 tokens: 4 cells each
    sched.add(Request(1, list(range(5)), 8, 0.0))
    step(sched)                                      # 5 tokens written of a 16-token slot
    owners, tokens, per_row = cells(sched)
    assert per_row == 4 and len(owners) == 8
    row = owners.reshape(2, 4)[0 if owners[0] != FREE else 1]
    assert row.tolist() == [1, 1, RESERVED, RESERVED]
    assert sorted(tokens[owners == 1].tolist()) == [1, 4]
    assert (owners == FREE).sum() == 4


def test_snapshots_wait_for_both_clocks():
    wall = [0.0]
    watch = KvWatch(scheduler("paged"), snapshot_ms=100.0, min_wall_s=0.5, wall=lambda: wall[0])
    assert watch.due(0.0)
    watch.snapshot(0.0)
    assert not watch.due(50.0)      # too soon on the run's clock
    assert not watch.due(150.0)     # ... and on the wall's
    wall[0] = 1.0
    assert watch.due(150.0)


def test_a_simulated_multi_turn_run_emits_few_snapshots_ending_with_a_final_one():
    args = build_parser().parse_args(["load", "--simulate", "--profile", "h100-sxm", "--model", "llama-8b",
                                      "--workload", "multi-turn-chat", "--requests", "3"])
    events = []
    finished = execute(load_config(args), events.append, lambda: False)
    maps = [e for e in events if isinstance(e, KvMap)]
    assert finished.error is None and maps and maps[-1].final and not any(m.final for m in maps[:-1])
    last = maps[-1]
    owners = np.frombuffer(last.owners, dtype=np.int32)
    assert last.layout == "paged" and (owners == CACHED_FREE).sum() > 0 and (owners >= 0).sum() == 0
    cached = {rid: n for m in maps for rid, n in m.cached_tokens.items()}
    assert cached == {r.request_id: r.cached_prompt_tokens for r in finished.data.requests if r.cached_prompt_tokens}


def test_the_local_engine_sends_its_slot_map():
    """The real engine on the `tiny` model (the local engine's default layout: slots): a row per slot."""
    from backend.config import EngineConfig, ModelChoice, RunConfig, SamplingConfig
    from backend.workload.spec import apply_overrides, load_workload
    spec = apply_overrides(load_workload("mixed-lengths"), num_requests=4, arrival="burst", prompt_len="8:24",
                           output_len="4:8")
    config = RunConfig(mode="load", model=ModelChoice("tiny", "cpu", "float32"), sampling=SamplingConfig(ignore_eos=True),
                       engine=EngineConfig(policy="continuous", max_batch=2, kv_layout="slots"), workload=spec)
    events = []
    finished = execute(config, events.append, lambda: False)
    maps = [e for e in events if isinstance(e, KvMap)]
    assert finished.error is None and maps and maps[-1].final
    last = maps[-1]
    assert last.layout == "slots" and last.num_cells == 2 * last.cells_per_row
    assert (np.frombuffer(last.owners, dtype=np.int32) == FREE).all()   # every request finished: slots free
