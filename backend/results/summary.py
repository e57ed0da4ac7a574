"""Per-run summaries of the step, request and token records: a Summary (backend.summary; summary.csv).

Latency figures (TTFT, TPOT, end-to-end, queue) are over finished requests; inter-token
latencies are the gaps between consecutive tokens of each request, from the token records.
Phase rates come from the step records: prefill tokens/s is the prompt tokens of prefill-only
steps over the time of those steps, and likewise for decode; mixed steps (chunked prefill) hold
both kinds of token in one pass and cannot be split, so they count in neither rate. The same
steps' sums that a roofline needs (steps, tokens, context tokens, attention pairs, logit rows)
are kept per phase, so a summary alone gives each phase's FLOPs and bytes. A figure with no
data behind it is NaN, never a misleading zero.
"""
from __future__ import annotations

import math
from array import array
from collections import defaultdict
from typing import Iterable

import numpy as np

from backend.records import Phase, RecordBatch, RequestRecord, RequestStatus, StepRecord, TokenRecord
from backend.results.definitions import (Arrival, DefinitionTotals, FirstChunk, chunk_tokens_from_indices, differences,
                                         percentiles)
from backend.results.spec_figures import spec_figures
from backend.roofline.cost import PhaseTotals
from backend.summary import Summary

NAN = float("nan")


def inter_token_latencies(tokens: Iterable[TokenRecord]) -> list[float]:
    """Gaps between consecutive output tokens of each request, in ms."""
    times: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for token in tokens:
        times[token.request_id].append((token.index, token.time_ms))
    gaps: list[float] = []
    for series in times.values():
        series.sort()
        gaps.extend(later[1] - earlier[1] for earlier, later in zip(series, series[1:]))
    return gaps


