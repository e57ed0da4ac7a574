"""The scheduler's policies over a paged KV cache: blocks instead of tokens, and prefix caching.

The policies are the slot scheduler's (backend/engine/scheduler.py); what changes is the
accounting, as in vLLM v1:
  * a request holds ceil(tokens / block_size) blocks (its table, `Request.block_ids`), taken when
    a step schedules its tokens, not reserved for its whole sequence;
  * admission asks for the blocks of what the step computes (the whole prompt under continuous,
    the first chunk under chunked) and keeps one free block per running request for the decodes
    that follow, so that a newcomer is not preempted by the next step; under chunked the whole
    prompt must also be able to fit beside what the running requests still need (as the slot rule);
  * when the decodes of a step find too few free blocks, the newest running request is preempted:
    its blocks go back (their full blocks stay cached, so with prefix caching its recompute is
    mostly a hit) and it is queued first;
  * static reserves each request's whole sequence in blocks (it never preempts) and takes them as
    tokens arrive;
  * with prefix caching, an admitted request starts at num_computed = its cached prefix (whole
    blocks, never the whole sequence), so the chunk scheduled is only what it must compute.
    Full blocks are named as soon as their tokens are computed;
  * speculation: a decode's guesses take the blocks they need when they fit (else fewer guesses), and the
    blocks past the kept tokens go back after the step (their positions were never accepted).
"""
from __future__ import annotations

from backend.engine.kv_blocks import BlockPool
from backend.engine.request import Request, rejection
from backend.engine.scheduler import ScheduledChunk, Scheduler, SchedulerConfig, SchedulerOutput, take_verified
from backend.events import KV_CACHED_FREE, KV_FREE
from backend.records import RequestStatus

CACHED_FREE = KV_CACHED_FREE   # kv_map: a block no request holds, with a prefix a later request can reuse
FREE = KV_FREE                 # kv_map: a block holding nothing
_DECODING = RequestStatus.DECODING
_PREFILLING = RequestStatus.PREFILLING


def scheduler_for(config: SchedulerConfig) -> Scheduler:
    """The scheduler of the config's KV layout: every target builds its scheduler here."""
    return PagedScheduler(config) if config.kv_layout == "paged" else Scheduler(config)


