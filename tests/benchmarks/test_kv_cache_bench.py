"""bench/kv_cache.py's Mooncake replay at a tiny size (simulated: no timing in it): one row per trace and
budget, each measured rate under its trace's infinite ceiling, a smaller pool never finding more."""
from __future__ import annotations

import argparse
import re

from bench.kv_cache import mooncake


def test_the_mooncake_table_at_a_tiny_size():
    lines = mooncake(argparse.Namespace(rows=60, local=0))
    rows = [line for line in lines if line.startswith("| mooncake") or line.startswith("| make_mooncake")]
    assert len(rows) == 6
    for row in rows:
        measured, sized, infinite = (float(x) for x in re.findall(r"([\d.]+)%", row))
        assert measured <= infinite + 1e-9 and sized <= infinite + 1e-9
    sized_by_trace = [[float(re.findall(r"([\d.]+)%", r)[1]) for r in rows[i:i + 3]] for i in (0, 3)]
    assert all(a >= b >= c for a, b, c in sized_by_trace)   # budgets from large to small