class RunAccumulator:
    """Everything a summary needs, gathered as the records stream in.

    A long run keeps no step or token objects for its summary: per-phase sums, the run's time
    span, the inter-token gaps as one float array, and the request records (one per request).
    """

    def __init__(self) -> None:
        self.num_steps = 0
        self.phase_ms = {phase: 0.0 for phase in Phase}
        self.prefill_tokens = 0   # in prefill-only steps
        self.decode_tokens = 0    # in decode-only steps
        self.mixed_prefill_tokens = 0
        self.mixed_decode_tokens = 0
        # what the decode-only steps read of the weights (where measured) and, for an MoE, the experts touched
        self.decode_weight_bytes = 0
        self.decode_experts_touched = 0
        self.decode_steps_read = 0
        # what the roofline needs of the prefill-only and decode-only steps (backend.roofline.cost.phase_roofline)
        self.roofline = {Phase.PREFILL: PhaseTotals(), Phase.DECODE: PhaseTotals()}
        self.first_ms = math.inf
        self.last_ms = -math.inf
        self.requests: list[RequestRecord] = []
        self.reused_tokens = 0
        self.evictions = 0
        self.draft_ms = 0.0   # speculation: the proposer's time before the steps
        # whether the run cached prefixes (its config says; None: figures shown only if the records hold some)
        self.prefix_caching: bool | None = None
        self.prefix_ideal: dict[str, float] = {}   # backend.results.prefix_ceiling, set by the target
        self.gaps = array("d")
        # each request in flight: its last chunk's (time, token index, gap before it, tokens, chunks so far)
        self._last_token: dict[int, tuple[float, int, float | None, int, int]] = {}
        self.definitions = DefinitionTotals()   # the other tools' definitions (backend.results.definitions)

    def add(self, batch: RecordBatch) -> None:
        if batch.steps:
            self.add_steps(batch.steps)
        if batch.tokens:
            self._add_tokens(batch.tokens)
        if batch.requests:
            self.add_requests(batch.requests)

    def _add_tokens(self, tokens: list[TokenRecord]) -> None:
        """Each token record's gap since its request's previous one; every token of a run passes here once.
        A remote stream's record is a chunk, at its last token's index: a jump in the index is a chunk of
        several tokens, which the other definitions count (one token a record, as local runs stream, costs
        them nothing)."""
        last_token, append, definitions = self._last_token, self.gaps.append, self.definitions
        latest = self.last_ms
        for token in tokens:
            rid, time_ms, index = token.request_id, token.time_ms, token.index
            last = last_token.get(rid)
            if last is not None:
                gap = time_ms - last[0]
                append(gap)
                k = index - last[1]
                if k != 1:
                    definitions.chunk(gap, k)
                last_token[rid] = (time_ms, index, gap, k, last[4] + 1)
            else:
                if index:
                    definitions.chunk(None, index + 1)
                last_token[rid] = (time_ms, index, None, index + 1, 1)
            if time_ms > latest:
                latest = time_ms
        self.last_ms = latest

    def add_steps(self, steps: Iterable[StepRecord]) -> None:
        for s in steps:
            self.num_steps += 1
            self.phase_ms[s.phase] += s.duration_ms
            if s.phase is Phase.PREFILL:
                self.prefill_tokens += s.num_prefill_tokens
                self.roofline[Phase.PREFILL].add_step(s.num_prefill_requests, s.num_prefill_tokens, s.context_tokens,
                                                      s.duration_ms)
            elif s.phase is Phase.DECODE:
                self.decode_tokens += s.num_decode_tokens
                if s.weight_bytes:
                    self.decode_weight_bytes += s.weight_bytes
                    self.decode_experts_touched += s.experts_touched
                    self.decode_steps_read += 1
                self.roofline[Phase.DECODE].add_step(s.num_decode_requests, s.num_decode_tokens, s.context_tokens,
                                                     s.duration_ms)
            else:   # a mixed step's time is split between the phases by its tokens (backend.results.cost)
                self.mixed_prefill_tokens += s.num_prefill_tokens
                self.mixed_decode_tokens += s.num_decode_tokens
            if s.draft_ms:
                self.draft_ms += s.draft_ms
            if s.num_reused_tokens or s.num_evictions:
                self.reused_tokens += s.num_reused_tokens
                self.evictions += s.num_evictions
            self.first_ms = min(self.first_ms, s.start_ms)
            self.last_ms = max(self.last_ms, s.start_ms + s.duration_ms)

    def add_requests(self, requests: Iterable[RequestRecord]) -> None:
        for r in requests:
            self.requests.append(r)
            last = self._last_token.pop(r.request_id, None)
            if last is not None:
                self.definitions.num_chunks += last[4]
                if r.status is RequestStatus.FINISHED and r.output_tokens > last[1] + 1:
                    self.definitions.rest(last[2], last[3], r.output_tokens - last[1] - 1)
            if r.status is RequestStatus.FINISHED:
                self.definitions.finished(r.arrival_ms, r.first_chunk_ms, r.first_token_ms, r.finish_ms,
                                          r.output_tokens, _first_chunk(r.first_chunk))
            self.first_ms = min(self.first_ms, r.arrival_ms)
            if r.finish_ms is not None:
                self.last_ms = max(self.last_ms, r.finish_ms)

    def summary(self, slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None) -> Summary:
        requests = self.requests
        finished = [r for r in requests if r.status is RequestStatus.FINISHED]
        served = [r for r in requests if r.status is not RequestStatus.REJECTED]
        duration_s = max(0.0, self.last_ms - self.first_ms) / 1000.0 if self.last_ms > -math.inf else 0.0
        output_tokens = sum(r.output_tokens for r in served)
        out: dict[str, float] = {
            "num_requests": len(requests),
            "num_finished": len(finished),
            "num_rejected": sum(r.status is RequestStatus.REJECTED for r in requests),
            "num_errors": sum(r.status is RequestStatus.ERROR for r in requests),
            "num_preemptions": sum(r.num_preemptions for r in requests),
            "num_steps": self.num_steps,
            "duration_s": duration_s,
            "requests_per_s": _ratio(len(finished), duration_s),
            "output_tokens_per_s": _ratio(output_tokens, duration_s),
            # a prompt counts once it was processed, i.e. once its request produced a token
            "total_tokens_per_s": _ratio(output_tokens + sum(r.prompt_tokens for r in served if r.output_tokens),
                                         duration_s),
        }
        latencies = {
            "ttft": [r.ttft_ms for r in finished if r.ttft_ms is not None],
            "tpot": [r.tpot_ms for r in finished if r.tpot_ms is not None],
            "itl": self.gaps,
            "e2e": [r.e2e_ms for r in finished if r.e2e_ms is not None],
            "queue": [r.queue_ms for r in finished if r.queue_ms is not None],
        }
        for name, values in latencies.items():
            for stat, value in percentiles(values).items():
                out[f"{name}_{stat}_ms"] = value
        out.update(self.definitions.summary(self.gaps))

        phase_ms = self.phase_ms
        out["prefill_time_ms"] = phase_ms[Phase.PREFILL]
        out["decode_time_ms"] = phase_ms[Phase.DECODE]
        out["mixed_time_ms"] = phase_ms[Phase.MIXED]
        out["mixed_prefill_tokens"] = self.mixed_prefill_tokens
        out["mixed_decode_tokens"] = self.mixed_decode_tokens
        out["num_input_tokens"] = sum(r.prompt_tokens for r in served if r.output_tokens)
        out["num_output_tokens"] = output_tokens
        out["prefill_tokens_per_s"] = _ratio(self.prefill_tokens, phase_ms[Phase.PREFILL] / 1000.0)
        out["decode_tokens_per_s"] = _ratio(self.decode_tokens, phase_ms[Phase.DECODE] / 1000.0)
        # Per-token decode time over per-token prefill time: how much dearer a decoded token is.
        out["decode_prefill_cost_ratio"] = _ratio(out["prefill_tokens_per_s"], out["decode_tokens_per_s"])
        # the weights a decode step read and the experts it touched (summed over layers), means over the
        # decode-only steps that measured them (NaN for simulated and remote runs)
        read = self.decode_steps_read
        out["decode_weight_bytes_mean"] = self.decode_weight_bytes / read if read else NAN
        out["decode_experts_touched_mean"] = self.decode_experts_touched / read if read else NAN
        timed = [r for r in finished if r.first_token_ms is not None and r.finish_ms is not None]
        for phase, totals in self.roofline.items():
            out.update(totals.to_summary(phase.value))
        out["decode_share"] = _ratio(sum(r.finish_ms - r.first_token_ms for r in timed),
                                     sum(r.finish_ms - r.arrival_ms for r in timed))

        # the engine's own prefix cache (local and simulated runs); a remote run's cached tokens are the
        # server's, summarized beside its counters (backend/targets/remote/prefix_cache.py)
        if self.prefix_caching or (self.prefix_caching is None and (self.reused_tokens or self.evictions)):
            out.update(self._prefix_figures())
        out.update(self.prefix_ideal)
        out.update(spec_figures(requests, self.draft_ms, sum(phase_ms.values())))

        if slo_ttft_ms is not None or slo_tpot_ms is not None:
            good = [r for r in finished if _meets(r, slo_ttft_ms, slo_tpot_ms)]
            out["slo_ttft_ms"] = NAN if slo_ttft_ms is None else slo_ttft_ms
            out["slo_tpot_ms"] = NAN if slo_tpot_ms is None else slo_tpot_ms
            out["slo_attainment"] = _ratio(len(good), len(finished))
            out["goodput_requests_per_s"] = _ratio(len(good), duration_s)
        summary = Summary.from_json(out)
        summary.definitions_differ = 1 if differences(summary) else 0
        return summary


    def _prefix_figures(self) -> dict[str, float]:
        """The prefix cache's figures. The time saved is an estimate: the reused tokens at this run's mean
        prefill time per computed token (prefill-only steps, and mixed steps' prefill share by tokens),
        though a reused token would have cost less than the late tokens of a long prompt (less attention)."""
        admitted = [r for r in self.requests if r.scheduled_ms is not None]
        hit_tokens = sum(r.cached_prompt_tokens or 0 for r in admitted)
        mixed_tokens = self.mixed_prefill_tokens + self.mixed_decode_tokens
        mixed_prefill_ms = self.phase_ms[Phase.MIXED] * self.mixed_prefill_tokens / mixed_tokens if mixed_tokens else 0.0
        per_token_ms = _ratio(self.phase_ms[Phase.PREFILL] + mixed_prefill_ms,
                              self.prefill_tokens + self.mixed_prefill_tokens)
        return {"prefix_hit_tokens": hit_tokens,
                "prefix_hit_rate": _ratio(hit_tokens, sum(r.prompt_tokens for r in admitted)),
                "prefix_request_hit_rate": _ratio(sum((r.cached_prompt_tokens or 0) > 0 for r in admitted), len(admitted)),
                "reused_tokens": self.reused_tokens,
                "prefill_saved_ms": self.reused_tokens * per_token_ms if self.reused_tokens else 0.0,
                "num_evictions": self.evictions}


