"""bench/others_cpu.py: the rest of the machine's CPU while bench.server_fit measures a server, from
/proc's counters (parsed here from fixed text, so nothing is timed) less our own processes'."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.others_cpu import Snapshot, busy_ticks, others_cores, process_ticks, snapshot


def test_busy_ticks_count_user_nice_system_irq_softirq_steal_not_idle_iowait_or_guest():
    #            user nice system idle iowait irq softirq steal guest guest_nice
    line = "cpu  100 200 300 4000 500 6 7 8 9 10"
    assert busy_ticks(line) == 100 + 200 + 300 + 6 + 7 + 8


def test_busy_ticks_refuse_another_line():
    with pytest.raises(ValueError):
        busy_ticks("cpu0 1 2 3 4")


def test_process_ticks_read_utime_and_stime_past_a_name_with_parentheses_and_spaces():
    fields = [str(i) for i in range(3, 53)]        # field 3 (state) to field 52
    fields[14 - 3], fields[15 - 3] = "70", "5"     # utime, stime
    assert process_ticks("4242 (a) b (c) " + " ".join(fields)) == 75


def test_others_are_the_busy_time_not_ours_per_second():
    before, after = Snapshot(wall_s=10.0, busy_s=100.0, ours_s=40.0), Snapshot(wall_s=12.0, busy_s=104.0, ours_s=41.0)
    assert others_cores(before, after) == pytest.approx(1.5)
    # ours counted past the machine's busy time (ticks against rusage's finer clock) is no one else's: 0
    assert others_cores(before, Snapshot(wall_s=12.0, busy_s=100.5, ours_s=41.0)) == 0.0
    assert others_cores(None, after) is None and others_cores(after, before) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_live_snapshot_reads_proc_and_a_gone_server_gives_none():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert snapshot(child.pid) is None                 # reaped: no /proc entry
    now = snapshot(os.getpid())
    assert now is not None and now.busy_s > 0 and now.ours_s > 0
