"""A decode worker's batch under the disaggregated policy: plain Python, no tensors.

A decode worker never runs a prefill. Its requests arrive with the KV of every prompt token but
the last already computed (by a prefill worker, handed over); the last prompt token is the
input of the request's first decode step, which samples its first output token. Every step
decodes one token for each running request: continuous batching, decode only.

Admission reserves the request's whole sequence (prompt + max_new_tokens) in the KV cache, so
a running request is never preempted: preemption would drop its cache and need a recompute,
which is a prefill. A hand-off that does not fit waits (the worker keeps it) until a running
request finishes.
"""
from __future__ import annotations

import heapq
from operator import attrgetter

from backend.engine.request import Request
from backend.engine.scheduler import SchedulerOutput
from backend.records import RequestStatus

_num_computed = attrgetter("num_computed")


class DecodeBatch:
    """The running requests of one decode worker and their KV cache slots."""

    def __init__(self, max_batch: int, kv_capacity: int, max_len: int):
        self.max_batch = max_batch
        self.kv_capacity = kv_capacity
        self.max_len = max_len
        self._running: list[Request] = []
        self._free_slots = list(range(max_batch))   # a heap: the lowest index first
        self._reserved = 0                          # KV tokens reserved by the running requests

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def running(self) -> list[Request]:
        return list(self._running)

    @property
    def kv_tokens_used(self) -> int:
        return sum(map(_num_computed, self._running))

    @staticmethod
    def need(request: Request) -> int:
        return len(request.prompt_ids) + request.max_new_tokens

    def fits_ever(self, request: Request) -> bool:
        """Whether the request could ever be admitted here (its whole sequence fits a slot and the cache)."""
        need = self.need(request)
        return need <= self.max_len and need <= self.kv_capacity

    def can_admit(self, request: Request) -> bool:
        return bool(self._free_slots) and self._reserved + self.need(request) <= self.kv_capacity

    def admit(self, request: Request, num_computed: int) -> int:
        """Take a slot for a request whose first `num_computed` tokens' KV are (about to be) in it; the slot."""
        if not self.can_admit(request):
            raise ValueError(f"request {request.request_id} does not fit the decode batch now")
        if not 0 <= num_computed < request.num_tokens:
            raise ValueError(f"request {request.request_id}: {num_computed} computed tokens of {request.num_tokens}")
        request.slot = heapq.heappop(self._free_slots)
        request.num_computed = num_computed
        request.status = RequestStatus.DECODING
        self._reserved += self.need(request)
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
        """One decode token for every running request, the oldest first."""
        return SchedulerOutput(decode=list(self._running))

    def update(self, output: SchedulerOutput, sampled: dict[int, int], now_ms: float) -> list[Request]:
        """Apply a computed step; the requests that finished in it (their slots are free again)."""
        finished = []
        for request in output.decode:
            if request.request_id not in sampled:
                raise ValueError(f"no sampled token for request {request.request_id}")
            request.num_computed += 1
            if request.append_token(sampled[request.request_id], now_ms):
                self._release(request)
                finished.append(request)
        return finished

    def _release(self, request: Request) -> None:
        self._running.remove(request)
        heapq.heappush(self._free_slots, request.slot)
        self._reserved -= self.need(request)
        request.slot = None
