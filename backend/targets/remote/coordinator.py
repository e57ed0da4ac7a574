"""The coordinator of one remote run (`load --endpoint`): draws the workload's arrivals, builds
each prompt, hands the requests to the client worker processes (backend.targets.remote.pool; or
actors on a Ray cluster, backend.targets.remote.ray_pool) at their planned times, and merges what the workers send back into one stream of records for the
calling thread. backend.targets.remote.target sets it up and turns its records into a run.
"""
from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import Counter, deque
from typing import Callable

import httpx

from backend.config import RemoteEndpoint, SamplingConfig
from backend.errors import one_line
from backend.events import Emit, RequestsArrived
from backend.protocol import Abort, ClientRecords, Crashed, End, Job, Lost, Message, RequestRow, Stop, Users
from backend.results.export import RunWriter
from backend.records import RecordBatch, RequestRecord, RequestStatus, TokenRecord
from backend.targets.remote.chunk_tokens import ChunkCounter, token_records
from backend.targets.remote.client import MAX_DETAIL
from backend.targets.remote.honesty import ClientLoad
from backend.targets.remote.metrics import ServerMetrics, metrics_url, poll_metrics, read_metrics, server_metrics
from backend.targets.remote.server_log import ServerLog
from backend.targets.remote.pool import WorkerPool
from backend.targets.remote.turns import Turns
from backend.targets.remote.prompts import SYNTHETIC_FIRST_ID, PromptBuilder
from backend.workload.arrivals import RequestSource

FLUSH_S = 0.05        # records reach `emit` in batches at most this old
POLL_S = 0.04         # the dispatcher's longest sleep, so Stop lands within ~100 ms
LOOKAHEAD_MS = 20.0   # requests go to their worker this early; it sends each at its planned time
RESERVE = 2           # closed loop: next requests each worker holds, sent the moment one of its users is free
ABORT_AFTER = 4       # this many failures and not one success: the server refuses every request

_DONE = object()
_STATUS = {"finished": RequestStatus.FINISHED, "error": RequestStatus.ERROR, "decoding": RequestStatus.DECODING,
           "prefilling": RequestStatus.PREFILLING, "waiting": RequestStatus.WAITING}
REFUSED_IDS = ("http_400", "http_422", "http_500")   # how servers that take text only answer token ids


def _interleave(groups: list[list[int]]) -> list[int]:
    """[[0, 0, 0], [1, 1]] -> [0, 1, 0, 1, 0]"""
    out, i = [], 0
    while any(i < len(g) for g in groups):
        out.extend(g[i] for g in groups if i < len(g))
        i += 1
    return out


