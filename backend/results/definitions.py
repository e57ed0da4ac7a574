"""What TTFT, ITL and TPOT mean in each serving benchmark, computed side by side from one request's arrivals.

The tools disagree (docs/metrics.md cites each):
- ITL by chunk gap: one sample per gap between streamed chunks that carried text, whatever a chunk held
  (vLLM `bench serve`: "the tokens in the same output do not create additional ITL samples"; SGLang
  `bench_serving`, where ITL is "the latency between streaming chunks"). This tool's headline ITL.
- ITL split over tokens: a chunk of k tokens after a gap g gives k samples of g / k (GenAI-Perf divides
  the gap by the chunk's token count, per GuideLLM #1145; vLLM #27485 asks for it). The first chunk's
  extra tokens came with the first token: k0 - 1 samples of 0. So the samples' mean is (last - first) /
  (tokens - 1), as a per-token figure should be.
- ITL as a per-request mean: (last token - first token) / (tokens - 1), one value per request (GuideLLM's
  inter_token_latency_ms, #1145). This is also this tool's headline TPOT, the same formula.
- TPOT as (end-to-end - TTFT) / (tokens - 1): from the first token to the stream's end, not its last
  token (vLLM `bench serve`'s TPOT, and AIPerf's per-request ITL).
- TTFT to the first token: the first chunk that carried text (GenAI-Perf and AIPerf skip empty first
  responses). This tool's headline TTFT.
- TTFT to the first chunk: the first event of any kind, a role-only or empty one included (what
  llama-benchy's README says `vllm bench serve` measures in chat mode; its own "time to first response").

Everything here is pure: an `Arrival` (a request's chunk times and token counts) in, figures out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable

import numpy as np

NAN = float("nan")
MARGIN = 0.05   # a run whose headline p50 moves more than this under another definition is flagged


class FirstChunk(str, Enum):
    """What the stream's first event carried."""

    CONTENT = "content"   # text: the first token came with it
    ROLE = "role"         # a chat delta with only {"role": "assistant"} (vLLM, SGLang, llama.cpp in chat mode)
    EMPTY = "empty"       # no text at all ("" or a null delta)
    UNKNOWN = ""          # not recorded (a local run, an older run folder)


@dataclass(frozen=True, slots=True)
class Definition:
    name: str      # the summary's key stem ("itl_split" -> itl_split_p50_ms)
    label: str     # what the console prints
    formula: str
    used_by: str   # which tools report it under that name


DEFINITIONS = (
    Definition("ttft", "TTFT to first token", "first chunk with text - sent", "phasescope, GenAI-Perf, AIPerf"),
    Definition("ttft_first_chunk", "TTFT to first chunk", "first chunk of any kind - sent",
               "vLLM bench serve (chat, per llama-benchy), llama-benchy's TTFR"),
    Definition("itl", "ITL by chunk gap", "one sample per gap between chunks", "phasescope, vLLM bench serve, SGLang"),
    Definition("itl_split", "ITL split over tokens", "gap / k, k times, for a chunk of k tokens", "GenAI-Perf"),
    Definition("tpot", "TPOT = ITL per-request mean", "(last token - first token) / (tokens - 1)",
               "phasescope's TPOT, GuideLLM's ITL"),
    Definition("tpot_e2e", "TPOT from end-to-end", "(end-to-end - TTFT) / (tokens - 1)",
               "vLLM bench serve's TPOT, AIPerf's ITL"),
)
HEADLINE = {"ttft": "ttft", "itl": "itl", "tpot": "tpot"}   # which definition each headline figure uses


@dataclass(slots=True)
class Arrival:
    """One request's stream as it arrived; times in ms on the client's clock."""

    sent_ms: float
    chunk_ms: list[float] = field(default_factory=list)   # each chunk that carried text, in order
    chunk_tokens: list[int] = field(default_factory=list)  # the tokens each carried (>= 1)
    finish_ms: float | None = None                         # the stream's end ([DONE] or the body's end)
    first_chunk_ms: float | None = None                    # the first event of any kind (None: the first text chunk)
    first_chunk: FirstChunk = FirstChunk.UNKNOWN

    @property
    def num_tokens(self) -> int:
        return sum(self.chunk_tokens)


def ttft_first_token(a: Arrival) -> float | None:
    return a.chunk_ms[0] - a.sent_ms if a.chunk_ms else None


def ttft_first_chunk(a: Arrival) -> float | None:
    if a.first_chunk_ms is not None:
        return a.first_chunk_ms - a.sent_ms
    return ttft_first_token(a)


def itl_chunk_gaps(a: Arrival) -> list[float]:
    return [later - earlier for earlier, later in zip(a.chunk_ms, a.chunk_ms[1:])]


def split_gap(gap: float, k: int) -> list[float]:
    """A gap before a chunk of k tokens as k per-token samples (a chunk of one: the gap itself)."""
    return [gap] if k <= 1 else [gap / k] * k


