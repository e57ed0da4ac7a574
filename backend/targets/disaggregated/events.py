"""The disaggregated policy's one event of its own: which workers run, where (for the window's rows)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class WorkerLayout:
    """Emitted once every worker is ready, before the first arrival."""

    workers: list[dict] = field(default_factory=list)   # {"name", "role", "cores", "pid", "threads"}, prefill first
    kv_transport: str = ""                              # shm | pipe | "link NAME, X GB/s, Y us" when simulated

    @property
    def names(self) -> list[str]:
        return [w["name"] for w in self.workers]
