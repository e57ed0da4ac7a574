"""The engine loop: arrivals -> schedule -> run -> update requests -> records.

Arrivals happen in wall-clock time while the engine runs; when nothing is waiting or
running the engine idles until the next arrival. The clock and the sleep are injected,
so the loop can be driven by a fake clock in tests.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from backend.workload.arrivals import RequestSource
from backend.errors import one_line
from backend.records import RecordBatch, StepRecord, TokenRecord
from backend.engine.kv_watch import KvWatch
from backend.engine.request import Request
from backend.engine.scheduler import Scheduler
from backend.events import RequestsArrived

IDLE_POLL_S = 0.05  # longest idle sleep, so Stop is honoured while waiting for arrivals


@dataclass(slots=True)
class EngineResult:
    """How the loop ended; its records went to `emit` (a RunRecorder keeps them: backend/results/recorder.py)."""

    run_id: str
    stopped: bool = False
    error: str | None = None


class Engine:
    """Drives a scheduler and a runner over a request source, emitting one RecordBatch per step."""

    def __init__(self, scheduler: Scheduler, runner, run_id: str, tokenizer=None,
                 stop_ids: frozenset[int] = frozenset(), ignore_eos: bool = False,
                 clock: Callable[[], float] = time.perf_counter, sleep: Callable[[float], None] = time.sleep,
                 speculator=None):
        self.scheduler = scheduler
        self.runner = runner
        self.run_id = run_id
        self.tokenizer = tokenizer
        self.stop_ids = stop_ids
        self.ignore_eos = ignore_eos
        self.clock = clock
        self.sleep = sleep
        self._requests: dict[int, Request] = {}
        self._text: dict[int, str] = {}
        self._announced: set[int] = set()   # requests whose admission time was emitted
        self.kv_watch = KvWatch(scheduler)    # the window's KV map, a few snapshots a second
        self.speculator = speculator          # backend/engine/spec/speculator.py: guesses before each step, or None

    def run(self, source: RequestSource, emit: Callable[[object], None],
            should_stop: Callable[[], bool]) -> EngineResult:
        result = EngineResult(self.run_id)
        # locals: a simulated run goes round this loop tens of thousands of times a second
        clock, scheduler, runner, announced = self.clock, self.scheduler, self.runner, self._announced
        watch = self.kv_watch
        t0 = clock()

        def now_ms() -> float:
            return (clock() - t0) * 1000.0

        step_index = 0
        try:
            while True:
                if should_stop():
                    result.stopped = True
                    break
                arrived = self._admit_arrivals(source, now_ms())
                if arrived:
                    emit(RequestsArrived([r.request_id for r in arrived], [r.arrival_ms for r in arrived],
                                         [len(r.prompt_ids) for r in arrived]))
                draft_ms = 0.0
                if self.speculator is not None and scheduler.num_running:
                    # the guesses come before the step (the scheduler counts them); their time is the draft's own
                    begun = now_ms()
                    self.speculator.propose(scheduler.running_requests)
                    draft_ms = now_ms() - begun
                start = now_ms()
                out = scheduler.schedule(start)
                batch = RecordBatch()
                for chunk in out.prefill:
                    req = chunk.request
                    if req.request_id not in announced:
                        announced.add(req.request_id)
                        batch.scheduled[req.request_id] = req.scheduled_ms
                        if chunk.start:   # its cached prefix (paged, prefix caching): where its prefill begins
                            watch.admitted(req, chunk.start)
                if out.rejected:
                    self._retire(out.rejected, batch, source, start)
                num_tokens = out.num_tokens
                if num_tokens == 0:
                    if batch.requests:
                        emit(batch)
                        continue
                    if not scheduler.has_work and source.is_exhausted():
                        break
                    nxt = source.next_arrival_ms()
                    wait_s = IDLE_POLL_S if nxt is None else min(IDLE_POLL_S, max(0.0, nxt - now_ms()) / 1000)
                    self.sleep(wait_s)
                    continue
                # context attended to by each request in this step: cached tokens + the new ones
                contexts = [c.request.num_computed + c.num_tokens for c in out.prefill] if out.prefill else []
                contexts += [r.num_computed + 1 + len(r.spec_ids) for r in out.decode]
                kv_tokens = scheduler.kv_tokens_after(out)   # in use once this step has written
                sampled = runner.run(out)
                end = now_ms()
                finished = scheduler.update(out, sampled, end)
                record = self._step_record(step_index, out, contexts, kv_tokens, start, end, draft_ms)
                batch.steps.append(record)
                if self.speculator is not None:
                    self.speculator.observe(record)   # its cost ratio: when guessing pays
                step_index += 1
                batch.tokens = token_records(sampled, self._requests, end, out.emitted)
                if self.tokenizer is not None:
                    self._stream_text(sampled, batch)
                if finished:
                    self._retire(finished, batch, source, end)
                emit(batch)
                if watch.due(end):
                    emit(watch.snapshot(end))
        except Exception as exc:  # the partial run is kept; the caller shows the message
            result.error = one_line(exc, typed=True)
        if step_index and result.error is None:   # the cache as the run left it (finished: cached and free blocks)
            emit(watch.snapshot(now_ms(), final=True))
        self._record_unfinished(result, emit)
        return result

    # ---- helpers -------------------------------------------------------------------------

    def _admit_arrivals(self, source: RequestSource, now: float) -> list[Request]:
        arrived = []
        for spec in source.due(now):
            req = Request.from_spec(spec, self.stop_ids, self.ignore_eos)
            self._requests[req.request_id] = req
            self.scheduler.add(req)
            arrived.append(req)
        return arrived

    def _step_record(self, index: int, out, contexts: list[int], kv_tokens: int, start: float,
                     end: float, draft_ms: float = 0.0) -> StepRecord:
        # a runner that measures no reads (the simulator's, a test's stand-in) leaves them 0
        reads = getattr(self.runner, "step_reads", None)
        experts_touched, weight_bytes = reads() if reads is not None else (0, 0)
        return StepRecord.measured(
            run_id=self.run_id, step=index, phase=out.phase,
            prefill_tokens=[c.num_tokens for c in out.prefill] if out.prefill else (),
            num_decode=len(out.decode), contexts=contexts, start_ms=start, duration_ms=end - start,
            kv_tokens=kv_tokens, kv_capacity=self.scheduler.config.kv_capacity,
            num_waiting=self.scheduler.num_waiting, num_running=self.scheduler.num_running,
            experts_touched=experts_touched, weight_bytes=weight_bytes, num_reused_tokens=out.num_reused_tokens,
            num_evictions=out.num_evictions, num_proposed_tokens=out.num_draft_tokens,
            num_accepted_tokens=sum(out.accepted.values()), draft_ms=draft_ms)

    def _stream_text(self, sampled: dict[int, int], batch: RecordBatch) -> None:
        if self.tokenizer is None:
            return
        for rid in sampled:
            text = self.tokenizer.decode(self._requests[rid].output_ids)
            old = self._text.get(rid, "")
            # hold back a trailing replacement char: a multi-byte character may be half decoded
            if text.endswith("\ufffd"):
                continue
            if len(text) > len(old):
                batch.text[rid] = text[len(old):] if text.startswith(old) else text
            self._text[rid] = text

    def _retire(self, requests: list[Request], batch: RecordBatch, source: RequestSource, now: float) -> None:
        for req in requests:
            batch.requests.append(req.to_record(self._final_text(req)))
            source.on_finish(now, req.request_id, req.output_ids)
            self._requests.pop(req.request_id, None)
            self._text.pop(req.request_id, None)
            self._announced.discard(req.request_id)

    def _final_text(self, req: Request) -> str:
        if self.tokenizer is None or not req.output_ids:
            return ""
        return self.tokenizer.decode(req.output_ids)

    def _record_unfinished(self, result: EngineResult, emit) -> None:
        record_unfinished(self._requests, result, emit, self._final_text)


def token_records(sampled: dict[int, int], requests: dict[int, Request], time_ms: float,
                  emitted: dict[int, int] | None = None) -> list[TokenRecord]:
    """The tokens a step sampled (`sampled`'s requests, whose outputs hold them last), all at `time_ms`:
    the engine loop's and the simulated replicas' (one record per token: the positional form is the fast one).
    `emitted`: the requests that appended several tokens (a verification's kept guesses), how many."""
    out = []
    append = out.append
    for rid in sampled:
        output = requests[rid].output_ids
        n = len(output)
        for i in range(n - (emitted.get(rid, 1) if emitted else 1), n):
            append(TokenRecord(rid, i, time_ms, output[i]))
    return out


def record_unfinished(requests: dict[int, Request], result: EngineResult, emit,
                      text: Callable[[Request], str] = lambda req: "") -> None:
    """Requests still queued or running when a run stopped are kept, with why they did not finish
    (the engine loop's and the simulated replicas'); `requests` is emptied."""
    reason = "stopped by user" if result.stopped else (f"run failed: {result.error}" if result.error else "")
    batch = RecordBatch()
    for req in sorted(requests.values(), key=lambda r: r.request_id):
        if req.finish_reason == "":
            req.finish_reason = reason or "unfinished"
        batch.requests.append(req.to_record(text(req)))
    requests.clear()
    if batch.requests:
        emit(batch)

