"""The decode role: hand-offs copied into its cache, joined to one continuous decode batch
(backend/targets/disaggregated/worker.py). With --spec it speculates as the local engine does: its own
speculator (an n-gram proposer, or a draft model with its own cache rows beside the worker's) guesses
before each step, the runner verifies the guesses as decode rows, and the batch keeps what it accepts."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait

from backend.engine.loop import token_records
from backend.protocol import Freed, KVHandoff, Port
from backend.targets.disaggregated.summary import fill_split
from backend.targets.disaggregated.worker_base import Worker, WorkerSpec


class DecodeWorker(Worker):
    def __init__(self, conn: Port, spec: WorkerSpec):
        super().__init__(conn, spec)
        from backend.engine.decode_batch import DecodeBatch
        kv = self.kv
        self.decode = DecodeBatch(spec.num_slots, spec.kv_capacity, spec.max_len, kv.kv_layout, kv.block_size)
        self.pending: deque[tuple[KVHandoff, int, bytearray | None]] = deque()   # (hand-off, prefill index, bytes)
        self.arenas: dict[int, object] = {}
        self.requests: dict[int, object] = {}
        self.meta: dict[int, _Handed] = {}
        self.text: dict[int, str] = {}
        self.tokenizer = self.loaded.tokenizer
        self.stop_ids = self.tokenizer.eos_ids
        self.ignore_eos = spec.config.sampling.ignore_eos
        self.speculator = None
        if spec.config.spec.is_on:
            from backend.targets.spec_setup import build_speculator
            self.speculator = build_speculator(spec.config, self.loaded, spec.num_slots, spec.max_len, self.warmup,
                                               lambda event: None)

    def on_link(self, conn) -> None:
        peer = self.peer_of(conn)
        try:
            while conn.poll():
                handoff = conn.recv()
                payload = None
                if handoff.buffer is None:   # pipe: the bytes follow the header
                    payload = bytearray(handoff.block.nbytes)
                    conn.recv_payload_into(payload)
                self.pending.append((handoff, peer, payload))
                self.received.append(handoff.spec.request_id)
        except (EOFError, OSError):
            self.on_link_closed(peer)

    def cancel(self, request_ids) -> None:
        for rid in request_ids:
            if self.decode.drop(rid) is not None:
                self.requests.pop(rid, None)
                self.meta.pop(rid, None)
                self.text.pop(rid, None)
        kept = deque()
        for item in self.pending:
            if item[0].spec.request_id in request_ids:
                self.free_buffer(item[1], item[0].buffer)
            else:
                kept.append(item)
        self.pending = kept

    def free_buffer(self, peer: int, index: int | None) -> None:
        link = self.links.get(peer)
        if index is None or link is None:
            return
        try:
            link.send(Freed(index))
        except OSError:
            self.on_link_closed(peer)

    def admit_pending(self) -> None:
        """Copy every waiting hand-off that fits into a cache slot, oldest first."""
        from backend.engine.kv_transfer import Arena, unpack, view_of
        from backend.engine.request import Request
        while self.pending:
            handoff, peer, payload = self.pending[0]
            spec, index, block = handoff.spec, handoff.buffer, handoff.block
            request = Request.from_spec(spec, self.stop_ids, self.ignore_eos)
            if not self.decode.can_admit(request):
                return
            self.pending.popleft()
            slot = self.decode.admit(request, block.num_tokens)
            request.num_cached_tokens = handoff.cached_tokens   # found in the prefill worker's prefix cache
            if self.runner.paged is not None:   # the blocks the batch gave the request, where unpack writes
                self.runner.cache.set_row(slot, request.block_ids)
            if block.num_tokens:
                if index is not None:
                    arena = self.arenas.get(peer)
                    if arena is None:
                        arena = self.arenas[peer] = Arena.open(self.spec.arenas[peer])
                    unpack(self.runner.cache, slot, view_of(block, arena.map, arena.offset(index)))
                else:
                    unpack(self.runner.cache, slot, view_of(block, payload))
            self.free_buffer(peer, index)
            request.scheduled_ms = handoff.scheduled_ms
            self.requests[spec.request_id] = request
            self.meta[spec.request_id] = _Handed(handoff.scheduled_ms, handoff.prefill_done_ms, self.now_ms(),
                                                 block.nbytes)

    def step(self) -> bool:
        for conn in wait(list(self.links.values()), 0) if self.links else []:
            self.on_link(conn)
        self.admit_pending()
        draft_ms = 0.0
        if self.speculator is not None and self.decode.num_running:
            begun = self.now_ms()   # the guesses come before the step; their time is the draft's own
            self.speculator.propose(self.decode.running)
            draft_ms = self.now_ms() - begun
        out = self.decode.schedule()
        if out.is_empty:
            return False
        start = self.now_ms()
        contexts = [r.num_computed + 1 + len(r.spec_ids) for r in out.decode]
        kv_tokens = self.decode.kv_tokens_after(out)
        sampled = self.runner.run(out)
        end = self.now_ms()
        finished = self.decode.update(out, sampled, end)
        record = self.record_step(out, contexts, kv_tokens, self.decode.kv_capacity, start, end, len(self.pending),
                                  self.decode.num_running, draft_ms)
        if self.speculator is not None:
            self.speculator.observe(record)   # its cost ratio: when guessing pays
        self.batch.tokens += token_records(sampled, self.requests, end, out.emitted)
        self.stream_text(sampled)
        for request in finished:
            self.batch.requests.append(self.record_of(request))
        self.flush()
        return True

    def stream_text(self, sampled: dict[int, int]) -> None:
        for rid in sampled:
            text = self.tokenizer.decode(self.requests[rid].output_ids)
            old = self.text.get(rid, "")
            if text.endswith("\ufffd"):   # a multi-byte character half decoded: wait for the rest
                continue
            if len(text) > len(old):
                self.batch.text[rid] = text[len(old):] if text.startswith(old) else text
            self.text[rid] = text

    def record_of(self, request):
        rid = request.request_id
        meta = self.meta.pop(rid)
        self.requests.pop(rid, None)
        self.text.pop(rid, None)
        record = request.to_record(self.tokenizer.decode(request.output_ids) if request.output_ids else "")
        fill_split(record, meta.kv_bytes, meta.scheduled_ms, meta.prefill_done_ms, meta.loaded_ms)
        return record

    def close(self) -> None:
        super().close()
        for arena in self.arenas.values():
            arena.close()


@dataclass(slots=True)
class _Handed:
    """What a decode worker keeps of a request's hand-off, for its record's split of the time."""

    scheduled_ms: float
    prefill_done_ms: float
    loaded_ms: float
    kv_bytes: int

