"""Snapshots of the KV cache for the window's map: who holds each block, a few times a second.

The engine loop hands every step's end to `KvWatch.due` and, when it says so, emits `snapshot()`
(a backend.events.KvMap); once more at the end of a run. Both layouts are drawn in cells of
`block_size` tokens, so they can be compared cell for cell:
  * paged: a cell is a block of the pool; its owner is the oldest running request holding it,
    CACHED_FREE when no request holds it but it keeps a prefix a later request can reuse, FREE;
  * slots: a row per slot of `max_len` tokens; a running request owns the cells it has written and
    its slot's remaining cells are RESERVED: held for it, holding nothing (the waste paging removes).
Snapshots are throttled on both clocks: at most one per SNAPSHOT_MS of the run (a simulated run's
clock runs far ahead of the wall's) and one per MIN_WALL_S of wall time (a big cache costs a few
ms of Python to read).
"""
from __future__ import annotations

import time

import numpy as np

from backend.engine.paged_scheduler import CACHED_FREE, FREE, PagedScheduler
from backend.engine.scheduler import Scheduler
from backend.events import KV_RESERVED, KvMap

RESERVED = KV_RESERVED   # slots: a cell of a request's slot that it has not written
SNAPSHOT_MS = 250.0  # of the run's clock between snapshots
MIN_WALL_S = 0.1     # of wall time between snapshots: at most 10 a second reach the window
STATE_NAMES = {CACHED_FREE: "cached, free", FREE: "free", RESERVED: "reserved, unused"}


class KvWatch:
    def __init__(self, scheduler: Scheduler, snapshot_ms: float = SNAPSHOT_MS, min_wall_s: float = MIN_WALL_S,
                 wall=time.monotonic):
        self.scheduler = scheduler
        self.snapshot_ms = snapshot_ms
        self.min_wall_s = min_wall_s
        self.wall = wall
        self.next_ms = 0.0              # the run's clock: the first step is due
        self.last_wall = float("-inf")
        self._reused: list[int] = []
        self._cached: dict[int, int] = {}

    def admitted(self, request, hit_tokens: int) -> None:
        """A request admitted with `hit_tokens` of its prompt found cached: its first blocks are marked."""
        if hit_tokens > 0 and isinstance(self.scheduler, PagedScheduler):
            self._reused.extend(request.block_ids[:hit_tokens // self.scheduler.config.block_size])
            self._cached[request.request_id] = hit_tokens

    def due(self, now_ms: float) -> bool:
        if now_ms < self.next_ms:
            return False
        return self.wall() - self.last_wall >= self.min_wall_s

    def snapshot(self, now_ms: float, final: bool = False) -> KvMap:
        self.next_ms = now_ms + self.snapshot_ms
        self.last_wall = self.wall()
        owners, tokens, per_row = cells(self.scheduler)
        config = self.scheduler.config
        reused = np.asarray(self._reused, dtype=np.int32).tobytes()
        snap = KvMap(now_ms, config.kv_layout, config.block_size, per_row, owners.tobytes(), tokens.tobytes(),
                     reused, self._cached, final)
        self._reused, self._cached = [], {}
        return snap


def cells(scheduler: Scheduler) -> tuple[np.ndarray, np.ndarray, int]:
    """(owner int32, tokens uint16, cells per row) of every cell of the scheduler's cache."""
    bs = scheduler.config.block_size
    running = scheduler.running_requests
    if isinstance(scheduler, PagedScheduler):
        owners = np.asarray(scheduler.kv_map(), dtype=np.int32)
        tokens = np.where(owners == CACHED_FREE, bs, 0).astype(np.uint16)
        for request in running:
            ids = request.block_ids
            if ids:   # block i holds tokens i*bs ..: full but the last, which holds what was written
                tokens[ids] = np.clip(request.num_computed - bs * np.arange(len(ids)), 0, bs)
        return owners, tokens, 0
    config = scheduler.config
    per_slot = -(-config.max_len // bs)
    owners = np.full(config.max_batch * per_slot, FREE, dtype=np.int32)
    tokens = np.zeros(len(owners), dtype=np.uint16)
    for request in running:
        if request.slot is None:
            continue
        first = request.slot * per_slot
        written = -(-request.num_computed // bs)
        owners[first:first + per_slot] = RESERVED
        owners[first:first + written] = request.request_id
        tokens[first:first + written] = np.clip(request.num_computed - bs * np.arange(written), 0, bs)
    return owners, tokens, per_slot