def itl_token_split(a: Arrival) -> list[float]:
    if not a.chunk_ms:
        return []
    if len(a.chunk_tokens) == sum(a.chunk_tokens):   # a token a chunk (every local run): the gaps themselves
        return itl_chunk_gaps(a)
    out = [0.0] * (max(a.chunk_tokens[0], 1) - 1)   # the first chunk's extra tokens came with the first
    for gap, k in zip(itl_chunk_gaps(a), a.chunk_tokens[1:]):
        out.extend(split_gap(gap, k))
    return out


def itl_request_mean(a: Arrival) -> float | None:
    """(last - first) / (tokens - 1): GuideLLM's ITL, and this tool's TPOT."""
    n = a.num_tokens
    return (a.chunk_ms[-1] - a.chunk_ms[0]) / (n - 1) if a.chunk_ms and n > 1 else None


def tpot_e2e(a: Arrival) -> float | None:
    """(end-to-end - TTFT) / (tokens - 1): vLLM bench serve's TPOT."""
    n = a.num_tokens
    if not a.chunk_ms or n < 2 or a.finish_ms is None:
        return None
    return (a.finish_ms - a.chunk_ms[0]) / (n - 1)


@dataclass(slots=True)
class RequestFigures:
    ttft_ms: float | None
    ttft_first_chunk_ms: float | None
    itl_gaps_ms: list[float]
    itl_split_ms: list[float]
    tpot_ms: float | None        # = the per-request mean ITL
    tpot_e2e_ms: float | None
    num_chunks: int
    num_multi_token_chunks: int


def figures(a: Arrival) -> RequestFigures:
    return RequestFigures(ttft_first_token(a), ttft_first_chunk(a), itl_chunk_gaps(a), itl_token_split(a),
                          itl_request_mean(a), tpot_e2e(a), len(a.chunk_ms), sum(k > 1 for k in a.chunk_tokens))


def chunk_tokens_from_indices(indices: list[int], num_tokens: int | None = None) -> list[int]:
    """Tokens per chunk from each chunk's last token index (a server's running usage count indexes them;
    without it every chunk is one token). `num_tokens`, the request's count, gives the last chunk what
    the indices missed (a final usage event larger than the chunks counted)."""
    n = len(indices)
    if n and indices[0] == 0 and indices[-1] == n - 1:   # strictly rising from 0 to n - 1: one token a chunk
        out = [1] * n
        if num_tokens is not None and num_tokens > n:
            out[-1] += num_tokens - n
        return out
    out, previous = [], -1
    for index in indices:
        out.append(max(index - previous, 1))
        previous = max(index, previous + 1)
    if out and num_tokens is not None and num_tokens > previous + 1:
        out[-1] += num_tokens - previous - 1
    return out


