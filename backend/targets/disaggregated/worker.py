"""One engine process of the disaggregated policy: a prefill worker or a decode worker.

Started by the coordinator (backend/targets/disaggregated/coordinator.py) as a fresh interpreter, as the
window's engine process is (never a fork). It pins itself to its cores, loads the model, warms
up, says it is ready, and then runs its loop on the coordinator's clock until told to stop:

- prefill: requests come from the coordinator; the real chunked scheduler runs the prompt of
  each, but its last token, in chunks of --chunk-tokens (prefill-only steps), over a paged cache
  with prefix caching (the default): a prompt starting with blocks computed before prefills only the
  rest. When a prompt's KV is complete, all of it (the cached blocks too) is packed and handed to
  the decode worker the coordinator named (backend/engine/kv_transfer.py), and then its blocks and
  slot are given back (the full blocks stay cached).
- decode: hand-offs come from the prefill workers' links; each is copied into the blocks of a free
  slot (paged: the blocks its batch gives the request) and joins the continuous decode batch
  (backend/engine/decode_batch.py), whose first step for it takes the last prompt token and
  samples the first output token. It never runs a prefill.

Wire (backend.protocol: its WORKER channel on one socket to the coordinator; its KV channel on one
socket per prefill-decode pair):

    coordinator -> worker   Init (first) | Start | Dispatch | Cancel | Stop
    worker -> coordinator   Ready | WorkerRecords | Failed | Done
    prefill -> decode       KVHandoff [+ the bytes as one raw frame, under pipe]
    decode -> prefill       Freed
"""
from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

from backend.events import Throttle
from backend.launcher import child_started, pin_to
from backend.protocol import (Cancel, Channel, Dispatch, Done, Failed, Freed, Init, KVHandoff, Port, ProtocolError,
                              Ready, Side, Start, Stop, WorkerFigures, WorkerRecords)
from backend.records import RecordBatch, StepRecord, TokenRecord
from backend.targets.disaggregated.summary import fill_split

IDLE_S = 0.05        # longest wait for a message while idle, so Stop is honoured
PREFILL_SLOTS = 8    # prompts a prefill worker holds at once: a chunk budget rarely spans more


@dataclass(slots=True)
class WorkerSpec:
    role: str                 # "prefill" | "decode"
    index: int
    config: object            # the RunConfig
    cores: list[int]
    num_slots: int
    max_len: int
    kv_capacity: int
    transport: str            # "shm" | "pipe"
    links: dict[int, int] = field(default_factory=dict)    # peer index -> socket fd
    arenas: dict[int, int] = field(default_factory=dict)   # prefill index -> memfd (a prefill: its own)

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"


def serve_fd(fd: str) -> None:
    """The child's entry point (backend.launcher): the file descriptor of its end of the coordinator's socket."""
    child_started()
    conn = Port(Connection(int(fd)), Channel.WORKER, Side.WORKER)
    try:
        first = conn.recv()
    except (EOFError, OSError):
        return
    if not isinstance(first, Init):
        raise ProtocolError(f"a worker's first message must be 'init', not '{first.op.value}'")
    spec = first.spec
    try:
        worker = (PrefillWorker if spec.role == "prefill" else DecodeWorker)(conn, spec)
    except Exception as exc:   # noqa: BLE001 -- one line to the coordinator, which ends the run
        from backend.errors import one_line
        conn.send(Failed(one_line(exc, typed=True)))
        return
    try:
        worker.serve()
    except (EOFError, OSError):
        return   # the coordinator is gone
    except Exception as exc:   # noqa: BLE001 -- one line to the coordinator, which fails this worker's requests
        from backend.errors import one_line
        try:
            conn.send(Failed(one_line(exc, typed=True)))
        except OSError:
            pass
    finally:
        worker.close()


