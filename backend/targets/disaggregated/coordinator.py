"""The disaggregated policy on the real model: P prefill engine processes and D decode engine
processes on this machine, and the coordinator (this module, in the caller's process) between them.

`run_disaggregated` has every target's signature. It splits the cores among the workers (each
pinned to its share, `plan_layout`), starts them (backend/targets/disaggregated/worker.py), and then, on
one clock that every process reads (CLOCK_MONOTONIC), hands each arriving request to the prefill
worker with the fewest prompt tokens queued and names the decode worker with the fewest requests
for it. The prefill worker runs the prompt and hands its KV straight to that decode worker
(backend/engine/kv_transfer.py); the decode worker streams the tokens. The coordinator merges
the workers' record streams into one (steps renumbered in the order they arrive, each with its
`worker`), so the summary, the files and the window see one run.

A worker that dies fails its requests with the reason ("decode-0 ended by signal 9 (SIGKILL)"),
the others are told to drop them, and the run goes on with the workers left; with no prefill or
no decode worker left, the rest of the requests fail at once and the run ends, its records kept.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait
from typing import Callable

from backend.config import RunConfig
from backend.engine.request import rejected_record, rejection
from backend.errors import RunError
from backend.events import Emit, Progress, RequestsArrived, RunFinished
from backend.protocol import (Cancel, Channel, Dispatch, Done, Failed, Init, Message, Port, Ready, Side, Start, Stop,
                              WorkerFigures, WorkerRecords)
from backend.records import RecordBatch, RequestRecord, RequestStatus
from backend.run_info import DisaggregatedInfo, LocalInfo, RunInfo, TargetKind, now_created

READY_TIMEOUT_S = 300.0   # loading and warming up a model in every worker
DONE_TIMEOUT_S = 5.0      # after "stop", how long a worker has to send its last records
IDLE_S = 0.05


@dataclass(slots=True)
class WorkerSlot:
    """The coordinator's view of one worker."""

    name: str
    role: str
    index: int
    cores: list[int]
    process: object = None
    conn: Port | None = None
    ready: WorkerFigures | None = None   # what it said once loaded
    alive: bool = True
    done: bool = False
    queued_tokens: int = 0      # prefill: prompt tokens dispatched and not yet handed off
    assigned: int = 0           # decode: requests named for it and not yet finished


@dataclass(slots=True)
class Track:
    """One request as the coordinator follows it."""

    spec: object
    prefill: int
    decode: int
    stage: str = "prefill"      # prefill | decode | done
    handed: bool = False        # its prefill worker has sent its KV
    scheduled_ms: float | None = None
    token_times: list[float] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)   # the answer, for a conversation's next turn


def plan_layout(num_prefill: int, num_decode: int, cores: list[int]) -> list[tuple[str, list[int]]]:
    """(worker name, its cores) for every worker: the cores split evenly, the remainder to the prefill
    workers (prefill is compute-bound: it gains most from a core more); with fewer cores than workers,
    each worker gets one core, shared round-robin."""
    names = [f"prefill-{i}" for i in range(num_prefill)] + [f"decode-{i}" for i in range(num_decode)]
    n = len(names)
    if len(cores) < n:
        return [(name, [cores[i % len(cores)]]) for i, name in enumerate(names)]
    per, extra = divmod(len(cores), n)
    layout, at = [], 0
    for i, name in enumerate(names):
        take = per + (1 if i < extra else 0)
        layout.append((name, list(cores[at:at + take])))
        at += take
    return layout


def worker_devices(device: str, num_workers: int, cuda_devices: int) -> list[str]:
    """The --device each worker runs on. On CUDA each worker owns a GPU (cuda:0, cuda:1, ...): two
    workers' full models and caches on one device would share its memory, each checking the fit
    against a free figure the other is about to take. Too few GPUs, or one named (cuda:N) for
    several workers, is refused in one line. The CPU and MPS are shared as they are (cores split)."""
    from backend.errors import InputError
    spec = device.strip().lower()
    cuda = spec.startswith("cuda") or (spec == "auto" and cuda_devices > 0)
    if not cuda:
        return [device] * num_workers
    if spec not in ("cuda", "auto") and num_workers > 1:
        raise InputError(f"--device {device} names one GPU, but the disaggregated policy on CUDA puts each of "
                         f"its {num_workers} engine processes on its own GPU: use --device cuda "
                         f"(cuda:0 to cuda:{num_workers - 1})")
    if spec not in ("cuda", "auto"):
        return [device]
    if cuda_devices < num_workers:
        raise InputError(f"the disaggregated policy on CUDA puts each of its {num_workers} engine processes on its "
                         f"own GPU, and this machine has {cuda_devices}: use fewer --prefill-workers/"
                         f"--decode-workers, --device cpu, or --simulate")
    return [f"cuda:{i}" for i in range(num_workers)]


