"""The prefill role: prompts in chunks over a (prefix-cached) paged cache, each finished prompt's KV handed off
to the decode worker the coordinator named (backend/targets/disaggregated/worker.py)."""
from __future__ import annotations

from multiprocessing.connection import wait

from backend.protocol import Dispatch, KVHandoff, Port
from backend.targets.disaggregated.worker_base import IDLE_S, Worker, WorkerSpec


class PrefillWorker(Worker):
    def __init__(self, conn: Port, spec: WorkerSpec):
        super().__init__(conn, spec)
        from backend.engine.paged_scheduler import scheduler_for
        from backend.engine.scheduler import SchedulerConfig
        config, kv = spec.config, self.kv
        # with prefix caching a prompt whose first blocks this worker computed before prefills only the rest;
        # its hand-off still carries every prompt token's KV, the cached blocks included
        self.scheduler = scheduler_for(SchedulerConfig(policy="chunked", max_batch=spec.num_slots,
                                                       kv_capacity=spec.kv_capacity, max_len=spec.max_len,
                                                       chunk_tokens=config.engine.chunk_tokens, kv_layout=kv.kv_layout,
                                                       block_size=kv.block_size, prefix_caching=kv.prefix_caching))
        self.specs: dict[int, tuple] = {}    # request_id -> (its RequestSpec, its decode worker)
        self.announced: set[int] = set()
        self.arena = None
        if spec.transport == "shm":
            from backend.engine.kv_transfer import Arena, bytes_per_row
            # each buffer holds the longest hand-off: a whole row of blocks of this process's cache
            self.arena = Arena(spec.arenas[spec.index], bytes_per_row(self.runner.cache), create=True)

    def on_message(self, message: Dispatch) -> None:
        if not isinstance(message, Dispatch):
            return
        from backend.engine.request import Request
        spec, decode_index = message.spec, message.decode_index
        self.specs[spec.request_id] = (spec, decode_index)
        if len(spec.prompt_ids) <= 1:   # nothing to prefill: the whole prompt is the first decode step's input
            now = self.now_ms()
            self.batch.scheduled[spec.request_id] = now
            self.hand_off(spec.request_id, None, 0, now, now)
            return
        self.scheduler.add(Request(spec.request_id, spec.prompt_ids[:-1], 1, spec.arrival_ms))

    def cancel(self, request_ids) -> None:
        for rid in request_ids:
            self.specs.pop(rid, None)   # a prompt under way still runs to its end; its hand-off is skipped

    def step(self) -> bool:
        start = self.now_ms()
        out = self.scheduler.schedule(start)
        if out.is_empty:
            return False
        for chunk in out.prefill:
            rid = chunk.request.request_id
            if rid not in self.announced:
                self.announced.add(rid)
                self.batch.scheduled[rid] = chunk.request.scheduled_ms
        contexts = [c.request.num_computed + c.num_tokens for c in out.prefill]
        kv_tokens = self.scheduler.kv_tokens_after(out)
        sampled = self.runner.run(out)   # the sample of a finished prompt[:-1] is unused: decode samples
        end = self.now_ms()
        self.record_step(out, contexts, kv_tokens, self.scheduler.config.kv_capacity, start, end,
                         self.scheduler.num_waiting, self.scheduler.num_running)
        # A chunk that samples ends its prompt[:-1] (one token to generate): hand its KV off now, while the
        # request still holds its blocks, the cached prefix shared with others included; update() then gives
        # them back (the full ones stay cached) and only a later step can write over them.
        for chunk in out.prefill:
            if chunk.samples:
                request = chunk.request
                self.announced.discard(request.request_id)
                self.hand_off(request.request_id, request.slot, request.num_computed + chunk.num_tokens,
                              request.scheduled_ms, end, request.num_cached_tokens)
        self.scheduler.update(out, sampled, end)
        self.flush()
        return True

    def hand_off(self, rid: int, slot: int | None, num_tokens: int, scheduled_ms: float, done_ms: float,
                 cached_tokens: int = 0) -> None:
        """Pack the prompt's first num_tokens positions' KV (cached_tokens of them found in the prefix cache)
        and send it to its decode worker (dropped if cancelled or the link is gone)."""
        from backend.engine.kv_transfer import block_of, pack, view_of
        entry = self.specs.pop(rid, None)
        if entry is None:
            return
        spec, decode_index = entry
        block = block_of(self.runner.cache, num_tokens)
        link = self.links.get(decode_index)
        if link is None:
            return
        try:
            if self.arena is not None:
                index = self.take_buffer(decode_index)
                if index is None:
                    return
                if num_tokens:
                    pack(self.runner.cache, slot, block, view_of(block, self.arena.map, self.arena.offset(index)))
                link.send(KVHandoff(spec, scheduled_ms, done_ms, self.name, index, block, cached_tokens))
            else:
                import torch
                payload = torch.empty(block.shape, dtype=block.torch_dtype)
                if num_tokens:
                    pack(self.runner.cache, slot, block, payload)
                link.send(KVHandoff(spec, scheduled_ms, done_ms, self.name, None, block, cached_tokens))
                link.send_payload(payload.view(torch.uint8).reshape(-1).numpy() if num_tokens else b"")
        except OSError:
            self.on_link_closed(decode_index)
            return
        self.handed.append((rid, self.now_ms()))

    def take_buffer(self, decode_index: int) -> int | None:
        """A free arena buffer, waiting for a decode worker to free one if none is."""
        while not self.arena.free:
            if decode_index not in self.links:
                return None
            ready = wait([*self.links.values()], IDLE_S)
            for conn in ready:
                self.on_link(conn)
        return self.arena.free.pop()

    def on_link(self, conn) -> None:
        try:
            while conn.poll():
                message = conn.recv()
                if self.arena is not None:
                    self.arena.free.append(message.buffer)
        except (EOFError, OSError):
            self.on_link_closed(self.peer_of(conn))

    def close(self) -> None:
        super().close()
        if self.arena is not None:
            self.arena.close()

