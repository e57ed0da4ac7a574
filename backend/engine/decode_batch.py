"""A decode worker's batch under the disaggregated policy: plain Python, no tensors.

A decode worker never runs a prefill. Its requests arrive with the KV of every prompt token but
the last already computed (by a prefill worker, handed over); the last prompt token is the
input of the request's first decode step, which samples its first output token. Every step
decodes one token for each running request: continuous batching, decode only.

Admission reserves the request's whole sequence (prompt + max_new_tokens) in the KV cache, so
a running request is never preempted: preemption would drop its cache and need a recompute,
which is a prefill. A hand-off that does not fit waits (the worker keeps it) until a running
request finishes.

Under the paged layout the reservation counts blocks (ceil(sequence / block_size) each) and a
request's table takes its blocks as tokens arrive: the hand-off's blocks at admission, then one
more each time a decode starts a block. A decode worker caches no prefixes: its KV arrives whole.

Speculation (backend/engine/spec/): a running request may carry guesses (`spec_ids`, set before the
step); its decode then computes 1 + len(spec_ids) tokens. They always fit: a speculator asks for at most
what the request may still emit less one, inside the whole sequence its admission reserved (trimmed here
all the same). After the step the kept guesses and the sampled token are appended, as the scheduler's
update does (scheduler.take_verified), and under the paged layout the rejected positions' blocks go back.
"""
from __future__ import annotations

import heapq
from operator import attrgetter

from backend.engine.kv_blocks import BlockPool, blocks_for
from backend.engine.request import Request
from backend.engine.scheduler import SchedulerOutput, take_verified
from backend.records import RequestStatus

_num_computed = attrgetter("num_computed")


class DecodeBatch:
    """The running requests of one decode worker and their KV cache slots."""

    def __init__(self, max_batch: int, kv_capacity: int, max_len: int, kv_layout: str = "slots",
                 block_size: int = 16):
        self.max_batch = max_batch
        self.kv_capacity = kv_capacity
        self.max_len = max_len
        self._running: list[Request] = []
        self._free_slots = list(range(max_batch))   # a heap: the lowest index first
        self._reserved = 0                          # KV tokens (paged: blocks) reserved by the running requests
        self.pool: BlockPool | None = None
        self._unit = 1                              # tokens a unit of the reservation holds
        if kv_layout == "paged":
            from backend.engine.scheduler import validate_paged
            validate_paged(block_size, max_len, kv_capacity, max_batch)
            self.pool = BlockPool(kv_capacity // block_size, block_size, prefix_caching=False)
            self._unit = block_size

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def running(self) -> list[Request]:
        return list(self._running)

    @property
    def kv_tokens_used(self) -> int:
        return sum(map(_num_computed, self._running))

    def kv_tokens_after(self, output: SchedulerOutput) -> int:
        """KV cache tokens in use once `output`'s step has written (paged: the held blocks' tokens)."""
        if self.pool is not None:
            return self.pool.num_used_blocks * self._unit
        return self.kv_tokens_used + output.num_tokens

    @staticmethod
    def need(request: Request) -> int:
        return len(request.prompt_ids) + request.max_new_tokens

    def _units(self, request: Request) -> int:
        """What the request's whole sequence reserves: tokens, or blocks under the paged layout."""
        return blocks_for(self.need(request), self._unit)

    @property
    def _capacity_units(self) -> int:
        return self.pool.num_blocks if self.pool is not None else self.kv_capacity

    def fits_ever(self, request: Request) -> bool:
        """Whether the request could ever be admitted here (its whole sequence fits a slot and the cache)."""
        return self.need(request) <= self.max_len and self._units(request) <= self._capacity_units

    def can_admit(self, request: Request) -> bool:
        return bool(self._free_slots) and self._reserved + self._units(request) <= self._capacity_units

    def admit(self, request: Request, num_computed: int) -> int:
        """Take a slot for a request whose first `num_computed` tokens' KV are (about to be) in it; the slot."""
        if not self.can_admit(request):
            raise ValueError(f"request {request.request_id} does not fit the decode batch now")
        if not 0 <= num_computed < request.num_tokens:
            raise ValueError(f"request {request.request_id}: {num_computed} computed tokens of {request.num_tokens}")
        request.slot = heapq.heappop(self._free_slots)
        request.num_computed = num_computed
        request.status = RequestStatus.DECODING
        if self.pool is not None:   # the handed-over KV and the first decode's token (the reservation guarantees them)
            self.pool.allocate(request.block_ids, request.num_tokens)
        self._reserved += self._units(request)
        self._running.append(request)
        return request.slot

    def drop(self, request_id: int) -> Request | None:
        """Forget a running request (cancelled by the coordinator); its slot is free again."""
        for request in self._running:
            if request.request_id == request_id:
                self._release(request)
                return request
        return None

    def schedule(self) -> SchedulerOutput:
        """One decode token for every running request (and its guesses), the oldest first."""
        out = SchedulerOutput(decode=list(self._running))
        for request in self._running:
            if request.spec_ids:   # within the reservation: what it may still emit less one, and its row
                k = min(len(request.spec_ids), request.max_new_tokens - len(request.output_ids) - 1,
                        self.max_len - request.num_tokens)
                request.spec_ids = request.spec_ids[:max(k, 0)]
                out.num_draft_tokens += len(request.spec_ids)
        if self.pool is not None:
            for request in self._running:   # blocks for the tokens each computes (within its reservation)
                self.pool.allocate(request.block_ids, request.num_tokens + len(request.spec_ids))
        return out

    def update(self, output: SchedulerOutput, sampled: dict[int, int], now_ms: float) -> list[Request]:
        """Apply a computed step; the requests that finished in it (their slots are free again)."""
        finished = []
        for request in output.decode:
            if request.request_id not in sampled:
                raise ValueError(f"no sampled token for request {request.request_id}")
            if request.spec_ids:
                done = take_verified(request, output, sampled[request.request_id], now_ms)
                if not done and self.pool is not None:   # the rejected guesses' blocks go back
                    self.pool.shrink(request.block_ids, request.num_computed)
            else:
                request.num_computed += 1
                done = request.append_token(sampled[request.request_id], now_ms)
            if done:
                self._release(request)
                finished.append(request)
        return finished

    def _release(self, request: Request) -> None:
        self._running.remove(request)
        heapq.heappush(self._free_slots, request.slot)
        self._reserved -= self._units(request)
        if self.pool is not None:
            self.pool.free(request.block_ids)
        request.slot = None
