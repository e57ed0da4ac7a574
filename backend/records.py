"""Typed records that flow from the engine to every sink (CSV, CLI summary, the window).

Times are milliseconds since the run started, read from one monotonic clock.
"""
from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from enum import Enum
from functools import lru_cache
from operator import attrgetter

from backend.run_info import RunInfo
from backend.summary import Summary


class Phase(str, Enum):
    """What an engine step did: prompt tokens only, decode tokens only, or both (chunked prefill)."""

    PREFILL = "prefill"
    DECODE = "decode"
    MIXED = "mixed"


class RequestStatus(str, Enum):
    WAITING = "waiting"
    PREFILLING = "prefilling"
    DECODING = "decoding"
    FINISHED = "finished"
    REJECTED = "rejected"
    ERROR = "error"


@dataclass(slots=True)
class StepRecord:
    """One engine step: one forward pass of the model over every token scheduled in it."""

    run_id: str
    step: int
    phase: Phase
    num_requests: int          # requests with tokens in this step
    num_prefill_requests: int  # of which prefilling (a whole prompt or a chunk of one)
    num_decode_requests: int   # of which decoding one token
    num_tokens: int            # tokens processed: prefill tokens + decode tokens
    num_prefill_tokens: int
    num_decode_tokens: int
    context_tokens: int        # sum over requests of the context attended to (cache + new tokens)
    max_context_tokens: int
    start_ms: float
    duration_ms: float
    kv_tokens: int             # KV cache tokens in use once the step has written (before finished requests free theirs)
    kv_capacity: int           # KV cache capacity in tokens
    num_waiting: int = 0       # requests arrived but not yet admitted, after the step
    num_running: int = 0       # requests admitted and not finished, after the step
    worker: str = ""           # the engine process that ran it under the disaggregated policy ("prefill-0", "decode-1")
    experts_touched: int = 0   # MoE: distinct experts the step's tokens were routed to, summed over layers (dense: 0)
    weight_bytes: int = 0      # bytes of weights the step read: all of a dense model's; an MoE's shared ones and
                               # its touched experts (0 where not measured: simulated and remote steps)
    # prefix caching (paged layout): num_tokens are the tokens computed; these were found cached instead by the
    # requests admitted in this step, and these cached blocks were evicted to make room for the step
    num_reused_tokens: int = 0
    num_evictions: int = 0
    # speculative decoding (backend/engine/spec/): guesses this step verified (counted in num_decode_tokens, beside
    # one token per decoding request), of them kept, and the proposer's time before the step (a draft model's passes)
    num_proposed_tokens: int = 0
    num_accepted_tokens: int = 0
    draft_ms: float = 0.0

    @property
    def is_verification(self) -> bool:
        """A step that checked proposed tokens (its decodes were short prefills of 1 + guesses each)."""
        return self.num_proposed_tokens > 0

    @classmethod
    def measured(cls, *, run_id: str, step: int, phase: Phase, prefill_tokens: Sequence[int], num_decode: int,
                 contexts: Sequence[int], start_ms: float, duration_ms: float, kv_tokens: int = 0,
                 kv_capacity: int = 0, num_waiting: int = 0, num_running: int = 0, worker: str = "",
                 experts_touched: int = 0, weight_bytes: int = 0, num_reused_tokens: int = 0,
                 num_evictions: int = 0, num_proposed_tokens: int = 0, num_accepted_tokens: int = 0,
                 draft_ms: float = 0.0) -> StepRecord:
        """The record of a step that prefilled one chunk of `prefill_tokens[i]` tokens per prefilling
        request and decoded one token for each of `num_decode` requests (and verified `num_proposed_tokens`
        guesses among them); `contexts` holds every request's context (cache + new tokens). Every producer of
        steps builds them here."""
        num_prefill_tokens = sum(prefill_tokens)
        # positional, in the fields' order: a simulated run builds tens of thousands of these a second
        decode_tokens = num_decode + num_proposed_tokens
        return cls(run_id, step, phase, len(prefill_tokens) + num_decode, len(prefill_tokens), num_decode,
                   num_prefill_tokens + decode_tokens, num_prefill_tokens, decode_tokens, sum(contexts),
                   max(contexts, default=0), start_ms, duration_ms, kv_tokens, kv_capacity, num_waiting,
                   num_running, worker, experts_touched, weight_bytes, num_reused_tokens, num_evictions,
                   num_proposed_tokens, num_accepted_tokens, draft_ms)