class RemoteRun:
    """The coordinator of one remote run: arrivals, prompts and the workers' merged records.

    Runs as an asyncio loop on a helper thread and hands events to the calling thread through a queue.
    """

    def __init__(self, run_id: str, endpoint: RemoteEndpoint, sampling: SamplingConfig, source: RequestSource,
                 builder: PromptBuilder, num_workers: int, synthetic: bool, users: int | None = None,
                 ramp_ms: float = 0.0, think_ms: float = 0.0, turns: int = 1):
        self.run_id = run_id
        self.endpoint = endpoint
        self.sampling = sampling
        self.source = source
        self.builder = builder
        self.num_workers = num_workers
        self.synthetic = synthetic
        # a closed loop's users, spread over the workers; each worker's first requests (its users' and
        # RESERVE more) are handed out in turn, later ones to the worker whose request just left
        self.closed = users is not None
        self.users = [] if users is None else [users // num_workers + (k < users % num_workers)
                                               for k in range(num_workers)]
        self._initial = deque(_interleave([[k] * (n + RESERVE) for k, n in enumerate(self.users) if n]))
        # user u (worker u % num_workers) starts at u x ramp / users, and waits think_ms after each answer
        self.user_starts = [[u * ramp_ms / users for u in range(k, users, num_workers)] for k in range(num_workers)] \
            if users else []
        self.think_ms = think_ms
        self.requests: list[RequestRecord] = []
        self.tokens: list[TokenRecord] = []
        self.errors: Counter[str] = Counter()
        self.num_ok = 0
        self.num_refused_since_ok = 0           # connections refused since the last request that finished
        self.num_early = 0                      # finished before their requested length
        self.early_reasons: Counter[str] = Counter()
        self.late_ms: list[float] = []          # each sent request: sent minus when it could have gone out
        self.wait_ms: list[float] = []          # closed loop: each next request's wait for the coordinator to make it
        self.stopped = False
        self.abort: str | None = None           # "every request failed: ..." or "the server ... stopped answering ..."
        self.crash: str | None = None           # an unexpected failure of the run itself
        self.lost: list[str] = []               # workers lost while the run went on (Ray actors)
        self.server = ServerLog()                  # the server's readings of its own load (its /metrics)
        self.events: queue.Queue = queue.Queue()
        self.stop_requested = threading.Event()
        self.pool: WorkerPool | None = None
        self.coordinator_cpu_s = 0.0
        self.wall_s = 0.0
        self._pending = RecordBatch()
        self._inflight: dict[int, tuple] = {}   # request id -> (spec, Prompt)
        self._freed: deque[int] = deque()        # closed loop: the workers whose users are free, in order
        self._built: dict[tuple[str, int], object] = {}   # (texts, length) -> Prompt: workloads reuse their texts
        self._turns = Turns(builder, turns) if turns > 1 else None   # conversations: what each turn sent and got
        # tokens per chunk where the server sends no running count: by the served model's tokenizer where there
        # is one, else one a chunk (the worker's index)
        self._chunks = ChunkCounter(builder.output_tokens) if builder.tokenizer is not None else None
        self._wake: asyncio.Event | None = None
        self._metrics: httpx.AsyncClient | None = None   # reads the server's /metrics
        self._thread = threading.Thread(target=self._thread_main, name="phasescope-remote", daemon=True)
        self._t0 = 0.0                          # set on the loop thread, read only there

    def now_ms(self) -> float:
        return (time.perf_counter() - self._t0) * 1000.0

    def start(self) -> None:
        self._thread.start()

    def pump(self, emit: Emit, writer: RunWriter | None, should_stop: Callable[[], bool]) -> None:
        """On the calling thread: pass events on until the run ends, relaying Stop."""
        try:
            while True:
                if not self.stop_requested.is_set() and should_stop():
                    self.stop_requested.set()
                try:
                    event = self.events.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                if event is _DONE:
                    break
                if writer is not None and isinstance(event, RecordBatch):
                    writer.add(event)
                emit(event)
        except BaseException:   # emit or the writer failed: stop sending before passing it on
            self.stop_requested.set()
            self._thread.join()
            raise
        self._thread.join()

    def error_message(self) -> str | None:
        if self.crash:
            return self.crash
        failed = self.num_ok == 0 and self.errors and not self.stopped
        first = next((r for r in self.requests if r.status is RequestStatus.ERROR), None)
        if (self.abort or failed) and self.synthetic and first is not None \
                and first.finish_reason.split(":")[0] in REFUSED_IDS:
            return (f"the server refused token-id prompts ({first.finish_reason}); send text prompts instead: "
                    "a workload with prompt_source = \"text\" (e.g. --workload poisson-chat)")
        if self.abort:
            return self.abort
        if failed:
            return "every request failed: " + first.finish_reason.partition(": ")[2]
        return None

    def client_load(self) -> ClientLoad:
        load = ClientLoad(self.num_workers, late_ms=self.late_ms, coordinator_cpu_s=self.coordinator_cpu_s,
                          wall_s=self.wall_s, refill_ms=self.wait_ms)
        for stats in (self.pool.stats if self.pool is not None else []):
            if stats is None:
                continue
            load.loop_lag_ms.extend(stats.lag)
            load.cpu_s += stats.cpu_s
            if stats.wall_s > 0:
                load.cpu_shares.append(stats.cpu_s / stats.wall_s)
            load.num_connections += stats.connections
            load.num_tokens += stats.tokens
            load.num_clumped += stats.clumped
        return load

    # ---- the loop thread --------------------------------------------------------------------

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception as exc:   # a bug or an unexpected library error: keep what was recorded
            self.crash = self._redact(one_line(exc, typed=True, limit=MAX_DETAIL))
        finally:
            self._flush()
            self.events.put(_DONE)

    async def _main(self) -> None:
        cpu0 = time.thread_time()
        ep = self.endpoint
        self._wake = asyncio.Event()
        job = Job(ep.url, ep.model, ep.api, ep.api_key, ep.timeout_s, self.sampling)
        if ep.ray_address:   # the workers as actors on a Ray cluster (imported only then: Ray is an extra)
            from backend.targets.remote.ray_pool import RayWorkerPool
            self.pool = RayWorkerPool(self.num_workers, job, self._on_message, name=f"phasescope-{self.run_id}")
        else:
            self.pool = WorkerPool(self.num_workers, job, self._on_message)
        background: list[asyncio.Task] = []
        try:
            await self.pool.start()
            metrics_client = None
            if ep.read_metrics:   # made now: its TLS context and first connection cost the loop ~0.1-1 s
                metrics_client = await self._metrics_client()
            first = self.source.due(LOOKAHEAD_MS)   # the first requests' prompts are built before the clock starts
            for spec in first:
                self._prompt(spec)
            self._t0 = time.perf_counter()   # the clock starts once the workers are ready: arrival 0 goes out at ~0
            for k, n in enumerate(self.users):
                self.pool.send(k, Users(n, self.user_starts[k], self.think_ms))
            self.pool.go(self._t0)
            if first:
                self._send(first)
            background.append(asyncio.create_task(self._flush_every()))
            if metrics_client is not None:
                background.append(asyncio.create_task(self._poll_metrics(metrics_client)))
            await self._dispatch()
            await self.pool.wait_all()
            self.wall_s = self.now_ms() / 1000.0
            if metrics_client is not None and self.server.readings:   # the server's figures as the run ends
                background[-1].cancel()
                _, reading = await read_metrics(metrics_client, metrics_url(ep.url), self._metrics_headers(),
                                                self.now_ms)
                if reading is not None:
                    self._on_metrics(reading)
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await self.pool.close()
            if self._metrics is not None:
                await self._metrics.aclose()
            self.coordinator_cpu_s = time.thread_time() - cpu0

    def _metrics_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.endpoint.api_key}"} if self.endpoint.api_key else {}

    async def _poll_metrics(self, client: httpx.AsyncClient) -> None:
        await poll_metrics(client, metrics_url(self.endpoint.url), self._metrics_headers(), self.now_ms,
                           self._on_metrics)

    async def _metrics_client(self) -> httpx.AsyncClient:
        """The client that reads /metrics, connected before the run's clock starts (a server without
        /metrics just answers 404 then, and again when polled); what it reads then is the counters' zero."""
        self._metrics = httpx.AsyncClient()
        try:
            response = await self._metrics.get(metrics_url(self.endpoint.url), headers=self._metrics_headers(),
                                               timeout=5.0)
            if response.status_code == 200:
                self.server.baseline(server_metrics(response.text, 0.0))
        except httpx.HTTPError:
            pass
        return self._metrics

    async def _dispatch(self) -> None:
        while True:
            self._wake.clear()
            if self.stop_requested.is_set():
                self.stopped = True
                self.pool.broadcast(Stop())
                return
            if self.abort:
                self.pool.broadcast(Abort(self.abort))
                return
            due = self.source.due(self.now_ms() + LOOKAHEAD_MS)
            if due:
                self._send(due)
            if self.source.is_exhausted() and not self._inflight:
                self.pool.broadcast(End())
                return
            nxt = self.source.next_arrival_ms()
            wait = POLL_S if nxt is None else min(POLL_S, max(0.0, nxt - LOOKAHEAD_MS - self.now_ms()) / 1000.0)
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except asyncio.TimeoutError:
                pass

    def _send(self, specs) -> None:
        for spec in specs:
            prompt = self._prompt(spec)
            if self._turns is not None:   # a conversation's prompt is built as it is sent
                content = prompt.content
            else:
                content = prompt.content if spec.prompt_text else [SYNTHETIC_FIRST_ID + i for i in prompt.content]
            self._inflight[spec.request_id] = (spec, prompt)
            if self.closed:   # at None: sent by its worker as soon as one of its users is free
                k = self._freed.popleft() if self._freed else self._initial.popleft() if self._initial else None
                self.pool.dispatch(spec.request_id, None, content, spec.max_new_tokens, k)
            else:
                self.pool.dispatch(spec.request_id, spec.arrival_ms, content, spec.max_new_tokens)

    def _prompt(self, spec):
        if self._turns is not None:
            return self._turns.prompt(spec, synthetic=not spec.prompt_text and not spec.message_text)
        if not spec.prompt_text:
            return self.builder.build(spec)
        key = (spec.prompt_text, len(spec.prompt_ids))
        prompt = self._built.get(key)
        if prompt is None:
            prompt = self._built[key] = self.builder.build(spec)
        return prompt

    # ---- what the workers send --------------------------------------------------------------

    def _on_message(self, k: int, msg: Message) -> None:
        if isinstance(msg, ClientRecords):
            self._on_records(k, msg)
        elif isinstance(msg, Crashed):
            for rid in msg.request_ids:
                self._finish_failed(rid, "client_error", msg.why)
            self.crash = self.crash or msg.why
            self.abort = self.abort or msg.why
            self._wake.set()
        elif isinstance(msg, Lost):   # a Ray actor or its node was lost: its requests fail, the others go on
            for rid in msg.request_ids:
                if self._finish_failed(rid, "worker_lost", msg.why):
                    self.source.on_finish(self.now_ms(), rid)   # a closed loop's user sends its next elsewhere
            self.lost.append(msg.why)
            self._wake.set()

    def _on_records(self, k: int, msg: ClientRecords) -> None:
        # arrivals as the workers sent them (a closed loop's next request goes out when its worker's
        # user is free); a request cancelled before it went out arrives with its record
        arrived = msg.sent + [[row.request_id, row.sent_ms] for row in msg.requests if row.status == "waiting"]
        if arrived:
            self._flush()   # the records so far before these arrivals, in order
            self.events.put(RequestsArrived([rid for rid, _ in arrived], [at for _, at in arrived],
                                            [self._inflight[rid][1].num_tokens for rid, _ in arrived]))
        batch = self._pending
        tokens = token_records(msg.tokens, msg.text, self._chunks)   # chunks the server did not count: by their text
        self.tokens.extend(tokens)
        batch.tokens.extend(tokens)
        for rid, piece in msg.text.items():
            batch.text[rid] = batch.text.get(rid, "") + piece
        for row in msg.requests:
            self.pool.finished(k, row.request_id)
            if self._on_request(row) and self.closed:
                self._freed.append(k)
        if msg.requests:
            self._wake.set()

    def _on_request(self, row: RequestRow) -> bool:
        """Take in one request's record; whether it left (so a closed loop's user sends its next)."""
        (rid, status, kind, reason, arrival, first, last, finish, n_indexed, usage_prompt, usage_output, text, late,
         usage_cached) = row[:14]
        spec, prompt = self._inflight.pop(rid)
        status = _STATUS[status]
        by_chunks = self._chunks.finish(rid) if self._chunks is not None else None
        if by_chunks is not None:   # the tokenizer counted its chunks; a final usage count still has the last word
            n_out = usage_output if usage_output is not None else by_chunks
            out_source = "server" if usage_output is not None else "tokenizer"
        else:
            n_out = max(usage_output or 0, n_indexed)
            if usage_output is not None:
                out_source = "server"
            else:   # one event per token (no tokenizer to count them): the tokenizer confirms it or it is an estimate
                counted = self.builder.output_tokens(text)
                out_source = "tokenizer" if counted == n_out or n_out == 0 else "estimate"
        if late is not None:
            self.late_ms.append(late)
        if row.wait_ms is not None and self.closed:
            self.wait_ms.append(row.wait_ms)
        if status is RequestStatus.ERROR:
            self.errors[kind] += 1
            reason = self._redact(reason)
        record = RequestRecord.from_times(
            request_id=rid, status=status, prompt_tokens=usage_prompt if usage_prompt is not None else prompt.num_tokens,
            output_tokens=n_out, arrival_ms=arrival, scheduled_ms=arrival, first_token_ms=first, last_token_ms=last,
            finish_ms=finish, finish_reason=reason, text=text)
        record.prompt_tokens_source = "server" if usage_prompt is not None else prompt.source
        record.output_tokens_source = out_source
        record.cached_prompt_tokens = usage_cached
        record.conversation_id, record.turn = spec.conversation_id, spec.turn
        record.first_chunk_ms, record.first_chunk = row.first_chunk_ms, row.first_chunk
        if status is RequestStatus.FINISHED:
            self.num_ok += 1
            self.num_refused_since_ok = 0
            if n_out < spec.max_new_tokens and reason != "length":
                self.num_early += 1
                self.early_reasons[reason] += 1
        elif status is RequestStatus.ERROR:
            self.num_refused_since_ok += kind == "connection_refused"
            if self.num_ok == 0 and sum(self.errors.values()) >= ABORT_AFTER:
                self.abort = self.abort or "every request failed: " + reason.partition(": ")[2]
            elif self.num_ok and self.num_refused_since_ok >= ABORT_AFTER:   # it answered, then went away
                self.abort = self.abort or (f"the server at {self.endpoint.url} stopped answering after "
                                            f"{self.num_ok} requests (connection refused)")
        self._finish(record)
        if status in (RequestStatus.FINISHED, RequestStatus.ERROR):
            if self._turns is not None:
                self._turns.answered(rid, text if status is RequestStatus.FINISHED else "", n_out)
            self.source.on_finish(finish, rid)   # the answer's ids are not known here: the source's stand-in
            return True
        return False

    def _finish_failed(self, rid: int, kind: str, why: str) -> bool:
        entry = self._inflight.pop(rid, None)
        if entry is None:
            return False
        spec, prompt = entry
        self.errors[kind] += 1
        record = RequestRecord.from_times(request_id=rid, status=RequestStatus.ERROR, prompt_tokens=prompt.num_tokens,
                                          output_tokens=0, arrival_ms=spec.arrival_ms, finish_ms=self.now_ms(),
                                          finish_reason=f"{kind}: {why}")
        record.prompt_tokens_source = prompt.source
        record.conversation_id, record.turn = spec.conversation_id, spec.turn
        self._finish(record)
        if self._turns is not None:
            self._turns.answered(rid, "", 0)
        return True

    def _finish(self, record: RequestRecord) -> None:
        self.requests.append(record)
        self._pending.requests.append(record)

    def _on_metrics(self, reading: ServerMetrics) -> None:
        self.server.add(reading)
        self.events.put(reading)

    async def _flush_every(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            self._flush()

    def _flush(self) -> None:
        batch = self._pending
        if batch.tokens or batch.requests or batch.text:
            self._pending = RecordBatch()
            self.events.put(batch)

    def _redact(self, text: str) -> str:
        key = self.endpoint.api_key
        return text.replace(key, "***") if key else text
