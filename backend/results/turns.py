"""A multi-turn run's figures by turn: how TTFT moves as a conversation's context grows (and, with a
prefix cache, how little of each later prompt is computed again)."""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from backend.records import RequestRecord, RequestStatus


@dataclass(frozen=True, slots=True)
class TurnFigures:
    turn: int                  # from 0
    num_finished: int
    ttft_p50_ms: float
    prompt_tokens_mean: float


def by_turn(requests: list[RequestRecord]) -> list[TurnFigures]:
    """Each turn's finished requests: their median TTFT and mean prompt length; [] for a run without
    conversations (every request's conversation_id -1)."""
    turns: dict[int, list[RequestRecord]] = {}
    for r in requests:
        if r.conversation_id >= 0 and r.status is RequestStatus.FINISHED and r.ttft_ms is not None:
            turns.setdefault(r.turn, []).append(r)
    return [TurnFigures(t, len(rs), statistics.median(r.ttft_ms for r in rs),
                        statistics.fmean(r.prompt_tokens for r in rs)) for t, rs in sorted(turns.items())]


def turns_line(requests: list[RequestRecord], most: int = 12) -> str | None:
    """`turns    TTFT p50 by turn: 1 41.2 ms (128 tok), 2 ...` (turns counted from 1, as a reader does),
    the first `most` turns and the last; None without conversations."""
    figures = by_turn(requests)
    if not figures:
        return None
    shown = figures if len(figures) <= most else [*figures[:most - 1], figures[-1]]
    parts = [f"{f.turn + 1} {f.ttft_p50_ms:,.1f} ms ({f.prompt_tokens_mean:,.0f} tok)" for f in shown]
    if len(shown) < len(figures):
        parts.insert(most - 1, "...")
    return "turns    TTFT p50 by turn (mean prompt): " + ", ".join(parts)