def run_disaggregated(config: RunConfig, emit: Emit, should_stop: Callable[[], bool],
                      retain_records: bool = True) -> RunFinished:
    """`load --policy disaggregated` on the real model."""
    from backend.results.recorder import RunRecorder
    from backend.targets.engine_run import shared_settings, validate, validate_disaggregated, with_kv_settings
    validate_disaggregated(config)
    validate(shared_settings(config))
    config = with_kv_settings(config)   # the workers' layout (paged, prefix caching): one line here, before they start
    with RunRecorder(config, emit, retain_records) as recorder:
        return Coordinator(config, recorder, should_stop).run()


def _cuda_devices(device: str) -> int:
    """How many CUDA devices torch sees here (0 without asking torch where the run is not on CUDA)."""
    if not device.strip().lower().startswith(("cuda", "auto")):
        return 0
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


class Coordinator:
    def __init__(self, config: RunConfig, recorder, should_stop):
        self.config, self.recorder, self.should_stop = config, recorder, should_stop
        self.emit = recorder.emit
        self.workers: list[WorkerSlot] = []
        self.tracks: dict[int, Track] = {}
        self.run_id = recorder.run_id
        self.step_index = 0
        self.t0 = 0.0
        self.errors: list[str] = []

    # ---- setup ----------------------------------------------------------------------------------

    def run(self) -> RunFinished:
        from backend.engine.kv_transfer import resolve_transport
        from backend.engine.threads import available_cores
        from backend.loaders.weights import model_header
        from backend.targets.disaggregated.worker_base import PREFILL_SLOTS
        from backend.targets.engine_run import kv_capacity_of, longest_sequence
        from backend.workload.arrivals import WorkloadSource
        config, e = self.config, self.config.engine
        shape, tokenizer = model_header(config.model.name)
        self.source = WorkloadSource(config.workload, tokenize=tokenizer.encode, vocab_size=shape.vocab_size,
                                     max_prompt_len=shape.max_position)
        self.max_len = min(e.max_len or longest_sequence(config.workload), shape.max_position)
        self.decode_capacity = kv_capacity_of(config, e.max_batch, self.max_len)
        prefill_slots = min(e.max_batch, PREFILL_SLOTS)
        if e.prefix_caching:   # the workload's own ceiling beside the measured hit rate (one prefill worker's pool)
            from backend.targets.engine_run import ceiling_figures
            prefill_blocks = kv_capacity_of(config, prefill_slots, self.max_len) // e.kv_block_size
            self.recorder.accumulator.prefix_ideal = ceiling_figures(
                self.source, e.kv_block_size, prefill_blocks, min(self.max_len, self.decode_capacity), prefill_only=True)
        self.transport = resolve_transport(e.kv_transport)
        cores = list(available_cores())
        if config.threads is not None:
            cores = cores[-config.threads:]
        self.layout = plan_layout(e.prefill_workers, e.decode_workers, cores)
        self.devices = worker_devices(config.model.device, len(self.layout), _cuda_devices(config.model.device))
        try:
            self.start_workers(prefill_slots)
            return self.drive()
        finally:
            self.close()

    def start_workers(self, prefill_slots: int) -> None:
        import os
        import socket
        from backend.engine.kv_transfer import new_memfd
        from backend.launcher import start_child
        from backend.targets.disaggregated.worker_base import WorkerSpec
        from backend.targets.engine_run import kv_capacity_of
        config, e = self.config, self.config.engine
        P, D = e.prefill_workers, e.decode_workers
        links: dict[tuple[int, int], tuple] = {(p, d): socket.socketpair() for p in range(P) for d in range(D)}
        arenas = {p: new_memfd(f"phasescope-kv-{p}") for p in range(P)} if self.transport == "shm" else {}
        prefill_capacity = kv_capacity_of(config, prefill_slots, self.max_len)
        self.emit(Progress(f"starting {P} prefill + {D} decode engine processes", None))
        try:
            for (name, cores), device in zip(self.layout, self.devices):
                role, index = name.split("-")[0], int(name.split("-")[1])
                own = replace(config, model=replace(config.model, device=device))
                if role == "prefill":
                    fds = {d: links[(index, d)][0].fileno() for d in range(D)}
                    arena_fds = {index: arenas[index]} if arenas else {}
                    spec = WorkerSpec(role, index, own, cores, prefill_slots, self.max_len, prefill_capacity,
                                      self.transport, fds, arena_fds)
                else:
                    fds = {p: links[(p, index)][1].fileno() for p in range(P)}
                    spec = WorkerSpec(role, index, own, cores, e.max_batch, self.max_len, self.decode_capacity,
                                      self.transport, fds, dict(arenas))
                process, conn = start_child("backend.targets.disaggregated.worker", "serve_fd",
                                            (*fds.values(), *spec.arenas.values()))
                slot = WorkerSlot(name, role, index, cores, process, Port(conn, Channel.WORKER, Side.COORDINATOR))
                self.workers.append(slot)
                slot.conn.send(Init(spec))
        finally:   # the children hold their ends now: ours close, so a dead peer reads as EOF
            for a, b in links.values():
                a.close()
                b.close()
            for fd in arenas.values():
                os.close(fd)
        self.emit(Progress(f"loading {config.model.name} in {len(self.workers)} engine processes", None))
        deadline = time.monotonic() + READY_TIMEOUT_S
        waiting = {w.name for w in self.workers}
        while waiting:
            if self.should_stop():
                raise RunError("stopped while the engine processes were loading")
            for w in self.workers:
                if w.name not in waiting:
                    continue
                message = self.receive(w, timeout=0.1)
                if isinstance(message, Ready):
                    w.ready = message.info
                    waiting.discard(w.name)
                elif isinstance(message, Failed):
                    raise RunError(f"{w.name} failed while loading: {message.line}")
            if time.monotonic() > deadline:
                raise RunError(f"{', '.join(sorted(waiting))} did not load the model within {READY_TIMEOUT_S:.0f} s")
        loaded = self.workers[-1].ready.loaded   # a decode worker's: its cache is where requests live
        loaded.kv_capacity = self.decode_capacity * e.decode_workers
        self.emit(loaded)
        self.loaded = loaded
        from backend.targets.disaggregated.events import WorkerLayout
        self.emit(WorkerLayout([{"name": w.name, "role": w.role, "cores": w.cores, "pid": w.ready.pid,
                                 "threads": w.ready.threads} for w in self.workers], self.transport))

    def receive(self, w: WorkerSlot, timeout: float) -> Message | None:
        """The worker's next message within timeout (None: nothing yet); a worker that died reads as
        Failed with how it ended."""
        try:
            if not w.conn.poll(timeout):
                if w.process.poll() is not None:
                    return Failed(self.how(w))
                return None
            return w.conn.recv()
        except (EOFError, OSError):
            return Failed(self.how(w))

    @staticmethod
    def how(w: WorkerSlot) -> str:
        from backend.launcher import describe_exit
        try:
            w.process.wait(1.0)
        except Exception:   # noqa: BLE001 -- still running after its socket closed: it stopped answering
            return describe_exit(None)
        return describe_exit(w.process.returncode)

    # ---- the run --------------------------------------------------------------------------------

    def now_ms(self) -> float:
        return (time.monotonic() - self.t0) * 1000.0

    def drive(self) -> RunFinished:
        self.emit(Progress("running", None))
        wall_start = time.perf_counter()
        self.t0 = time.monotonic()
        for w in self.workers:
            self.send(w, Start(self.t0))
        stopped = False
        while True:
            if self.should_stop():
                stopped = True
                break
            self.dispatch_arrivals()
            if self.source.is_exhausted() and all(t.stage == "done" for t in self.tracks.values()):
                break
            nxt = self.source.next_arrival_ms()
            timeout = IDLE_S if nxt is None else min(IDLE_S, max(0.0, nxt - self.now_ms()) / 1000.0)
            live = {w.conn: w for w in self.workers if w.alive}
            for conn in wait(list(live), timeout):
                self.on_message(live[conn])
        self.finish_workers()
        self.record_unfinished("stopped by user" if stopped else "unfinished")
        from backend.targets.disaggregated.summary import disaggregated_figures
        summary = self.recorder.summary()
        summary = summary.merged(disaggregated_figures(self.recorder.accumulator.requests))
        error = "; ".join(self.errors) if self.errors else None
        return self.recorder.finish(self.info(time.perf_counter() - wall_start), stopped, error, summary)

    def dispatch_arrivals(self) -> None:
        arrived = self.source.due(self.now_ms())
        if not arrived:
            return
        self.emit(RequestsArrived([s.request_id for s in arrived], [s.arrival_ms for s in arrived],
                                  [len(s.prompt_ids) for s in arrived]))
        for spec in arrived:
            reason = self.rejection(spec)
            if reason:
                self.tracks[spec.request_id] = Track(spec, -1, -1, "done")
                self.recorder.add(RecordBatch(requests=[rejected_record(spec, reason)]))
                self.source.on_finish(self.now_ms(), spec.request_id, [])
                continue
            prefill = [w for w in self.workers if w.alive and w.role == "prefill"]
            decode = [w for w in self.workers if w.alive and w.role == "decode"]
            if not prefill or not decode:
                missing = "prefill" if not prefill else "decode"
                self.tracks[spec.request_id] = Track(spec, -1, -1)
                self.fail([spec.request_id], f"no {missing} worker left ({'; '.join(self.errors)})")
                continue
            p = min(prefill, key=lambda w: (w.queued_tokens, w.index))
            d = min(decode, key=lambda w: (w.assigned, w.index))
            p.queued_tokens += len(spec.prompt_ids)
            d.assigned += 1
            self.tracks[spec.request_id] = Track(spec, p.index, d.index)
            self.send(p, Dispatch(spec, d.index))

    def rejection(self, spec) -> str:
        return rejection(len(spec.prompt_ids), spec.max_new_tokens, self.max_len, self.decode_capacity,
                         "a decode worker's cache")

    def on_message(self, w: WorkerSlot) -> None:
        try:
            message = w.conn.recv()
        except (EOFError, OSError):
            self.on_death(w, self.how(w))
            return
        if isinstance(message, WorkerRecords):
            self.on_events(w, message)
        elif isinstance(message, Failed):
            self.on_death(w, f"failed: {message.line}")
        elif isinstance(message, Done):
            w.done = True

    def on_events(self, w: WorkerSlot, message: WorkerRecords) -> None:
        batch, handed, received = message.batch, message.handed, message.received
        out = RecordBatch()
        for step in batch.steps:
            step.run_id, step.step = self.run_id, self.step_index
            self.step_index += 1
            out.steps.append(step)
        for rid, scheduled in batch.scheduled.items():
            track = self.tracks.get(rid)
            if track is not None and track.stage != "done":
                track.scheduled_ms = scheduled
                out.scheduled[rid] = scheduled
        for rid, _ms in handed:
            track = self.tracks.get(rid)
            if track is not None and not track.handed:
                track.handed = True
                self.workers_of("prefill")[track.prefill].queued_tokens -= len(track.spec.prompt_ids)
        for rid in received:
            track = self.tracks.get(rid)
            if track is not None and track.stage == "prefill":
                track.stage = "decode"
        for token in batch.tokens:
            track = self.tracks.get(token.request_id)
            if track is not None and track.stage != "done":
                track.token_times.append(token.time_ms)
                track.token_ids.append(token.token_id)
                out.tokens.append(token)
        out.text = {rid: t for rid, t in batch.text.items() if self.tracks.get(rid) and self.tracks[rid].stage != "done"}
        for record in batch.requests:
            track = self.tracks.get(record.request_id)
            if track is None or track.stage == "done":
                continue
            track.stage = "done"
            self.workers_of("decode")[track.decode].assigned -= 1
            record.conversation_id, record.turn = track.spec.conversation_id, track.spec.turn
            out.requests.append(record)
        self.recorder.add(out)
        for record in out.requests:
            self.source.on_finish(self.now_ms(), record.request_id, self.tracks[record.request_id].token_ids)

    def workers_of(self, role: str) -> list[WorkerSlot]:
        return [w for w in self.workers if w.role == role]

    def on_death(self, w: WorkerSlot, how: str) -> None:
        if not w.alive:
            return
        w.alive = False
        reason = f"{w.name} {how}"
        if w.role == "prefill":
            lost = [rid for rid, t in self.tracks.items() if t.stage == "prefill" and t.prefill == w.index]
        else:
            lost = [rid for rid, t in self.tracks.items() if t.stage != "done" and t.decode == w.index]
        self.errors.append(f"{reason}: its {len(lost)} request(s) failed")
        self.fail(lost, reason)

    def fail(self, request_ids: list[int], reason: str) -> None:
        """Requests that cannot finish: an error record each; the workers still holding them drop them."""
        if not request_ids:
            return
        now = self.now_ms()
        out = RecordBatch()
        for rid in request_ids:
            track = self.tracks[rid]
            out.requests.append(self.record_of(track, RequestStatus.ERROR, reason, now))
            if track.stage != "done" and track.decode >= 0:
                self.workers_of("decode")[track.decode].assigned -= 1
            if track.stage != "done" and track.prefill >= 0 and not track.handed:
                track.handed = True
                self.workers_of("prefill")[track.prefill].queued_tokens -= len(track.spec.prompt_ids)
            track.stage = "done"
        for w in self.workers:
            if w.alive:
                self.send(w, Cancel(list(request_ids)))
        self.recorder.add(out)
        for rid in request_ids:
            self.source.on_finish(now, rid, [])

    def record_of(self, track: Track, status: RequestStatus, reason: str, now: float) -> RequestRecord:
        spec, times = track.spec, track.token_times
        record = RequestRecord.from_times(
            request_id=spec.request_id, status=status, prompt_tokens=len(spec.prompt_ids), output_tokens=len(times),
            arrival_ms=spec.arrival_ms, scheduled_ms=track.scheduled_ms, first_token_ms=times[0] if times else None,
            last_token_ms=times[-1] if times else None, finish_ms=now if status is RequestStatus.ERROR else None,
            finish_reason=reason)
        record.conversation_id, record.turn = spec.conversation_id, spec.turn
        return record

    def record_unfinished(self, reason: str) -> None:
        out = RecordBatch()
        for track in self.tracks.values():
            if track.stage == "done":
                continue
            status = (RequestStatus.DECODING if track.token_times else
                      RequestStatus.PREFILLING if track.scheduled_ms is not None else RequestStatus.WAITING)
            out.requests.append(self.record_of(track, status, reason, self.now_ms()))
            track.stage = "done"
        if out.requests:
            self.recorder.add(out)

    def send(self, w: WorkerSlot, message: Message) -> None:
        try:
            w.conn.send(message)
        except OSError:
            pass   # it is gone; its socket reads EOF and on_death follows

    def finish_workers(self) -> None:
        """Ask every live worker to stop and take its last records."""
        for w in self.workers:
            if w.alive:
                self.send(w, Stop())
        deadline = time.monotonic() + DONE_TIMEOUT_S
        while time.monotonic() < deadline:
            live = {w.conn: w for w in self.workers if w.alive and not w.done}
            if not live:
                break
            for conn in wait(list(live), 0.1):
                w = live[conn]
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    w.alive = False
                    continue
                if isinstance(message, WorkerRecords):
                    self.on_events(w, message)
                elif isinstance(message, Done):
                    w.done = True

    def close(self) -> None:
        from backend.launcher import end_process
        for w in self.workers:
            if w.process is None:
                continue
            try:
                w.process.wait(1.0 if w.done else 0.1)
            except Exception:   # noqa: BLE001 -- still running: ended below
                pass
            end_process(w.process)
            w.conn.close()

    def info(self, wall_s: float) -> RunInfo:
        from backend.results.matmul import steps_by_unit
        from backend.targets.engine_run import library_versions
        info = self.loaded.info()
        # the run's threads and cores: every worker's together (each one's are in the layout)
        threads = sum(w.ready.threads if w.ready else 0 for w in self.workers)
        cores = sorted({c for w in self.workers for c in (w.ready.affinity if w.ready else None) or w.cores})
        # every worker loads the same model with the same --prefill-math: a prefill worker's choice
        # names the run's (its probe ran the same model); each phase's steps ran in their own pool
        matmul = next((w.ready.matmul for w in self.workers if w.ready and w.ready.matmul), None)
        return replace(info, target=TargetKind.DISAGGREGATED, arch=self.loaded.shape.arch,
                       kv_slots=self.config.engine.max_batch, max_len=self.max_len,
                       kv_capacity=self.decode_capacity * self.config.engine.decode_workers,
                       versions=library_versions(), wall_s=wall_s, created=now_created(),
                       local=LocalInfo(threads=threads, affinity=cores, matmul=matmul,
                                       matmul_steps=steps_by_unit(matmul, self.recorder.step_rows)),
                       disaggregated=self.layout_info())

    def layout_info(self) -> DisaggregatedInfo:
        from backend.engine.kv_transfer import NUM_BUFFERS
        return DisaggregatedInfo(
            prefill_workers=self.config.engine.prefill_workers, decode_workers=self.config.engine.decode_workers,
            kv_transport=self.transport, kv_buffers=NUM_BUFFERS if self.transport == "shm" else 0,
            workers=[{"name": w.name, "role": w.role, "cores": w.cores, "pid": w.ready.pid if w.ready else None,
                      "threads": w.ready.threads if w.ready else None,
                      "kv_slots": w.ready.num_slots if w.ready else None,
                      "kv_capacity": w.ready.kv_capacity if w.ready else None, "alive_at_end": w.alive}
                     for w in self.workers],
            shared_cores=len({c for w in self.workers for c in w.cores}) < sum(len(w.cores) for w in self.workers))