class PagedScheduler(Scheduler):
    def __init__(self, config: SchedulerConfig):
        super().__init__(config)
        self.pool = BlockPool(config.num_blocks, config.block_size, config.prefix_caching)
        self._bs = config.block_size
        self._evictions_seen = 0

    def kv_tokens_after(self, output: SchedulerOutput) -> int:
        """The tokens the held blocks hold room for (blocks are taken when the step is scheduled;
        a block shared by several requests counts once)."""
        return self.pool.num_used_blocks * self._bs

    def kv_map(self) -> list[int]:
        """Every block's state, for a map of the cache: the id of the oldest running request holding it,
        CACHED_FREE (no request holds it, its prefix kept until evicted) or FREE."""
        pool = self.pool
        states = [CACHED_FREE if pool.is_cached(b) else FREE for b in range(pool.num_blocks)]
        for request in reversed(self._running):   # the oldest holder of a shared block written last
            for b in request.block_ids:
                states[b] = request.request_id
        return states

    def schedule(self, now_ms: float) -> SchedulerOutput:
        out = super().schedule(now_ms)
        evictions = self.pool.stats.num_evictions
        out.num_evictions = evictions - self._evictions_seen
        self._evictions_seen = evictions
        return out

    def update(self, output: SchedulerOutput, sampled: dict[int, int], now_ms: float) -> list[Request]:
        """As the slot scheduler's, naming each block that this step filled before a finished request gives it back."""
        finished: list[Request] = []
        pool, bs, caching = self.pool, self._bs, self.config.prefix_caching
        for chunk in output.prefill:
            request = chunk.request
            request.num_computed += chunk.num_tokens
            if caching:
                pool.cache_full_blocks(request.block_ids, request.block_hashes, request.all_ids, request.num_computed)
            if chunk.samples:
                self._take_sample(request, sampled, now_ms, finished)
        for request in output.decode:
            token = sampled.get(request.request_id)
            if token is None:
                raise ValueError(f"no sampled token for request {request.request_id}")
            if request.spec_ids:
                done = take_verified(request, output, token, now_ms)
                if not done:   # the rejected guesses' blocks go back
                    pool.shrink(request.block_ids, request.num_computed)
                    if caching and request.num_computed // bs > len(request.block_hashes):
                        pool.cache_full_blocks(request.block_ids, request.block_hashes, request.all_ids,
                                               request.num_computed)
                else:
                    self._release(request)
                    finished.append(request)
                continue
            request.num_computed += 1
            if caching and request.num_computed // bs > len(request.block_hashes):   # a block just filled
                pool.cache_full_blocks(request.block_ids, request.block_hashes, request.all_ids, request.num_computed)
            if request.append_token(token, now_ms):
                self._release(request)
                finished.append(request)
        return finished

    def _rejection(self, request: Request) -> str:
        # a sequence fits the pool iff its blocks do: ceil(n / bs) <= num_blocks  <=>  n <= num_blocks * bs
        return rejection(len(request.prompt_ids), request.max_new_tokens, self.config.max_len,
                         self.pool.num_blocks * self._bs, cache=f"the cache ({self.pool.num_blocks} blocks)")

    def _schedule_static(self, out: SchedulerOutput, now_ms: float) -> None:
        pool = self.pool
        if self._running:
            out.decode = list(self._running)
            self._fit_drafts(out, out.decode, None, pool.num_blocks * self._bs)
            for request in self._running:   # the batch's reservation guarantees the blocks
                pool.allocate(request.block_ids, request.num_tokens + len(request.spec_ids))
            return
        reserved = 0
        while self._waiting and self._free_slots:
            head = self._waiting[0]
            need = pool.blocks_for(len(head.prompt_ids) + head.max_new_tokens)
            if reserved + need > pool.num_blocks:
                break
            cached = pool.find_cached(head.all_ids)
            if not self._admit_head(out, now_ms, cached, head.num_tokens):
                break
            reserved += need
            out.prefill.append(ScheduledChunk(head, head.num_uncomputed))

    def _schedule_chunked(self, out: SchedulerOutput, now_ms: float) -> None:
        pool, bs = self.pool, self._bs
        budget = self.config.chunk_tokens
        out.decode = self._schedule_decodes(out, budget)
        budget -= out.num_decode_tokens
        for request in self._running:
            if budget == 0:
                return
            if request.status is _PREFILLING:
                room = (len(request.block_ids) + pool.num_free_blocks) * bs - request.num_computed
                n = min(request.num_uncomputed, budget, room)
                if n <= 0:
                    return
                pool.allocate(request.block_ids, request.num_computed + n)
                out.prefill.append(ScheduledChunk(request, n))
                budget -= n
        self._admit_waiting(out, now_ms, budget)

    def _schedule_decodes(self, out: SchedulerOutput, budget: int | None) -> list[Request]:
        """Every decoding request (the oldest first, up to the budget), preempting the newest running
        requests until each one whose next token starts a block can take one."""
        pool, bs = self.pool, self._bs
        while True:
            decoding = [r for r in self._running if r.status is _DECODING][:budget]
            growing = [r for r in decoding if len(r.block_ids) * bs <= r.num_computed]
            if len(growing) <= pool.num_free_blocks:
                for r in growing:
                    pool.allocate(r.block_ids, r.num_computed + 1)
                self._fit_paged_drafts(out, decoding, None if budget is None else budget - len(decoding))
                return decoding
            self._preempt(self._running[-1], out)

    def _fit_paged_drafts(self, out: SchedulerOutput, decoding: list[Request], budget: int | None) -> None:
        """The decodes' guesses trimmed to the budget and to the room in their blocks and the free ones,
        oldest request first; each takes the blocks its guesses need."""
        pool, bs = self.pool, self._bs
        total = 0
        for r in decoding:
            if not r.spec_ids:
                continue
            room = (len(r.block_ids) + pool.num_free_blocks) * bs - (r.num_computed + 1)
            self._fit_drafts(out, [r], None if budget is None else budget - total, room)
            pool.allocate(r.block_ids, r.num_computed + 1 + len(r.spec_ids))
            total += len(r.spec_ids)
        out.num_draft_tokens = total

    def _admit_waiting(self, out: SchedulerOutput, now_ms: float, budget: int | None) -> None:
        """First come, first served; the head blocks the rest when its blocks are not free."""
        pool = self.pool
        while self._waiting and self._free_slots and (budget is None or budget > 0):
            head = self._waiting[0]
            cached = pool.find_cached(head.all_ids)
            hit = len(cached[0]) * self._bs
            n = head.num_tokens - hit if budget is None else min(head.num_tokens - hit, budget)
            headroom = len(self._running)   # a block each for the running requests' next decodes
            if budget is not None:
                # the whole sequence (and its first decode) must fit beside what the running ones still need
                pending = sum(max(0, pool.blocks_for(r.num_tokens + 1) - len(r.block_ids)) for r in self._running)
                if pool.blocks_to_take(cached[0], head.num_tokens + 1) + pending > pool.num_free_blocks:
                    return
            if pool.blocks_to_take(cached[0], hit + n) + headroom > pool.num_free_blocks:
                return
            if not self._admit_head(out, now_ms, cached, hit + n):
                return
            out.prefill.append(ScheduledChunk(head, n))
            if budget is not None:
                budget -= n

    def _admit_head(self, out: SchedulerOutput, now_ms: float, cached: tuple[list[int], list[int]],
                    num_tokens: int) -> bool:
        """The queue's head takes its cached prefix and blocks for `num_tokens` tokens, and a row; False if they are not free."""
        head = self._waiting[0]
        hit = self.pool.admit(head.block_ids, head.block_hashes, head.all_ids, num_tokens, cached)
        if hit is None:
            return False
        self._admit(now_ms)
        head.num_computed = hit
        if not head.output_ids:   # the prefill its first token waits for: what the request record shows
            head.num_cached_tokens = hit
        out.num_reused_tokens += hit
        return True

    def _preempt(self, request: Request, out: SchedulerOutput) -> None:
        self.pool.free(request.block_ids, request.block_hashes)
        super()._preempt(request, out)

    def _release(self, request: Request) -> None:
        self.pool.free(request.block_ids, request.block_hashes)
        super()._release(request)