def summarize(steps: list[StepRecord], requests: list[RequestRecord], tokens: list[TokenRecord],
              slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None) -> Summary:
    """The summary of records held in memory (tokens in any order)."""
    acc = RunAccumulator()
    acc.add_steps(steps)
    acc._add_tokens(sorted(tokens, key=lambda t: (t.request_id, t.index)))
    acc.add_requests(requests)
    return acc.summary(slo_ttft_ms, slo_tpot_ms)


def arrival_of(r: RequestRecord, chunks: list[tuple[int, float]]) -> Arrival:
    """A finished request's arrivals from its record and its chunks' (token index, time): tokens per chunk
    from the indices (a server's running usage count), the request's count giving the last chunk the rest."""
    return Arrival(r.arrival_ms, [t for _, t in chunks],
                   chunk_tokens_from_indices([i for i, _ in chunks], r.output_tokens), r.finish_ms,
                   r.first_chunk_ms, _first_chunk(r.first_chunk))


def _first_chunk(value: str) -> FirstChunk:
    try:
        return FirstChunk(value)
    except ValueError:   # a kind a later version wrote
        return FirstChunk.UNKNOWN


def _meets(r: RequestRecord, slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> bool:
    if slo_ttft_ms is not None and (r.ttft_ms is None or r.ttft_ms > slo_ttft_ms):
        return False
    # A one-token answer has no TPOT: nothing to be late for.
    return slo_tpot_ms is None or r.tpot_ms is None or r.tpot_ms <= slo_tpot_ms


def _ratio(numerator: float, denominator: float) -> float:
    if denominator <= 0 or math.isnan(denominator) or math.isnan(numerator):
        return NAN
    return numerator / denominator
