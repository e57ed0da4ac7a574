"""Which requests run in the next engine step, and how many tokens each: plain Python, no tensors.

Policies
  * static: when nothing runs, take up to `max_batch` waiting requests whose full reservation
    (prompt + max_new_tokens each) fits the KV cache, prefill them in one step, then decode the
    batch until every one of them has finished. Finished slots sit idle until the batch is done
    (the pre-Orca way). A reserved batch never outgrows the cache, so static never preempts.
  * continuous: iteration-level scheduling. Waiting requests are admitted first come, first
    served while a slot is free and the cache has room for the whole prompt, with one token of
    headroom per running request for the decode that follows. As in vLLM v0, a step with new
    admissions is a prefill-only step (every admitted prompt whole) and the running requests'
    decode waits for the next step; otherwise the step decodes everyone running. This keeps
    faithful the effect chunked prefill exists to cure: a long prompt stalls every decode.
  * chunked: each step has a budget of `chunk_tokens` tokens. Decodes go first (one token
    each; decodes beyond the budget wait), then partial prefills continue oldest first, then
    new requests are admitted with the budget left, prompts split into chunks. A step that
    holds both prefill chunks and decodes is MIXED.

KV cache accounting: the cache holds `num_computed` tokens of every running request. When the
decodes of a step would overflow it, the newest running request is preempted (its cache
dropped, `num_computed` reset) and put back at the front of the queue to be recomputed later.
A request that can never fit (its prompt + max_new_tokens exceed a slot or the whole cache) is
rejected when it is added, with the reason; every other request eventually finishes.

Under the paged layout (`kv_layout = "paged"`, backend/engine/paged_scheduler.py) the same policies
count blocks of `block_size` tokens instead of tokens, and with prefix caching a request starts
after its longest cached prefix; `scheduler_for(config)` there builds the one the config asks for.

Between `schedule()` and `update()` a ScheduledChunk describes exactly what the runner must
compute: `token_ids` at positions `start ...`, and whether the step samples a token for it.

Speculative decoding (backend/engine/spec/): a decoding request may carry guesses (`spec_ids`, set by
a proposer before the step). Its decode then computes 1 + len(spec_ids) tokens, counted against the
step's budget and the cache like any others; guesses that do not fit are dropped, never a request
preempted for them. update() keeps the guesses the runner accepted (`SchedulerOutput.accepted`) and
the one token the step sampled after them.
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from operator import attrgetter

from backend.engine.kv_blocks import check_block_size
from backend.errors import InputError
from backend.records import Phase, RequestStatus
from backend.engine.request import Request, rejection

POLICIES = ("static", "continuous", "chunked")
KV_LAYOUTS = ("paged", "slots")
_num_computed = attrgetter("num_computed")
_DECODING = RequestStatus.DECODING


@dataclass(slots=True)
class SchedulerConfig:
    policy: str                # static | continuous | chunked
    max_batch: int             # requests running at once (= KV cache slots)
    kv_capacity: int           # KV cache tokens over all slots
    max_len: int               # longest sequence one slot holds (prompt + max_new_tokens)
    chunk_tokens: int = 512    # per-step token budget under the chunked policy
    kv_layout: str = "slots"   # slots: a request's whole sequence in its slot | paged: blocks, taken as tokens arrive
    block_size: int = 16       # paged: tokens a block holds (a power of two)
    prefix_caching: bool = False   # paged: full blocks kept and reused by later requests with the same prefix

    @property
    def num_blocks(self) -> int:
        """Paged: the blocks the cache holds (kv_capacity rounded down to whole blocks)."""
        return self.kv_capacity // self.block_size

    def validate(self) -> None:
        if self.policy not in POLICIES:
            raise InputError(f"policy: unknown policy '{self.policy}' (choose one of {', '.join(POLICIES)})")
        for name, value in (("max_batch", self.max_batch), ("kv_capacity", self.kv_capacity),
                            ("max_len", self.max_len), ("chunk_tokens", self.chunk_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{name}: must be a whole number of at least 1, got {value!r}")
        if self.kv_layout not in KV_LAYOUTS:
            raise InputError(f"--kv-layout: unknown layout '{self.kv_layout}' (choose one of {', '.join(KV_LAYOUTS)})")
        if self.kv_layout == "paged":
            validate_paged(self.block_size, self.max_len, self.kv_capacity, self.max_batch)


def validate_paged(block_size: int, max_len: int, kv_capacity: int, max_batch: int) -> None:
    """The paged layout's one-line checks: the block size, and a cache of at least one block per request.
    (A block longer than this run's sequences is one partial block each; the model's context bounds the
    block size, checked where the model is known: check_block_size's max_len.)"""
    check_block_size(block_size)
    if kv_capacity // block_size < max_batch:
        raise InputError(f"the KV cache of {kv_capacity} tokens holds {kv_capacity // block_size} blocks of "
                         f"{block_size} tokens, fewer than one per request ({max_batch} at once): "
                         f"raise --kv-tokens or lower --max-batch or --kv-block-size")


@dataclass(slots=True)
class ScheduledChunk:
    """Tokens `start .. start + num_tokens` of one request, to be computed in this step."""

    request: Request
    num_tokens: int
    start: int = field(init=False)       # tokens already in the request's cache slot
    samples: bool = field(init=False)    # the chunk completes the sequence: the step samples a token

    def __post_init__(self) -> None:
        self.start = self.request.num_computed
        self.samples = self.start + self.num_tokens == self.request.num_tokens

    @property
    def token_ids(self) -> list[int]:
        return self.request.all_ids[self.start:self.start + self.num_tokens]


@dataclass(slots=True)
class SchedulerOutput:
    prefill: list[ScheduledChunk] = field(default_factory=list)
    decode: list[Request] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)   # lost their cache in this schedule
    rejected: list[Request] = field(default_factory=list)    # refused since the last schedule
    num_reused_tokens: int = 0   # paged, prefix caching: tokens the admitted requests found cached (not computed)
    num_evictions: int = 0       # paged, prefix caching: cached blocks taken for new contents in this schedule
    num_draft_tokens: int = 0    # speculation: guesses the decodes verify (their requests' spec_ids), besides one token each
    accepted: dict[int, int] = field(default_factory=dict)   # speculation, set by the runner: request_id -> guesses kept
    emitted: dict[int, int] = field(default_factory=dict)    # speculation, set by update(): request_id -> tokens appended

    @property
    def chunks(self) -> list[ScheduledChunk]:
        """Prefill chunks then one chunk per decode, the runner's flat token order (until update())."""
        return self.prefill + [ScheduledChunk(r, 1) for r in self.decode]

    @property
    def num_prefill_tokens(self) -> int:
        return sum(c.num_tokens for c in self.prefill)

    @property
    def num_decode_tokens(self) -> int:
        return len(self.decode) + self.num_draft_tokens

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decode_tokens

    @property
    def is_empty(self) -> bool:
        """Nothing for the model to compute (the output may still carry rejections)."""
        return not self.prefill and not self.decode

    @property
    def phase(self) -> Phase | None:
        if self.prefill and self.decode:
            return Phase.MIXED
        if self.prefill:
            return Phase.PREFILL
        return Phase.DECODE if self.decode else None


