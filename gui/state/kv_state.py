"""What the window knows of the KV cache: the latest map (backend.events.KvMap) and its counts over time. No Qt.

The map is the newest snapshot only (a cache of tens of thousands of blocks a few times a second: a
history of maps would grow without bound); the counts of each state are kept for every snapshot, so
the cached-but-free share and a slot cache's reserved share can be drawn over time beside the steps'
exact occupancy. Reused blocks are kept with the moment they arrived, for the view to mark a while.

A run folder opened later replays its kv_map.jsonl (backend/results/kv_file.py): every snapshot is kept
(the file holds at most two a second of the run), the counts drawn over time as a live run's, and
`show(i)` puts snapshot i on the map, the blocks its requests found cached marked; a folder without the
file leaves `missing` saying why there is no map.
"""
from __future__ import annotations

import time

import numpy as np

from backend.engine.kv_watch import RESERVED
from backend.engine.paged_scheduler import CACHED_FREE, FREE
from backend.events import KvMap

from gui.state.buffers import GrowableBuffer

HISTORY_COLUMNS = ("time_ms", "held", "cached", "free", "reserved")   # cells in each state, per snapshot


class KvState:
    def __init__(self):
        self.history = GrowableBuffer(HISTORY_COLUMNS, capacity=256)
        self.version = 0
        self.clear()

    def clear(self) -> None:
        self.history.clear()
        self.latest: KvMap | None = None
        self.owners = np.empty(0, dtype=np.int32)
        self.tokens = np.empty(0, dtype=np.uint16)
        self.reused = np.empty(0, dtype=np.int32)
        self.reused_at = float("-inf")   # time.monotonic() when `reused` came
        self.num_snapshots = 0
        self.recorded: list[KvMap] = []   # an opened run's snapshots, in order ([] for a live run)
        self.shown = -1                   # the recorded snapshot on the map
        self.missing = ""                 # an opened run without a map: why
        self.version += 1                 # bumped whenever the map on show changes (never reset)

    def replay(self, snaps: list[KvMap] | None, missing: str = "") -> None:
        """An opened run's snapshots (None: the folder has none, `missing` says why): the last on show."""
        self.clear()
        if not snaps:
            self.missing = missing
            return
        for snap in snaps:
            self.add(snap)
        self.recorded = list(snaps)
        self.show(len(snaps) - 1)

    def show(self, index: int) -> None:
        """Recorded snapshot `index` on the map, with the blocks found cached since the one before it."""
        index = min(max(index, 0), len(self.recorded) - 1)
        if index == self.shown:
            return
        self.shown = index
        snap = self.recorded[index]
        self._set(snap)
        self.reused = np.frombuffer(snap.reused, dtype=np.int32)

    def _set(self, snap: KvMap) -> None:
        self.latest = snap
        self.version += 1
        self.owners = np.frombuffer(snap.owners, dtype=np.int32)
        self.tokens = np.frombuffer(snap.tokens, dtype=np.uint16)

    def add(self, snap: KvMap, now: float | None = None) -> None:
        self._set(snap)
        if snap.reused:
            self.reused = np.frombuffer(snap.reused, dtype=np.int32)
            self.reused_at = time.monotonic() if now is None else now
        owners = self.owners
        free, cached, reserved = (int(np.count_nonzero(owners == s)) for s in (FREE, CACHED_FREE, RESERVED))
        self.history.append(np.array([[snap.time_ms, len(owners) - free - cached - reserved, cached, free, reserved]],
                                     dtype=np.float64))
        self.num_snapshots += 1

    @property
    def is_replay(self) -> bool:
        return bool(self.recorded)

    @property
    def num_cells(self) -> int:
        return len(self.owners)

    def fractions(self, state: str) -> tuple[np.ndarray, np.ndarray]:
        """(time_ms, share of the cells) of one state over the snapshots."""
        n = max(self.num_cells, 1)
        return self.history.column("time_ms"), self.history.column(state) / n
