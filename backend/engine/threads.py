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
from dataclasses import dataclass
from pathlib import Path

from backend.errors import InputError

# The cores this process could use when it started: a run that pinned itself to fewer must
# not shrink what the next run may choose from.
_STARTING_CORES: tuple[int, ...] = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") \
    else tuple(range(os.cpu_count() or 1))
_default_threads: int | None = None   # torch's own count, read before the first change


def available_cores() -> tuple[int, ...]:
    return _STARTING_CORES


@dataclass(frozen=True, slots=True)
class ThreadChoice:
    """How many threads a run's engine takes, of how many cores, and why."""
    threads: int | None      # None: the library's own count on every core (headless, nothing asked)
    cores: int               # the cores this process may use (its affinity, not the machine's count)
    physical: int            # of those, distinct physical cores (== cores without SMT or when unknown)
    left_for_window: int     # cores the engine leaves free (0 headless)
    reason: str              # why this count, in words for a tooltip

    def describe(self) -> str:
        """e.g. "engine: 7 threads of 8 cores; 1 left for the window"."""
        of = f"{self.cores} {'core' if self.cores == 1 else 'cores'}"
        if self.physical != self.cores:
            of += f" ({self.physical} physical)"
        if self.threads is None:
            return f"engine: every core of {of}"
        text = f"engine: {self.threads} {'thread' if self.threads == 1 else 'threads'} of {of}"
        if self.left_for_window:
            text += f"; {self.left_for_window} left for the window"
        return text


def choose_threads(cores: int, physical: int | None = None, requested: int | None = None,
                   window: bool = True) -> ThreadChoice:
    """The engine's thread count for `cores` usable cores (`physical` of them distinct physical cores).

    An explicit count (`--threads`, the Threads field) always wins. Headless with none, the
    library keeps its own count on every core: nothing else on the machine is ours to leave
    room for, and headless figures stay comparable with earlier ones. With a window, the engine
    leaves the window's threads (painting at 30 Hz, the worker relaying the engine's events) a
    core: one up to 8 cores, where each core is a large share of the engine (12-50%), two above,
    where a second core costs the engine at most 1/8 of its share and keeps the window smooth
    beside a busy desktop. It takes no more threads than physical cores: a hyperthread adds
    little to matrix products and its sibling's stalls slow each step, which is also torch's
    default. A single core leaves nothing to spare: the engine takes it and shares.
    """
    if cores < 1:
        raise ValueError(f"cores must be at least 1, got {cores}")
    physical = min(physical or cores, cores)
    if requested is not None:
        return ThreadChoice(requested, cores, physical, max(0, cores - requested) if window else 0,
                            "the count asked for (--threads or the Threads field)")
    if not window:
        return ThreadChoice(None, cores, physical, 0, "headless: no window to leave room for, every core")
    spare = 1 if cores <= 8 else 2
    threads = max(1, min(cores - spare, physical))
    if threads == physical and threads < cores - spare:
        why = f"one per physical core ({physical}); hyperthreads add little to matrix products"
    elif cores - threads > 0:
        why = f"{cores - threads} core{'s' if cores - threads > 1 else ''} kept for the window's painting and events"
    else:
        why = "a single core: the engine and the window share it"
    return ThreadChoice(threads, cores, physical, cores - threads, why)


def core_ids(cores: tuple[int, ...] | list[int]) -> dict[int, tuple[str, str]] | None:
    """Each logical core's physical core (package, core id) from Linux sysfs; None where it cannot be read."""
    ids = {}
    for core in cores:
        topology = Path(f"/sys/devices/system/cpu/cpu{core}/topology")
        try:
            ids[core] = ((topology / "physical_package_id").read_text().strip(),
                         (topology / "core_id").read_text().strip())
        except OSError:
            return None
    return ids


def physical_cores(cores: tuple[int, ...] | list[int]) -> int | None:
    """Distinct physical cores among these logical ones; None where that cannot be read."""
    ids = core_ids(cores)
    return len(set(ids.values())) or None if ids is not None else None


def cores_to_pin(cores: list[int], threads: int, physical: dict[int, object] | None = None) -> list[int]:
    """The last `threads` cores, one per physical core first: two engine threads on one core's hyperthreads
    would share its matrix unit, whichever way the machine numbers its siblings (0 and 8, or 0 and 1)."""
    if physical is None:
        return cores[-threads:]
    chosen, used = [], set()
    for core in reversed(cores):
        if physical.get(core) not in used:
            chosen.append(core)
            used.add(physical.get(core))
    chosen += [c for c in reversed(cores) if c not in chosen]   # more threads than physical cores: siblings too
    return sorted(chosen[:threads])


def window_choice(requested: int | None = None) -> ThreadChoice:
    """The window's engine threads on this machine (its affinity at start, its physical cores)."""
    return choose_threads(len(_STARTING_CORES), physical_cores(_STARTING_CORES), requested, window=True)


def window_default_threads() -> int:
    """The window's default count (see choose_threads)."""
    return window_choice().threads or 1


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
    _pin(cores_to_pin(cores, threads, core_ids(cores)) if count is not None and threads < len(cores) else cores)
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
