"""The status bar's line when a run ends: what it did, in the words of its kind.

A sweep says how many points it measured and its headline (a batch sweep its crossover, a
prompt-length sweep its best prefill rate, a load sweep its best goodput or split), never the
request count of a plain run: a sweep's own summary has no requests, and "Finished: 0 requests,
0.0 output tokens/s" read as if nothing had happened. No Qt here: the runs controller shows it.
"""
from __future__ import annotations

from backend.config import SweepKind

SWEEP_NAMES = {SweepKind.BATCH: "Batch sweep", SweepKind.PROMPT: "Prompt-length sweep",
               SweepKind.PRECISION: "Precision sweep", SweepKind.RATE: "Rate sweep",
               SweepKind.CONCURRENCY: "Concurrency sweep", SweepKind.PD_RATIO: "Prefill:decode split sweep",
               SweepKind.DEPTH: "Depth sweep"}
LOAD_UNITS = {SweepKind.RATE: "arrivals/s", SweepKind.CONCURRENCY: "users"}


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def sweep_headline(s) -> str:
    """The one finding of a sweep's summary, in words ("" when it has none)."""
    kind = SweepKind(s.kind)
    if kind == SweepKind.BATCH:
        crossover = s.crossover.measured if s.crossover is not None else None
        parts = [f"crossover near batch {crossover}" if crossover is not None
                 else "no crossover: decode stays memory-bound" + (f" up to batch {s.largest_fit}"
                                                                   if s.largest_fit else "")]
        predicted = s.crossover.predicted if s.crossover is not None else None
        if predicted is not None:
            parts.append(f"the profile predicts {predicted}")
        if s.best_tokens_per_s:
            parts.append(f"best {s.best_tokens_per_s:,.0f} decode tokens/s at batch {s.best_at}")
        return ", ".join(parts)
    if kind == SweepKind.PROMPT:
        if s.best_tokens_per_s:
            return f"best {s.best_tokens_per_s:,.0f} prefill tokens/s at {s.best_at} prompt tokens"
        return ""
    if kind in LOAD_UNITS:
        if s.best_goodput_at is not None and s.best_goodput_requests_per_s is not None:
            return (f"best goodput {s.best_goodput_requests_per_s:.2f} req/s at {s.best_goodput_at:g} "
                    f"{LOAD_UNITS[kind]}")
        return "no goodput: set a TTFT or TPOT objective" if s.slo_ttft_ms is None and s.slo_tpot_ms is None else \
            "no point met the objectives"
    if kind == SweepKind.PRECISION and s.precision:
        name, gain = max(s.precision.items(), key=lambda item: item[1].tpot_speedup or 0)
        return f"{name} decodes {gain.tpot_speedup:.2f}× as fast as the first" if gain.tpot_speedup else ""
    if kind == SweepKind.PD_RATIO:
        return f"best split {s.best_split}" if s.best_split else ""
    if kind == SweepKind.DEPTH:   # whether a prefix cache served any prompt: the figures' own warning
        hits = (s.server_prefix_hits or 0) + (s.client_cached_prompt_tokens or 0)
        return "WARNING: a prefix cache served part of the prompts" if hits else "no prefix-cache hits"
    return ""


def sweep_finished_text(s, stopped: bool, notes: list[str] = ()) -> str:
    """e.g. "Batch sweep finished: 6 points, crossover near batch 12, the profile predicts 33, ..."."""
    kind = SweepKind(s.kind)
    count = s.num_points or 0
    what = _count(count, "precision") + " measured" if kind == SweepKind.PRECISION else _count(count, "point")
    headline = sweep_headline(s) if count else ""
    text = f"{SWEEP_NAMES[kind]} {'stopped' if stopped else 'finished'}: {what}" + (f", {headline}" if headline else "")
    return text + "".join(f"; {note}" for note in [s.note, *notes] if note)


def run_finished_text(result, notes: list[str] = (), warnings: list[str] = ()) -> str:
    """The line for any RunFinished that did not fail (repeats are said by the caller)."""
    s = result.summary
    if s.kind is not None:
        return sweep_finished_text(s, result.stopped, notes)
    if result.stopped:
        return (f"Stopped: {s.num_finished or 0} of {s.num_requests or 0} "
                "requests finished; the records so far are kept")
    return (f"Finished: {_count(s.num_finished or 0, 'request')}, {s.output_tokens_per_s or 0:,.1f} output tokens/s"
            + "".join(f"; {note}" for note in notes) + "".join(f"; {w}" for w in warnings))