class _Worker:
    def __init__(self, conn: Port, spec: WorkerSpec):
        self.conn = conn
        self.spec = spec
        self.name = spec.name
        pin_to(spec.cores)
        import torch
        torch.set_num_threads(len(spec.cores))
        from backend.engine.runner import build_runner
        from backend.loaders.cache import load
        config = spec.config
        self.loaded, device_name = load(config, lambda event: None)
        from backend.engine.warmup import warmup_steps
        # a prefill worker runs the chunked scheduler's prefill-only steps, a decode worker a continuous decode batch
        steps = warmup_steps("chunked" if spec.role == "prefill" else "continuous", spec.num_slots, spec.max_len,
                             config.engine.chunk_tokens, config.sampling.temperature, self.loaded.shape.sliding_window)
        from backend.engine.runner import PagedPool
        from backend.targets.engine_run import kv_settings
        self.kv = kv_settings(config)   # resolved by the coordinator: the layout both roles' caches share
        # paged: the cache's blocks are the pool's (a prefill worker's scheduler's, a decode worker's batch's), so a
        # cached prefix block is the same physical block for every request that reuses it
        paged = PagedPool(self.kv.block_size, spec.kv_capacity // self.kv.block_size) \
            if self.kv.kv_layout == "paged" else None
        self.runner = build_runner(self.loaded, spec.num_slots, spec.max_len, config.sampling, warmup=steps,
                                   paged=paged)
        side = Side.PREFILL if spec.role == "prefill" else Side.DECODE
        self.links = {peer: Port(Connection(fd), Channel.KV, side) for peer, fd in spec.links.items()}
        self.t0 = 0.0
        self.step_index = 0
        self.stopped = False
        self.cancelled: set[int] = set()
        self.batch = RecordBatch()
        self.handed: list[tuple[int, float]] = []
        self.received: list[int] = []
        self.throttle = Throttle()   # records to the coordinator (at once when a request ends)
        from backend.engine.threads import current_affinity
        from backend.results.matmul import matmul_info
        self.conn.send(Ready(WorkerFigures(
            pid=os.getpid(), threads=torch.get_num_threads(), affinity=current_affinity(),
            num_slots=spec.num_slots, kv_capacity=spec.kv_capacity, matmul=matmul_info(self.loaded),
            loaded=self.loaded.loaded_event(device_name, spec.kv_capacity, False))))

    def now_ms(self) -> float:
        return (time.monotonic() - self.t0) * 1000.0

    def serve(self) -> None:
        while True:   # until Start
            message = self.conn.recv()
            if isinstance(message, Start):
                self.t0 = message.t0
                break
            if isinstance(message, Stop):
                return
        while not self.stopped:
            self.handle_control(block=False)
            if self.stopped:
                break
            if not self.step():
                self.idle()
        self.flush(force=True)
        self.conn.send(Done())

    def handle_control(self, block: bool) -> None:
        while self.conn.poll(IDLE_S if block else 0):
            block = False
            message = self.conn.recv()
            if isinstance(message, Stop):
                self.stopped = True
                return
            if isinstance(message, Cancel):
                self.cancelled.update(message.request_ids)
                self.cancel(message.request_ids)
            else:
                self.on_message(message)

    def idle(self) -> None:
        """Nothing to compute: wait for the coordinator or a peer."""
        self.flush(force=True)
        ready = wait([self.conn, *self.links.values()], IDLE_S)
        for conn in ready:
            if conn is self.conn:
                self.handle_control(block=False)
            else:
                self.on_link(conn)

    def record_step(self, out, contexts: list[int], kv_tokens: int, kv_capacity: int, start: float, end: float,
                    num_waiting: int, num_running: int) -> None:
        experts_touched, weight_bytes = self.runner.step_reads()
        self.batch.steps.append(StepRecord.measured(
            run_id="", step=self.step_index, phase=out.phase, prefill_tokens=[c.num_tokens for c in out.prefill],
            num_decode=len(out.decode), contexts=contexts, start_ms=start, duration_ms=end - start,
            kv_tokens=kv_tokens, kv_capacity=kv_capacity, num_waiting=num_waiting, num_running=num_running,
            worker=self.name, experts_touched=experts_touched, weight_bytes=weight_bytes,
            num_reused_tokens=out.num_reused_tokens, num_evictions=out.num_evictions))
        self.step_index += 1

    def flush(self, force: bool = False) -> None:
        b = self.batch
        if not (b.steps or b.tokens or b.requests or b.scheduled or self.handed or self.received):
            return
        if not force and not b.requests and not self.throttle.due():
            return
        self.conn.send(WorkerRecords(b, self.handed, self.received))
        self.batch, self.handed, self.received = RecordBatch(), [], []
        self.throttle.sent()

    def on_link_closed(self, peer: int) -> None:
        conn = self.links.pop(peer, None)
        if conn is not None:
            conn.close()

    def peer_of(self, conn) -> int:
        return next(peer for peer, c in self.links.items() if c is conn)

    def close(self) -> None:
        for conn in self.links.values():
            conn.close()

    # the roles fill these in
    def step(self) -> bool: ...
    def on_message(self, message: Dispatch) -> None: ...
    def on_link(self, conn) -> None: ...
    def cancel(self, request_ids) -> None: ...


class PrefillWorker(_Worker):
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


class DecodeWorker(_Worker):
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
        out = self.decode.schedule()
        if out.is_empty:
            return False
        start = self.now_ms()
        contexts = [r.num_computed + 1 for r in out.decode]
        kv_tokens = self.decode.kv_tokens_after(out)
        sampled = self.runner.run(out)
        end = self.now_ms()
        finished = self.decode.update(out, sampled, end)
        self.record_step(out, contexts, kv_tokens, self.decode.kv_capacity, start, end, len(self.pending),
                         self.decode.num_running)
        for rid in sampled:
            request = self.requests[rid]
            self.batch.tokens.append(TokenRecord(request_id=rid, index=len(request.output_ids) - 1, time_ms=end,
                                                 token_id=request.output_ids[-1]))
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
