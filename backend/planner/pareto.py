"""The Pareto front of the simulated candidates: cost ($ per million tokens, lower is better)
against goodput (requests/s meeting both SLOs, higher is better).

At one arrival rate every candidate that keeps up serves the same tokens per hour, so its $/1M
tokens ranks it by what its devices cost, and its goodput says how much of that traffic meets
the SLOs: the front is the cheapest way to reach each level of goodput, and its top end is where
paying more buys no more requests within the SLOs.
"""
from __future__ import annotations

import math
from typing import Sequence


def pareto_front(points: Sequence[tuple[float, float]], tiebreak: Sequence | None = None) -> list[int]:
    """Indices of the points (cost, benefit) no other point dominates (cost <= and benefit >=, one
    of them strictly), in increasing cost; points with a NaN or infinite figure are never on it.
    Of identical points the one with the smallest tiebreak[i] (else the first) is kept."""
    finite = [i for i, (x, y) in enumerate(points) if math.isfinite(x) and math.isfinite(y)]
    finite.sort(key=lambda i: (points[i][0], -points[i][1], tiebreak[i] if tiebreak is not None else 0, i))
    front, best = [], -math.inf
    for i in finite:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def outcome_front(outcomes: Sequence) -> list[int]:
    """The front of simulated outcomes by (usd_per_m_tokens, goodput); failed ones are left out."""
    return pareto_front([(o.usd_per_m_tokens, o.goodput) if not o.error else (math.nan, math.nan)
                         for o in outcomes], [preference(o) for o in outcomes])


def preference(outcome) -> tuple[int, int]:
    """Between equally cheap, equally good outcomes: fewer devices, then the smaller batch limit."""
    return outcome.candidate.devices, outcome.candidate.max_batch


def cheapest(outcomes: Sequence, top: int = 5, at_edge: bool = False) -> list:
    """The `top` cheapest outcomes that meet the SLOs, one per layout (a layout's batch limits often
    tie: its best is kept, the smallest max_batch among equals): by $/1M tokens, then more goodput,
    then fewer devices. `at_edge` (--confidence): those that meet them at their band's pessimistic edge,
    by their cost and goodput there."""
    if at_edge:
        good = [o for o in outcomes if o.meets_at_edge and math.isfinite(o.usd_per_m_tokens_high)]
        good.sort(key=lambda o: (o.usd_per_m_tokens_high, -o.goodput_low, *preference(o)))
    else:
        good = [o for o in outcomes if o.meets and math.isfinite(o.usd_per_m_tokens)]
        good.sort(key=lambda o: (o.usd_per_m_tokens, -o.goodput, *preference(o)))
    shown, seen = [], set()
    for o in good:
        c = o.candidate
        layout = (c.gpu, c.precision, c.kv_dtype, c.policy, c.tp, c.pp, c.dp, c.ep, c.prefill_workers, c.decode_workers,
                  c.decode_tp)
        if layout not in seen:
            seen.add(layout)
            shown.append(o)
    return shown[:top]
