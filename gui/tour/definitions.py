"""The tour's step on why two tools print different TPOTs for one run: the same arrivals averaged per
request (this window's TPOT, GuideLLM's ITL), pooled over every gap (vLLM's and SGLang's ITL), and run to the
stream's end (vLLM's TPOT). Computed with backend/results/definitions.py from the step's own run. Qt-free."""
from __future__ import annotations

import math

import numpy as np

from backend.records import RequestStatus
from backend.results.definitions import itl_chunk_gaps, itl_request_mean, itl_token_split, tpot_e2e
from backend.results.summary import arrival_of

from gui.tour.finding import DECODE, GREY, PREFILL, RED, Curve, Figure, Finding, Mark, Outcome, ms


def _arrivals(out: Outcome):
    chunks: dict[int, list[tuple[int, float]]] = {}
    for t in out.data.tokens:
        chunks.setdefault(t.request_id, []).append((t.index, t.time_ms))
    done = [r for r in out.data.requests if r.status is RequestStatus.FINISHED and r.output_tokens > 1]
    return [(r, arrival_of(r, sorted(chunks.get(r.request_id, [])))) for r in done if r.request_id in chunks]


def tpot_definitions(outcomes: list[Outcome]) -> Finding:
    """(9) one run's TPOT as a per-request mean, as a mean over every gap, and to the stream's end."""
    out = outcomes[0]
    rows, gaps, split, xs_gap, ys_gap = [], [], [], [], []
    for r, a in sorted(_arrivals(out), key=lambda p: (p[0].output_tokens, p[0].request_id)):
        own = itl_chunk_gaps(a)
        gaps += own
        split += itl_token_split(a)
        xs_gap += [r.output_tokens] * len(own)
        ys_gap += own
        e2e = tpot_e2e(a)
        rows.append([r.request_id, r.output_tokens, round(itl_request_mean(a), 3),
                     round(e2e, 3) if e2e is not None else math.nan, round(max(own, default=math.nan), 3)])
    per_request = [row[2] for row in rows]
    mean_of_means = float(np.mean(per_request)) if rows else math.nan
    pooled = float(np.mean(gaps)) if gaps else math.nan
    p99 = float(np.percentile(gaps, 99)) if gaps else math.nan
    e2e_mean = float(np.nanmean([row[3] for row in rows])) if rows else math.nan
    split_mean = float(np.mean(split)) if split else math.nan
    fig = Figure("One run, two TPOTs: each request's mean gap against every gap pooled", "request's output tokens",
                 "gap between tokens (ms)", log_y=True)
    fig.curves.append(Curve("every gap (pooled: vLLM's and SGLang's ITL)", xs_gap, ys_gap, GREY, line=False,
                            symbol="o"))
    fig.curves.append(Curve("each request's mean gap (TPOT here, GuideLLM's ITL)", [row[1] for row in rows],
                            per_request, DECODE, line=False, symbol="s"))
    if rows:
        lo, hi = rows[0][1], rows[-1][1]
        fig.curves.append(Curve(f"mean of the requests' means: {ms(mean_of_means)}", [lo, hi],
                                [mean_of_means] * 2, DECODE, dash=True, symbol=None))
        fig.curves.append(Curve(f"mean of every gap: {ms(pooled)}", [lo, hi], [pooled] * 2, PREFILL, dash=True,
                                symbol=None))
        worst = max(rows, key=lambda row: row[2])
        fig.marks.append(Mark("point", f"{worst[1]} tokens: mean gap {ms(worst[2])}", worst[1], y=worst[2], color=RED))
    multi = sum(k > 1 for _, a in _arrivals(out) for k in a.chunk_tokens)
    longest = rows[-1] if rows else None
    shortest = rows[0] if rows else None
    sentence = (
        f"Same run, same token times, two TPOTs: the mean of each request's own mean gap (this window's TPOT, "
        f"GuideLLM's ITL) is {ms(mean_of_means)}, while the mean over every gap pooled (vLLM's and SGLang's mean "
        f"ITL) is {ms(pooled)}. Pooling counts a request once a gap, so its {longest[1] if longest else 0}-token "
        f"request weighs {(longest[1] - 1) if longest else 0} times where the {shortest[1] if shortest else 0}-token "
        f"one weighs {(shortest[1] - 1) if shortest else 0}; averaging each request first weighs them alike. "
        f"vLLM's own TPOT runs to the stream's end: {ms(e2e_mean)}"
        + (" (each stream here ended with its last token, so it is the per-request mean again)"
           if abs(e2e_mean - mean_of_means) <= 0.005 * mean_of_means else "")
        + f". The tail parts further: the p99 of every gap is "
        f"{ms(p99)}, a pause that a request's mean spreads over its tokens. "
        + (f"Here each streamed chunk carried one token (split over tokens the mean gap stays {ms(split_mean)}); a "
           "server that sends several tokens a chunk makes a per-chunk ITL that many times the split one (vLLM #27485)."
           if not multi else
           f"Here {multi} chunks carried several tokens: split over their tokens the mean gap is {ms(split_mean)}, "
           "where a per-chunk ITL counts each chunk once (vLLM #27485)."))
    header = ["request", "output_tokens", "tpot_per_request_ms", "tpot_to_stream_end_ms", "longest_gap_ms"]
    return Finding(sentence, fig, header, rows)
