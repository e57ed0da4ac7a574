"""What both roles of a disaggregated worker share: their spec, the model and cache, the loop on the
coordinator's clock, and the records they send (backend/targets/disaggregated/worker.py says what each role does)."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

from backend.events import Throttle
from backend.launcher import pin_to
from backend.protocol import (Cancel, Channel, Dispatch, Done, Port, Ready, Side, Start, Stop, WorkerFigures,
                              WorkerRecords)
from backend.records import RecordBatch, StepRecord

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



class Worker:
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
        self.warmup = steps = warmup_steps("chunked" if spec.role == "prefill" else "continuous", spec.num_slots, spec.max_len,
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
                    num_waiting: int, num_running: int, draft_ms: float = 0.0) -> StepRecord:
        experts_touched, weight_bytes = self.runner.step_reads()
        record = StepRecord.measured(
            run_id="", step=self.step_index, phase=out.phase, prefill_tokens=[c.num_tokens for c in out.prefill],
            num_decode=len(out.decode), contexts=contexts, start_ms=start, duration_ms=end - start,
            kv_tokens=kv_tokens, kv_capacity=kv_capacity, num_waiting=num_waiting, num_running=num_running,
            worker=self.name, experts_touched=experts_touched, weight_bytes=weight_bytes,
            num_reused_tokens=out.num_reused_tokens, num_evictions=out.num_evictions,
            num_proposed_tokens=out.num_draft_tokens, num_accepted_tokens=sum(out.accepted.values()),
            draft_ms=draft_ms)
        self.batch.steps.append(record)
        self.step_index += 1
        return record

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