@dataclass(slots=True)
class RequestRecord:
    """One request's life; filled in when it finishes (or is rejected)."""

    request_id: int
    status: RequestStatus
    prompt_tokens: int
    output_tokens: int
    arrival_ms: float
    scheduled_ms: float | None = None    # first admitted to a step (end of queueing)
    first_token_ms: float | None = None
    finish_ms: float | None = None
    ttft_ms: float | None = None         # first_token_ms - arrival_ms
    tpot_ms: float | None = None         # mean gap between output tokens after the first
    e2e_ms: float | None = None          # finish_ms - arrival_ms
    queue_ms: float | None = None        # scheduled_ms - arrival_ms
    num_preemptions: int = 0
    finish_reason: str = ""              # "eos", "length", "stop", or why it was rejected / failed
    text: str = ""                       # generated text (empty for synthetic token prompts)
    # The disaggregated policy's split of TTFT: queue_ms + prefill_ms + kv_transfer_ms + first_decode_ms
    prefill_ms: float | None = None      # first prefill step's start to the prompt's KV complete (prefill worker)
    kv_transfer_ms: float | None = None  # prompt's KV complete to its KV written into the decode worker's cache
    kv_bytes: int | None = None          # KV cache bytes handed from the prefill worker to the decode worker
    first_decode_ms: float | None = None # KV in the decode worker's cache to the first token (its next step)
    # where a remote run's token counts come from: "server" (its usage), "tokenizer" (counted here), "estimate"
    prompt_tokens_source: str = ""
    output_tokens_source: str = ""
    cached_prompt_tokens: int | None = None   # prompt tokens found in the KV/prefix cache, not computed (None: unknown)
    # a multi-turn workload's conversation and the request's turn in it (-1 and 0: not part of one; a run
    # folder written before conversations existed reads so)
    conversation_id: int = -1
    turn: int = 0
    # a remote stream's first event, which may carry no text (a chat role-only delta, an empty one): when it came
    # and what it held (backend.results.definitions.FirstChunk); None and "" for local runs and older folders
    first_chunk_ms: float | None = None
    first_chunk: str = ""
    # speculative decoding: per verification step of this request, the guesses proposed and those kept
    # (space-separated, in step order; "" when it never speculated)
    spec_proposed: str = ""
    spec_accepted: str = ""

    @property
    def acceptance_lengths(self) -> list[tuple[int, int]]:
        """(guesses proposed, guesses kept) of each verification step."""
        return list(zip(map(int, self.spec_proposed.split()), map(int, self.spec_accepted.split())))

    @classmethod
    def from_times(cls, *, request_id: int, status: RequestStatus, prompt_tokens: int, output_tokens: int,
                   arrival_ms: float, scheduled_ms: float | None = None, first_token_ms: float | None = None,
                   last_token_ms: float | None = None, finish_ms: float | None = None, num_preemptions: int = 0,
                   finish_reason: str = "", text: str = "",
                   cached_prompt_tokens: int | None = None) -> RequestRecord:
        """The record of a request from its moments; the latencies are derived here, for the engine and
        the remote client alike. TPOT is the mean gap between output tokens after the first:
        (last - first) / (output_tokens - 1)."""
        tpot = None
        if first_token_ms is not None and last_token_ms is not None and output_tokens > 1:
            tpot = (last_token_ms - first_token_ms) / (output_tokens - 1)
        return cls(request_id=request_id, status=status, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
                   arrival_ms=arrival_ms, scheduled_ms=scheduled_ms, first_token_ms=first_token_ms,
                   finish_ms=finish_ms, ttft_ms=_since(first_token_ms, arrival_ms), tpot_ms=tpot,
                   e2e_ms=_since(finish_ms, arrival_ms), queue_ms=_since(scheduled_ms, arrival_ms),
                   num_preemptions=num_preemptions, finish_reason=finish_reason, text=text,
                   cached_prompt_tokens=cached_prompt_tokens)


