"""Every worker's newest steps for the per-worker step strip of a disaggregated run. No Qt."""
from __future__ import annotations

import numpy as np

from backend.records import Phase, StepRecord

from gui.state.buffers import RecentBuffer

ROWS_KEPT = 1 << 16   # newest steps kept per worker
PHASE_CODE = {p: float(i) for i, p in enumerate(Phase)}


def worker_order(names) -> list[str]:
    """Prefill workers first (drawn on top), then decode workers, each by index."""
    def key(name: str):
        role, _, index = name.partition("-")
        return (0 if role == "prefill" else 1 if role == "decode" else 2, int(index) if index.isdigit() else 0, name)
    return sorted(set(names), key=key)


class WorkerRows:
    """Every worker's newest steps as (start, end, tokens, phase) rows."""

    def __init__(self, kept: int = ROWS_KEPT):
        self.kept = kept
        self.clear()

    def clear(self) -> None:
        self.rows: dict[str, RecentBuffer] = {}
        self.names: list[str] = []

    def set_layout(self, names) -> None:
        for name in names:
            self._row(name)

    def add(self, steps: list[StepRecord]) -> None:
        by_worker: dict[str, list] = {}
        for s in steps:
            if s.worker:
                by_worker.setdefault(s.worker, []).append((s.start_ms, s.start_ms + s.duration_ms, s.num_tokens,
                                                           PHASE_CODE[s.phase]))
        for name, rows in by_worker.items():
            self._row(name).append(np.asarray(rows, dtype=np.float64))

    def _row(self, name: str) -> RecentBuffer:
        if name not in self.rows:
            self.rows[name] = RecentBuffer(("start", "end", "tokens", "phase"), limit=self.kept)
            self.names = worker_order([*self.names, name])
        return self.rows[name]

    def __bool__(self) -> bool:
        return bool(self.names)

    def step_at(self, name: str, x_ms: float) -> dict | None:
        """The worker's step under time x, or None."""
        buf = self.rows.get(name)
        if buf is None or not len(buf):
            return None
        start, end = buf.column("start"), buf.column("end")
        i = int(np.searchsorted(start, x_ms, side="right")) - 1
        if i < 0 or x_ms > end[i]:
            return None
        return {"start": float(start[i]), "end": float(end[i]), "tokens": int(buf.column("tokens")[i]),
                "phase": list(Phase)[int(buf.column("phase")[i])]}
