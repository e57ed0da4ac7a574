"""How many CPU threads a run takes, and on which cores.

A run's thread count is a setting (`--threads N`; the window's "Threads" field). Given one
smaller than the cores this process may use, the run also pins itself to the last N of them,
so the first ones stay free for the window (or whatever else shares the machine); with no
count the run takes every core and torch's default thread count, as before. Both the
headless CLI and the window's engine process apply it the same way, so a headless run with
the window's count is the reference the window is measured against.
"""
from __future__ import annotations

import os
from pathlib import Path

from backend.errors import InputError

# The cores this process could use when it started: a run that pinned itself to fewer must
# not shrink what the next run may choose from.
_STARTING_CORES: tuple[int, ...] = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") \
    else tuple(range(os.cpu_count() or 1))
_default_threads: int | None = None   # torch's own count, read before the first change


def available_cores() -> tuple[int, ...]:
    return _STARTING_CORES


def window_default_threads() -> int:
    """The window's default: every core but one, and at least one, so painting keeps a core."""
    return max(1, len(_STARTING_CORES) - 1)


def current_affinity() -> list[int]:
    """The cores this process may run on now."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(_STARTING_CORES)


def apply_threads(count: int | None) -> int:
    """Set torch's (and so the C kernels') thread count and the process's cores.

    Returns the count, or 0 when there was nothing to set (no count, and none set before)."""
    global _default_threads
    if count is None and _default_threads is None:
        return 0   # nothing was ever changed: no need to import torch (a remote run has none)
    import torch
    if _default_threads is None:
        _default_threads = torch.get_num_threads()
    if count is not None and count <= 0:
        raise InputError(f"--threads must be a positive number, got {count}")
    threads = count or _default_threads
    torch.set_num_threads(threads)
    cores = list(_STARTING_CORES)
    _pin(cores[-threads:] if count is not None and threads < len(cores) else cores)
    return threads


def _pin(cores: list[int]) -> None:
    """Every thread of the process on these cores (a thread's affinity is its own on Linux)."""
    if not hasattr(os, "sched_setaffinity"):
        return   # macOS and Windows: the count alone
    tasks = Path("/proc/self/task")
    tids = [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:
            pass   # the thread ended while we looked, or the cores are not ours to choose


def describe_threads(threads: int, affinity: list[int]) -> str:
    """e.g. "1 thread on core 1" or "8 threads on cores 0-7"."""
    noun = "thread" if threads == 1 else "threads"
    return f"{threads} {noun} on {describe_cores(affinity)}"


def describe_cores(cores: list[int]) -> str:
    if not cores:
        return "no cores"
    ranges, start, prev = [], cores[0], cores[0]
    for c in cores[1:] + [None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        ranges.append(f"{start}" if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return ("core " if len(cores) == 1 else "cores ") + ",".join(ranges)
