"""Typed records that flow from the engine to every sink (CSV, CLI summary, the window).

Times are milliseconds since the run started, read from one monotonic clock.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum
from functools import lru_cache
from operator import attrgetter


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


@dataclass(slots=True)
class TokenRecord:
    """One generated token: when it became available to the client."""

    request_id: int
    index: int        # 0 is the first output token (produced by prefill)
    time_ms: float
    token_id: int = -1


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