class Scheduler:
    def __init__(self, config: SchedulerConfig):
        config.validate()
        if config.kv_layout != "slots" and type(self) is Scheduler:   # the slot accounting would ignore the blocks
            raise ValueError("a paged config needs the paged scheduler: backend.engine.paged_scheduler.scheduler_for")
        self.config = config
        self._waiting: deque[Request] = deque()
        self._running: list[Request] = []      # admission order: the newest is last
        self._free_slots = list(range(config.max_batch))   # a heap: the lowest index first
        self._rejected: list[Request] = []

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def running_requests(self) -> list[Request]:
        """The admitted requests, oldest first (read them, do not change them: the KV map's view)."""
        return self._running

    @property
    def kv_tokens_used(self) -> int:
        return sum(map(_num_computed, self._running))

    def kv_tokens_after(self, output: SchedulerOutput) -> int:
        """KV cache tokens in use once `output`'s step has written (before finished requests free theirs)."""
        return self.kv_tokens_used + output.num_tokens

    @property
    def has_work(self) -> bool:
        return bool(self._waiting or self._running or self._rejected)

    def add(self, request: Request) -> None:
        """An arrived request: queued, or rejected (reported by the next schedule()) if it can never fit."""
        reason = self._rejection(request)
        if reason:
            request.status = RequestStatus.REJECTED
            request.finish_reason = reason
            self._rejected.append(request)
        else:
            self._waiting.append(request)

    def schedule(self, now_ms: float) -> SchedulerOutput:
        out = SchedulerOutput(rejected=self._rejected)
        self._rejected = []
        if self.config.policy == "static":
            self._schedule_static(out, now_ms)
        elif self.config.policy == "continuous":
            self._admit_waiting(out, now_ms, budget=None)
            if not out.prefill:
                out.decode = self._schedule_decodes(out, budget=None)
        else:
            self._schedule_chunked(out, now_ms)
        return out

    def update(self, output: SchedulerOutput, sampled: dict[int, int], now_ms: float) -> list[Request]:
        """Apply a computed step: `sampled` maps request_id -> token for every sampling request.

        Returns the requests that finished in this step (their slots are free again).
        """
        finished: list[Request] = []
        for chunk in output.prefill:
            chunk.request.num_computed += chunk.num_tokens
            if chunk.samples:
                self._take_sample(chunk.request, sampled, now_ms, finished)
        for request in output.decode:   # a decode step's requests: the simulator's hot path, so no call per request
            token = sampled.get(request.request_id)
            if token is None:
                raise ValueError(f"no sampled token for request {request.request_id}")
            if request.spec_ids:
                if take_verified(request, output, token, now_ms):
                    self._release(request)
                    finished.append(request)
                continue
            request.num_computed += 1
            if request.append_token(token, now_ms):
                self._release(request)
                finished.append(request)
        return finished

    def _fit_drafts(self, out: SchedulerOutput, decoding: list[Request], budget: int | None, room: int) -> None:
        """Trim the decodes' guesses, oldest request first, to the step's token budget left and the cache's
        room (tokens), and to what the request may still emit: a step emits at most len(guesses) + 1 tokens."""
        total = 0
        for r in decoding:
            drafts = r.spec_ids
            if not drafts:
                continue
            k = min(len(drafts), r.max_new_tokens - len(r.output_ids) - 1, self.config.max_len - r.num_tokens,
                    room - total, len(drafts) if budget is None else budget - total)
            if k < len(drafts):
                r.spec_ids = drafts[:max(k, 0)]
            total += len(r.spec_ids)
        out.num_draft_tokens = total

    def _rejection(self, request: Request) -> str:
        return rejection(len(request.prompt_ids), request.max_new_tokens, self.config.max_len, self.config.kv_capacity)

    def _schedule_static(self, out: SchedulerOutput, now_ms: float) -> None:
        if self._running:
            out.decode = list(self._running)   # the reservation holds every request's whole sequence
            self._fit_drafts(out, out.decode, None, self.config.kv_capacity)
            return
        reserved = 0
        while self._waiting and self._free_slots:
            head = self._waiting[0]
            need = len(head.prompt_ids) + head.max_new_tokens
            if reserved + need > self.config.kv_capacity:
                break
            reserved += need
            self._admit(now_ms)
            out.prefill.append(ScheduledChunk(head, head.num_uncomputed))

    def _schedule_chunked(self, out: SchedulerOutput, now_ms: float) -> None:
        budget = self.config.chunk_tokens
        out.decode = self._schedule_decodes(out, budget)
        budget -= out.num_decode_tokens
        room = self.config.kv_capacity - self.kv_tokens_used - out.num_decode_tokens
        for request in self._running:
            if budget == 0 or room == 0:
                return
            if request.status is RequestStatus.PREFILLING:
                n = min(request.num_uncomputed, budget, room)
                out.prefill.append(ScheduledChunk(request, n))
                budget -= n
                room -= n
        self._admit_waiting(out, now_ms, budget)

    def _schedule_decodes(self, out: SchedulerOutput, budget: int | None) -> list[Request]:
        """Every decoding request (the oldest first, up to the budget), preempting the newest
        running requests until the cache holds one more token for each."""
        while True:
            decoding = [r for r in self._running if r.status is _DECODING][:budget]
            used = self.kv_tokens_used + len(decoding)
            if used <= self.config.kv_capacity:
                self._fit_drafts(out, decoding, None if budget is None else budget - len(decoding),
                                 self.config.kv_capacity - used)
                return decoding
            self._preempt(self._running[-1], out)

    def _admit_waiting(self, out: SchedulerOutput, now_ms: float, budget: int | None) -> None:
        """Admit waiting requests first come, first served; the head blocks the rest when it does not fit."""
        while self._waiting and self._free_slots and (budget is None or budget > 0):
            head = self._waiting[0]
            # Every running request's sequence once its pending tokens are computed, plus one
            # token each (the newcomer's too) for the decode after, must fit the cache.
            planned = sum(r.num_tokens for r in self._running) + len(self._running) + 1
            if planned + head.num_tokens > self.config.kv_capacity:
                return
            self._admit(now_ms)
            n = head.num_uncomputed if budget is None else min(head.num_uncomputed, budget)
            out.prefill.append(ScheduledChunk(head, n))
            if budget is not None:
                budget -= n

    def _admit(self, now_ms: float) -> None:
        request = self._waiting.popleft()
        request.slot = heapq.heappop(self._free_slots)
        request.status = RequestStatus.PREFILLING
        if request.scheduled_ms is None:
            request.scheduled_ms = now_ms
        self._running.append(request)

    def _preempt(self, request: Request, out: SchedulerOutput) -> None:
        """Drop the request's cache and queue it first, to recompute prompt + outputs later."""
        self._running.remove(request)
        heapq.heappush(self._free_slots, request.slot)
        request.slot = None
        request.num_computed = 0
        request.status = RequestStatus.WAITING
        request.num_preemptions += 1
        request.spec_ids = []
        self._waiting.appendleft(request)
        out.preempted.append(request)

    def _take_sample(self, request: Request, sampled: dict[int, int], now_ms: float,
                     finished: list[Request]) -> None:
        if request.request_id not in sampled:
            raise ValueError(f"no sampled token for request {request.request_id}")
        if request.append_token(sampled[request.request_id], now_ms):
            self._release(request)
            finished.append(request)

    def _release(self, request: Request) -> None:
        """A finished request leaves the running set and frees its slot."""
        self._running.remove(request)
        heapq.heappush(self._free_slots, request.slot)
        request.slot = None


def take_verified(request: Request, output: SchedulerOutput, token: int, now_ms: float) -> bool:
    """A verification's outcome: the guesses kept, then the token sampled after them; num_computed
    covers the last token and the kept guesses (the rejected ones' K/V is overwritten later). Stops
    apply token by token, so nothing is emitted past a stop token or max_new_tokens. True when finished."""
    drafts, rid = request.spec_ids, request.request_id
    kept = output.accepted.get(rid, 0)
    request.spec_ids = []
    request.spec_proposed.append(len(drafts))
    request.spec_accepted.append(kept)
    request.num_computed += kept + 1
    emitted = 0
    for t in drafts[:kept] + [token]:
        emitted += 1
        if request.append_token(t, now_ms):
            output.emitted[rid] = emitted
            return True
    output.emitted[rid] = emitted
    return False
