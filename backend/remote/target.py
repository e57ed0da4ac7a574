"""`load --endpoint`: the same workloads sent to an OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp).

The server's engine steps are invisible from outside, so a remote run has request and token
records only, timed on this machine's clock: sent, first token, every later token, end. The
requests go out from an asyncio loop on a helper thread (one pooled HTTP client, every request
in flight at once); the calling thread receives the events, so a slow `emit` never delays the
clock readings.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlsplit

import httpx

from backend.workload.arrivals import RequestSource
from backend.config import RunConfig, SamplingConfig
from backend.errors import InputError, one_line
from backend.events import Emit, Progress, RequestsArrived, RunFinished
from backend.io.export import RunData, RunWriter
from backend.records import RecordBatch, RequestRecord, RequestStatus, TokenRecord
from backend.remote.client import MAX_DETAIL, RemoteFailure, StreamState, Streamer, TextPieces, request_record, safe_url
from backend.remote.metrics import ServerMetrics, metrics_url, poll_metrics

APIS = ("completions", "chat")
FLUSH_S = 0.05        # records reach `emit` in batches at most this old
POLL_S = 0.04         # the dispatcher's longest sleep, so Stop lands within ~100 ms
ABORT_AFTER = 4       # this many failures and not one success: the server refuses every request
# Synthetic prompts are random ids: kept in [1000, 32000) to miss the special and control tokens
# most tokenizers put first, and within the smallest vocabulary in common use (Llama 2, Mistral).
SYNTHETIC_FIRST_ID, SYNTHETIC_VOCAB = 1000, 32000


@dataclass(slots=True)
class RemoteEndpoint:
    """Where a remote run sends its requests; its repr leaves the key out."""

    url: str                                      # base URL, e.g. http://127.0.0.1:8000/v1
    model: str                                    # the served model name
    api_key: str | None = field(default=None, repr=False)   # never written anywhere
    api: str = "completions"                      # completions | chat
    timeout_s: float = 120.0                      # longest wait to connect or for the next event
    read_metrics: bool = True                     # poll the server's Prometheus /metrics

    def validate(self) -> None:
        parts = urlsplit(self.url)
        try:
            parts.port   # parsed lazily: a port that is not a number raises here
        except ValueError:
            raise InputError(f"--endpoint {self.url!r}: the port is not a number") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            shown = safe_url(self.url) if parts.scheme else self.url
            raise InputError(f"--endpoint {shown!r}: expected an http(s) URL such as http://127.0.0.1:8000/v1")
        if not self.model.strip():
            raise InputError("--served-model is empty: give the name the server serves (see GET <endpoint>/models)")
        if self.api not in APIS:
            raise InputError(f"--api {self.api!r}: use completions or chat")
        if not self.timeout_s > 0:
            raise InputError(f"--request-timeout must be a positive number of seconds, got {self.timeout_s}")


def add_remote_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("remote target (an OpenAI-compatible server instead of the local engine)")
    g.add_argument("--endpoint", help="base URL of the server's OpenAI API, e.g. http://127.0.0.1:8000/v1")
    g.add_argument("--served-model", help="model name the server serves (its GET /v1/models)")
    g.add_argument("--api-key", help="bearer token; better given as PHASESCOPE_API_KEY or OPENAI_API_KEY "
                   "(a flag shows in the process list). Never written to any file")
    g.add_argument("--api", choices=APIS, default="completions", help="/v1/completions or /v1/chat/completions")
    g.add_argument("--request-timeout", type=float, default=120.0, metavar="S",
                   help="seconds to wait to connect or for the next streamed event")
    g.add_argument("--no-server-metrics", action="store_true", help="do not poll the server's /metrics")


def env_api_key() -> str:
    """The API key from the environment: PHASESCOPE_API_KEY, else OPENAI_API_KEY ("" for none)."""
    return (os.environ.get("PHASESCOPE_API_KEY") or os.environ.get("OPENAI_API_KEY") or "").strip()


def endpoint_from_args(args) -> RemoteEndpoint | None:
    """The endpoint the flags name, or None for a local run; InputError for bad flags."""
    if args.endpoint is None:
        for flag in ("served_model", "api_key"):
            if getattr(args, flag) is not None:
                raise InputError(f"--{flag.replace('_', '-')} needs --endpoint URL")
        return None
    if not args.served_model:
        raise InputError("--endpoint needs --served-model NAME (the name the server serves, see GET <endpoint>/models)")
    url = args.endpoint.rstrip("/")
    if urlsplit(url).path == "":
        url += "/v1"   # a bare host:port means the usual /v1 root
    key = (args.api_key or env_api_key()).strip() or None   # a key read from a file often ends in a newline
    endpoint = RemoteEndpoint(url, args.served_model, key, args.api, args.request_timeout,
                              not args.no_server_metrics)
    endpoint.validate()
    return endpoint


def run_remote(config: RunConfig, emit: Emit, should_stop: Callable[[], bool]) -> RunFinished:
    """Send `config.workload` to `config.endpoint`, emitting events as for a local run; InputError for bad settings."""
    from backend.io.summary import summarize
    from backend.config import config_dict
    from backend.records import new_run_id
    from backend.workload.arrivals import WorkloadSource
    from backend.workload.spec import validate_workload
    endpoint = config.endpoint
    endpoint.validate()
    if config.workload is None:
        raise InputError("a remote run needs a workload (--workload NAME|PATH)")
    spec = validate_workload(config.workload)
    if endpoint.api == "chat" and spec.prompt_source != "text":
        raise InputError("--api chat sends text: use a workload with prompt_source = \"text\", or --api completions "
                         "(synthetic token ids go to /v1/completions)")
    pieces = TextPieces()
    source = WorkloadSource(spec, tokenize=pieces.encode, vocab_size=SYNTHETIC_VOCAB - SYNTHETIC_FIRST_ID)
    writer = RunWriter(config.out_dir) if config.out_dir else None
    run = _RemoteRun(new_run_id(), endpoint, config.sampling, source, pieces)
    try:
        emit(Progress(f"sending {spec.name} to {safe_url(endpoint.url)} ({endpoint.model})", None))
        run.start()
        run.pump(emit, writer, should_stop)
        summary = summarize([], run.requests, run.tokens, config.slo_ttft_ms, config.slo_tpot_ms)
        summary.update({f"errors_{kind}": n for kind, n in sorted(run.errors.items())})
        summary.update({f"server_{name}_max": value for name, value in run.metrics_peak.items()})
        cfg = config_dict(config)
        cfg["remote"] = {"url": safe_url(endpoint.url), "model": endpoint.model, "api": endpoint.api,
                         "timeout_s": endpoint.timeout_s, "read_metrics": endpoint.read_metrics}
        data = RunData(run_id=run.run_id, config=cfg, info=_info(endpoint, run), requests=run.requests,
                       tokens=run.tokens, summary=summary)
        if writer is not None:
            writer.close(data)
        return RunFinished(run.run_id, summary, run.stopped, run.error_message(), data)
    finally:
        if writer is not None:
            writer.abandon()


def _info(endpoint: RemoteEndpoint, run: _RemoteRun) -> dict:
    from backend import __version__
    return {"target": "remote", "endpoint": safe_url(endpoint.url), "served_model": endpoint.model,
            "model": endpoint.model, "api": endpoint.api, "device": "remote",
            "server_metrics": bool(run.metrics_peak),
            "note": "server engine steps are not visible from outside: steps.csv is empty, queue_ms is 0",
            "versions": {"phasescope": __version__, "python": platform.python_version(), "httpx": httpx.__version__},
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


_DONE = object()


class _RemoteRun:
    """The asyncio side of one remote run; hands events to the calling thread through a queue."""

    def __init__(self, run_id: str, endpoint: RemoteEndpoint, sampling: SamplingConfig, source: RequestSource,
                 pieces: TextPieces):
        self.run_id = run_id
        self.endpoint = endpoint
        self.sampling = sampling
        self.source = source
        self.pieces = pieces
        self.requests: list[RequestRecord] = []
        self.tokens: list[TokenRecord] = []
        self.errors: Counter[str] = Counter()
        self.num_ok = 0
        self.stopped = False
        self.abort: str | None = None           # "every request failed: ..."
        self.crash: str | None = None           # an unexpected failure of the run itself
        self.metrics_peak: dict[str, float] = {}   # the highest reading of each server gauge
        self.events: queue.Queue = queue.Queue()
        self.stop_requested = threading.Event()
        self._pending = RecordBatch()
        self._inflight: dict[int, tuple[asyncio.Task, StreamState]] = {}
        self._wake = asyncio.Event()            # a request ended: a closed loop may send the next
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
        if self.abort:
            return self.abort
        if self.num_ok == 0 and self.errors and not self.stopped:
            first = next(r for r in self.requests if r.status is RequestStatus.ERROR)
            return "every request failed: " + first.finish_reason.partition(": ")[2]
        return None

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
        ep = self.endpoint
        headers = {"Authorization": f"Bearer {ep.api_key}"} if ep.api_key else {}
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)   # never queue on our side
        async with httpx.AsyncClient(limits=limits) as client:
            streamer = Streamer(client, ep.url, ep.model, ep.api, headers, self.sampling, ep.timeout_s, self.now_ms)
            self._t0 = time.perf_counter()   # the clock starts once the client is ready: arrival 0 goes out at ~0
            background = [asyncio.create_task(self._flush_every())]
            if ep.read_metrics:
                background.append(asyncio.create_task(
                    poll_metrics(client, metrics_url(ep.url), headers, self.now_ms, self._on_metrics)))
            try:
                await self._dispatch(streamer)
            finally:
                tasks = [task for task, _ in self._inflight.values()] + background
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _dispatch(self, streamer: Streamer) -> None:
        while True:
            self._wake.clear()
            if self.stop_requested.is_set():
                self.stopped = True
                return
            if self.abort:
                return
            due = self.source.due(self.now_ms())
            if due:
                self._send(streamer, due)
            if self.source.is_exhausted() and not self._inflight:
                return
            nxt = self.source.next_arrival_ms()
            wait = POLL_S if nxt is None else min(POLL_S, max(0.0, nxt - self.now_ms()) / 1000.0)
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except asyncio.TimeoutError:
                pass

    def _send(self, streamer: Streamer, specs) -> None:
        sent = self.now_ms()
        for spec in specs:
            if spec.prompt_text:
                prompt = self.pieces.decode(spec.prompt_ids)
            else:
                prompt = [SYNTHETIC_FIRST_ID + i for i in spec.prompt_ids]
            state = StreamState(spec.request_id, sent)
            task = asyncio.create_task(self._one(streamer, spec, prompt, state))
            self._inflight[spec.request_id] = (task, state)
        self.events.put(RequestsArrived([s.request_id for s in specs], [sent] * len(specs),
                                        [len(s.prompt_ids) for s in specs]))

    async def _one(self, streamer: Streamer, spec, prompt, state: StreamState) -> None:
        try:
            await streamer.send(prompt, spec.max_new_tokens, state, self._on_token)
            record = request_record(state, spec, self.now_ms(), RequestStatus.FINISHED, state.finish_reason or "stop")
            self.num_ok += 1
        except Exception as exc:   # RemoteFailure, or a client-side surprise that must not lose the request
            failure = exc if isinstance(exc, RemoteFailure) \
                else RemoteFailure("client_error", one_line(exc, typed=True, limit=MAX_DETAIL))
            self.errors[failure.kind] += 1
            reason = f"{failure.kind}: {self._redact(failure.detail)}"
            record = request_record(state, spec, self.now_ms(), RequestStatus.ERROR, reason)
            if self.num_ok == 0 and sum(self.errors.values()) >= ABORT_AFTER:
                self.abort = "every request failed: " + record.finish_reason.partition(": ")[2]
        except asyncio.CancelledError:
            why = "stopped by user" if self.stopped else f"cancelled: {self.abort or 'the run failed'}"
            status = RequestStatus.DECODING if state.token_times else RequestStatus.PREFILLING
            self._finish(request_record(state, spec, self.now_ms(), status, why))
            raise
        self._finish(record)
        self.source.on_finish(self.now_ms())
        self._wake.set()

    def _finish(self, record: RequestRecord) -> None:
        self._inflight.pop(record.request_id, None)
        self.requests.append(record)
        self._pending.requests.append(record)

    def _on_token(self, state: StreamState, text: str) -> None:
        now = self.now_ms()
        index = state.token_indices[-1] + 1 if state.token_indices else 0
        if state.completion_tokens:   # a chunk that carries several tokens, counted by the server
            index = max(index, state.completion_tokens - 1)
        state.token_times.append(now)
        state.token_indices.append(index)
        state.text.append(text)
        token = TokenRecord(request_id=state.request_id, index=index, time_ms=now)
        self.tokens.append(token)
        self._pending.tokens.append(token)
        self._pending.text[state.request_id] = self._pending.text.get(state.request_id, "") + text

    def _on_metrics(self, reading: ServerMetrics) -> None:
        for name in ("running", "waiting", "kv_usage"):
            value = getattr(reading, name)
            if value is not None:
                self.metrics_peak[name] = max(value, self.metrics_peak.get(name, value))
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
