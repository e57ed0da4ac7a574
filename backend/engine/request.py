"""One request's state as the scheduler and the engine move it through its life.

The token model is the unified one of vLLM: a request is a sequence `all_ids` (prompt, then
the outputs sampled so far) of which the first `num_computed` tokens have their keys and
values in the KV cache. A step gives a request k tokens to compute; once every token of the
sequence is computed the step samples one new token, which is appended and is itself the one
uncomputed token for the next step. So prefill (a whole prompt, or a chunk of it), decode and
the recompute of a preempted request are all the same operation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from backend.records import RequestRecord, RequestStatus

if TYPE_CHECKING:
    from backend.workload.arrivals import RequestSpec

_DONE = frozenset({RequestStatus.FINISHED, RequestStatus.REJECTED, RequestStatus.ERROR})
_DECODING = RequestStatus.DECODING


@dataclass(slots=True)
class Request:
    request_id: int
    prompt_ids: list[int]
    max_new_tokens: int
    arrival_ms: float
    stop_ids: frozenset[int] = frozenset()
    ignore_eos: bool = False
    prompt_text: str = ""
    status: RequestStatus = RequestStatus.WAITING
    output_ids: list[int] = field(default_factory=list)
    num_computed: int = 0                  # tokens whose K/V are in the cache
    slot: int | None = None                # KV cache slot while admitted
    scheduled_ms: float | None = None      # start of the first step it took part in
    first_token_ms: float | None = None
    finish_ms: float | None = None
    token_times_ms: list[float] = field(default_factory=list)   # one per output token
    num_preemptions: int = 0
    finish_reason: str = ""
    conversation_id: int = -1              # the workload's conversation and turn (-1, 0: not part of one)
    turn: int = 0
    # the paged layout (backend/engine/kv_blocks.py): the blocks holding this request's K/V in token
    # order, the chained hashes of its full computed blocks, and the prompt tokens its prefill found cached
    block_ids: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)
    num_cached_tokens: int = 0
    # speculative decoding (backend/engine/spec/): the guesses the next step verifies (a proposer sets them,
    # the scheduler trims them to what fits), and per verification the guesses proposed and kept
    spec_ids: list[int] = field(default_factory=list)
    spec_proposed: list[int] = field(default_factory=list)
    spec_accepted: list[int] = field(default_factory=list)

    @classmethod
    def from_spec(cls, spec: RequestSpec, stop_ids: frozenset[int] = frozenset(), ignore_eos: bool = False) -> Request:
        """The engine's state for a request a source drew."""
        return cls(spec.request_id, spec.prompt_ids, spec.max_new_tokens, spec.arrival_ms,
                   stop_ids=stop_ids, ignore_eos=ignore_eos, prompt_text=spec.prompt_text,
                   conversation_id=spec.conversation_id, turn=spec.turn)

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def num_tokens(self) -> int:
        """len(all_ids), without building the list."""
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def num_uncomputed(self) -> int:
        return self.num_tokens - self.num_computed

    @property
    def is_finished(self) -> bool:
        """Done for good: finished, rejected or failed."""
        return self.status in _DONE

    def append_token(self, token_id: int, now_ms: float) -> bool:
        """Record one sampled token; finish the request on a stop token or at its length. True when it
        finished (every token of every request passes here: the simulator's hot path)."""
        output = self.output_ids
        output.append(token_id)
        self.token_times_ms.append(now_ms)
        if self.first_token_ms is None:
            self.first_token_ms = now_ms
        if token_id in self.stop_ids and not self.ignore_eos:
            self.finish(now_ms, "eos")
            return True
        if len(output) >= self.max_new_tokens:
            self.finish(now_ms, "length")
            return True
        self.status = _DECODING
        return False

    def finish(self, now_ms: float, reason: str, status: RequestStatus = RequestStatus.FINISHED) -> None:
        self.status = status
        self.finish_reason = reason
        self.finish_ms = now_ms

    def to_record(self, text: str = "") -> RequestRecord:
        record = RequestRecord.from_times(
            request_id=self.request_id, status=self.status, prompt_tokens=len(self.prompt_ids),
            output_tokens=len(self.output_ids), arrival_ms=self.arrival_ms, scheduled_ms=self.scheduled_ms,
            first_token_ms=self.first_token_ms,
            last_token_ms=self.token_times_ms[-1] if self.token_times_ms else None, finish_ms=self.finish_ms,
            num_preemptions=self.num_preemptions, finish_reason=self.finish_reason, text=text,
            cached_prompt_tokens=self.num_cached_tokens)
        record.conversation_id, record.turn = self.conversation_id, self.turn
        if self.spec_proposed:
            record.spec_proposed = " ".join(map(str, self.spec_proposed))
            record.spec_accepted = " ".join(map(str, self.spec_accepted))
        return record


def rejection(prompt_tokens: int, new_tokens: int, max_len: int, kv_capacity: int, cache: str = "the cache") -> str:
    """Why a request can never run ('' when it can): the one rule of the scheduler and of both
    disaggregated policies (whose decode side names its own cache)."""
    if prompt_tokens == 0:
        return "empty prompt"
    if new_tokens < 1:
        return f"asks for {new_tokens} output tokens; at least 1 is needed"
    if prompt_tokens + new_tokens > max_len:
        return f"prompt of {prompt_tokens} tokens + {new_tokens} output tokens exceeds the {max_len}-token slot"
    if prompt_tokens + new_tokens > kv_capacity:
        return f"needs {prompt_tokens + new_tokens} KV tokens, {cache} holds {kv_capacity}"
    return ""


def rejected_record(spec: RequestSpec, reason: str) -> RequestRecord:
    """The record of a request refused on arrival (by `rejection`)."""
    record = RequestRecord.from_times(request_id=spec.request_id, status=RequestStatus.REJECTED,
                                      prompt_tokens=len(spec.prompt_ids), output_tokens=0, arrival_ms=spec.arrival_ms,
                                      finish_reason=reason)
    record.conversation_id, record.turn = spec.conversation_id, spec.turn
    return record
