"""How much CPU the rest of the machine took while a benchmark measured a server: the machine's busy
time (Linux's /proc/stat, every CPU) less this process's, its waited-for children's and the server's.

On a machine shared with other work, a server's step times follow its neighbours (on this project's
2-core machine one busy process beside llama.cpp's one-thread server took its decode step from 8.3 to
16 ms), and a fit across loads whose runs met different neighbours reads that as a load effect. A
run's figure says how quiet it was, so that a table is trusted or rerun. None where /proc is missing
(not Linux).
"""
from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

# /proc/stat's first line: cpu user nice system idle iowait irq softirq steal ... (USER_HZ ticks);
# idle and iowait are not busy, steal is (another guest on the host ran on our CPU)
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


@dataclass(frozen=True)
class Snapshot:
    wall_s: float
    busy_s: float    # every CPU's busy time
    ours_s: float    # this process's, its waited-for children's and the server's CPU time


def busy_ticks(stat_line: str) -> int:
    """The busy ticks in /proc/stat's aggregate `cpu` line."""
    fields = stat_line.split()
    if not fields or fields[0] != "cpu":
        raise ValueError(f"not /proc/stat's cpu line: {stat_line[:40]!r}")
    values = [int(x) for x in fields[1:]]
    return sum(values[i] for i in BUSY_FIELDS if i < len(values))


def process_ticks(stat_text: str) -> int:
    """utime + stime from /proc/PID/stat (every thread's, the exited ones' too)."""
    after_name = stat_text.rsplit(")", 1)[1].split()   # the name may hold spaces and parentheses
    return int(after_name[11]) + int(after_name[12])    # fields 14 and 15; field 3 is after_name[0]


def snapshot(server_pid: int) -> Snapshot | None:
    """Now's figures; None where /proc or the server can't be read."""
    hz = os.sysconf("SC_CLK_TCK")
    try:
        busy = busy_ticks(Path("/proc/stat").read_text().split("\n", 1)[0]) / hz
        server = process_ticks(Path(f"/proc/{server_pid}/stat").read_text()) / hz
    except (OSError, ValueError, IndexError):
        return None
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    ours = server + me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime
    return Snapshot(time.monotonic(), busy, ours)


def others_cores(before: Snapshot | None, after: Snapshot | None) -> float | None:
    """The CPUs, on average, that the rest of the machine kept busy between the two snapshots."""
    if before is None or after is None or after.wall_s <= before.wall_s:
        return None
    others = (after.busy_s - before.busy_s) - (after.ours_s - before.ours_s)
    return max(0.0, others) / (after.wall_s - before.wall_s)