def percentiles(values: Iterable[float]) -> dict[str, float]:
    """Mean, p50, p90 and p99 (numpy's linear interpolation); NaN for no values. The one percentile rule
    for every figure of a run (backend.results.summary uses it too)."""
    data = np.asarray(list(values), dtype=float)
    if data.size == 0:
        return {"mean": math.nan, "p50": math.nan, "p90": math.nan, "p99": math.nan}
    p50, p90, p99 = np.percentile(data, [50, 90, 99])
    return {"mean": float(data.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def first_chunk_extra(k0: int) -> list[float]:
    """The split samples of a first chunk of k0 tokens: its extra tokens came with the first, gaps of 0."""
    return [0.0] * (k0 - 1)


def tpot_e2e_of(first_token_ms: float | None, finish_ms: float | None, num_tokens: int) -> float | None:
    """(end-to-end - TTFT) / (tokens - 1) from a request's moments: tpot_e2e without its chunks."""
    if first_token_ms is None or finish_ms is None or num_tokens < 2:
        return None
    return (finish_ms - first_token_ms) / (num_tokens - 1)


def _sorted_without(values: np.ndarray, removed: list[float]) -> np.ndarray:
    """`values` sorted, less one occurrence of each of `removed` (a multiset difference; all exact floats)."""
    data = np.sort(values)
    if not removed:
        return data
    keep = np.ones(data.size, dtype=bool)
    gone, counts = np.unique(np.asarray(removed, dtype=float), return_counts=True)
    for value, count in zip(gone, counts):
        at = int(np.searchsorted(data, value, side="left"))
        keep[at:at + int(count)] = False
    return data[keep]


@dataclass(slots=True)
class DefinitionTotals:
    """The other definitions pooled over a run as its chunks stream in, without keeping any request's chunks
    (a long local run passes millions of tokens through backend.results.summary.RunAccumulator).

    The split ITL is the chunk gaps (which the accumulator keeps for the headline ITL) corrected where a chunk
    carried k != 1 tokens: its gap taken out, its k samples of gap / k put in (`split_gap`), and a first chunk's
    extra tokens put in as gaps of 0 (`first_chunk_extra`); a request whose count at its end exceeds its
    chunks' indices gives the rest to its last chunk. One token a chunk, as every local run streams, needs no
    correction at all."""

    ttft_first_chunk: list[float] = field(default_factory=list)
    tpot_e2e: list[float] = field(default_factory=list)
    split_added: list[float] = field(default_factory=list)
    split_removed: list[float] = field(default_factory=list)
    num_chunks: int = 0
    num_multi_token_chunks: int = 0
    first_chunks: dict[str, int] = field(default_factory=dict)

    def chunk(self, gap: float | None, k: int) -> None:
        """A chunk of k != 1 tokens after `gap` (None: the request's first chunk)."""
        self.num_multi_token_chunks += k > 1
        if gap is None:
            self.split_added.extend(first_chunk_extra(k))
        else:
            self.split_removed.append(gap)
            self.split_added.extend(split_gap(gap, k))

    def rest(self, gap: float | None, k: int, extra: int) -> None:
        """A request ended with `extra` more tokens than its chunks indexed: its last chunk (of k tokens, after
        `gap`) carried them."""
        if gap is None:   # one chunk: its extra tokens came with the first
            self.split_added.extend([0.0] * extra)
        else:
            self.split_removed.extend(split_gap(gap, k))
            self.split_added.extend(split_gap(gap, k + extra))
        self.num_multi_token_chunks += k == 1

    def finished(self, sent_ms: float, first_chunk_ms: float | None, first_token_ms: float | None,
                 finish_ms: float | None, num_tokens: int, first_chunk: FirstChunk) -> None:
        """A finished request's per-request figures, from its moments."""
        first = first_chunk_ms if first_chunk_ms is not None else first_token_ms
        if first is not None:
            self.ttft_first_chunk.append(first - sent_ms)
        if (tpot := tpot_e2e_of(first_token_ms, finish_ms, num_tokens)) is not None:
            self.tpot_e2e.append(tpot)
        if first_chunk is not FirstChunk.UNKNOWN:
            self.first_chunks[first_chunk.value] = self.first_chunks.get(first_chunk.value, 0) + 1

    def summary(self, gaps) -> dict[str, float | int | str]:
        """The summary's figures; `gaps` are every chunk gap of the run (the headline ITL's samples)."""
        split = _sorted_without(np.asarray(gaps, dtype=float), self.split_removed)
        if self.split_added:
            split = np.concatenate([split, np.asarray(self.split_added, dtype=float)])
        out: dict[str, float | int | str] = {}
        for name, values in (("ttft_first_chunk", self.ttft_first_chunk), ("itl_split", split),
                             ("tpot_e2e", self.tpot_e2e)):
            for stat, value in percentiles(values).items():
                out[f"{name}_{stat}_ms"] = value
        out["num_chunks"] = self.num_chunks
        out["num_multi_token_chunks"] = self.num_multi_token_chunks
        out["num_first_chunk_role"] = self.first_chunks.get(FirstChunk.ROLE.value, 0)
        out["num_first_chunk_empty"] = self.first_chunks.get(FirstChunk.EMPTY.value, 0)
        out.update({f"{headline}_definition": name for headline, name in HEADLINE.items()})
        return out


def differences(s) -> list[str]:
    """Where another definition moves a headline p50 by more than MARGIN, and why; [] when none does.
    `s` is a backend.summary.Summary."""
    out = []
    checks = (("ITL p50", s.itl_p50_ms, "split over tokens", s.itl_split_p50_ms,
               f"{s.num_multi_token_chunks or 0} of {s.num_chunks or 0} chunks carried several tokens"),
              ("TTFT p50", s.ttft_p50_ms, "to the first chunk", s.ttft_first_chunk_p50_ms,
               f"{(s.num_first_chunk_role or 0) + (s.num_first_chunk_empty or 0)} requests' first chunk carried "
               f"no text ({s.num_first_chunk_role or 0} role-only, {s.num_first_chunk_empty or 0} empty)"),
              ("TPOT p50", s.tpot_p50_ms, "from end-to-end", s.tpot_e2e_p50_ms,
               "the stream ended later than its last token"))
    for label, headline, other_label, other, why in checks:
        if headline is None or other is None or not math.isfinite(headline) or not math.isfinite(other):
            continue
        base = max(abs(headline), 1e-9)
        if abs(other - headline) / base > MARGIN:
            out.append(f"{label} {headline:,.2f} ms here, {other:,.2f} ms {other_label} "
                       f"({100 * (other - headline) / base:+.0f}%, > {100 * MARGIN:g}%): {why}")
    return out


def definition_rows(s) -> list[tuple[str, ...]]:
    """The latencies of a summary under every definition, for a table: label, mean, p50, p90, p99, who uses it.
    The headline figures are marked; a figure the run did not record reads "n/a"."""
    def cell(v) -> str:
        return "n/a" if v is None or not math.isfinite(v) else f"{v:,.2f}"
    rows = [("definition (ms)", "mean", "p50", "p90", "p99", "used by")]
    headlines = set(HEADLINE.values())
    for d in DEFINITIONS:
        values = [getattr(s, f"{d.name}_{stat}_ms", None) for stat in ("mean", "p50", "p90", "p99")]
        rows.append((d.label + (" [headline]" if d.name in headlines else ""), *map(cell, values), d.used_by))
    return rows