def _since(moment: float | None, start: float) -> float | None:
    return None if moment is None else moment - start


@dataclass(slots=True)
class TokenRecord:
    """One generated token: when it became available to the client."""

    request_id: int
    index: int        # 0 is the first output token (produced by prefill)
    time_ms: float
    token_id: int = -1


def token_ids_by_request(tokens) -> dict[int, list[int]]:
    """Each request's generated token ids in order, from TokenRecords in any order (a run's, a recorder's):
    what two runs that must decode alike are compared by."""
    out: dict[int, list[int]] = {}
    for t in sorted(tokens, key=lambda t: (t.request_id, t.index)):
        out.setdefault(t.request_id, []).append(t.token_id)
    return out


@lru_cache(maxsize=None)
def record_fields(cls) -> tuple[str, ...]:
    """Column names of a record class, in declaration order (the CSV header)."""
    return tuple(f.name for f in fields(cls))


@lru_cache(maxsize=None)
def _row_getter(cls):
    """One attrgetter per record class: rows are made on the hot path of every step."""
    return attrgetter(*record_fields(cls))


def record_row(record) -> list:
    """A record's values in column order, enums written as their value."""
    return [v.value if isinstance(v, Enum) else v for v in _row_getter(type(record))(record)]


@dataclass(slots=True)
class RecordBatch:
    """What the engine hands to sinks after each step: everything new since the last batch."""

    steps: list[StepRecord] = field(default_factory=list)
    tokens: list[TokenRecord] = field(default_factory=list)
    requests: list[RequestRecord] = field(default_factory=list)   # requests that just finished
    text: dict[int, str] = field(default_factory=dict)            # request_id -> newly decoded text
    scheduled: dict[int, float] = field(default_factory=dict)     # request_id -> when it was first admitted


def merge_batches(batches: list[RecordBatch]) -> RecordBatch:
    """One batch holding several in order (the engine process and the window's worker send fewer, larger ones)."""
    if len(batches) == 1:
        return batches[0]
    merged = RecordBatch()
    for b in batches:
        merged.steps.extend(b.steps)
        merged.tokens.extend(b.tokens)
        merged.requests.extend(b.requests)
        for rid, piece in b.text.items():
            merged.text[rid] = merged.text.get(rid, "") + piece
        merged.scheduled.update(b.scheduled)
    return merged


def new_run_id() -> str:
    """e.g. 20261201-093012-a3f0: when the run started, and four random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


# ---- results the upper layers pass around: a whole run, and figures over repeats ----

@dataclass(slots=True)
class RunData:
    """A whole run in memory: what the window shows and what a folder holds."""

    run_id: str = ""
    config: dict = field(default_factory=dict)
    info: RunInfo = field(default_factory=RunInfo)       # model, device, dtype, versions, the target's own
    steps: list[StepRecord] = field(default_factory=list)
    requests: list[RequestRecord] = field(default_factory=list)
    tokens: list[TokenRecord] = field(default_factory=list)
    summary: Summary = field(default_factory=Summary)


@dataclass(slots=True)
class Interval:
    """One metric over repeats: the mean, its 95% Student's t interval, and the spread."""

    mean: float
    low: float             # mean - half_width (NaN for one value)
    high: float
    half_width: float      # t(0.975, n - 1) * sd / sqrt(n)
    cv: float              # sample sd / mean (NaN when the mean is 0)
    n: int
    values: list[float] = field(default_factory=list)

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high


@dataclass(slots=True)
class RepeatsSummary:
    """Every repeat of one setting, and each figure's interval over them."""

    requested: int                                    # N of --repeats N
    run_ids: list[str] = field(default_factory=list)  # the repeats counted, in order
    folders: list[str] = field(default_factory=list)  # their run folders ([] without --out)
    metrics: dict[str, Interval] = field(default_factory=dict)
    per_repeat: dict[str, list[float]] = field(default_factory=dict)   # each figure by repeat (NaN: none)
    note: str = ""                                    # why fewer than requested were counted

    @property
    def num_done(self) -> int:
        return len(self.run_ids)
