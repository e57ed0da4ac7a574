"""A small OpenAI-compatible streaming server (asyncio, loopback) that logs its own true timing.

It stands in for an engine whose behaviour is known exactly: every `gap_ms` one "engine step"
writes the next token to every stream in flight (one timer for all streams, as a batched engine
decodes), the first token `ttft_ms` after the request was read. It logs, per request, when the
request was read and when each token was written, on the same monotonic clock as the client
(time.perf_counter is CLOCK_MONOTONIC, shared by every process on the machine), so a client's
TTFT and inter-token gaps can be set beside the server's true ones.

Behaviour (`Behaviour`): the number of tokens (the request's max_tokens unless `tokens` is set),
the gaps, whether usage is reported, every n-th request stopping early with finish_reason
"stop", every n-th request failing with HTTP 500, and token-id prompts refused with HTTP 500 in
llama-cpp-python's words. Connections are HTTP/1.1 keep-alive; the server counts those it
accepted.

Its prefix cache: each prompt (token ids, or the words of a text) is looked up in full blocks of
`prefix_block` tokens, each block known by the whole prefix up to its end (as vLLM hashes a block
with its parent's hash), and the blocks found are its cached tokens, at most all but the last token
(one is always computed); the cache keeps every block (it never evicts). Each request's prompt and
cached tokens are logged, counted in /metrics as each engine counts them (fake_metrics.py), and
reported to the client as `cached_usage` says: "details" as usage.prompt_tokens_details.cached_tokens
(vLLM with --enable-prompt-tokens-details, SGLang with --enable-cache-report, recent llama.cpp), "timings"
as llama.cpp's timings.cache_n (with prompt_n, the tokens it computed), "both" as recent llama.cpp,
"" not at all (vLLM by default: prompt_tokens_details is null).

In a test: `with FakeOpenAI(Behaviour(...)) as server: ... server.log ...` (its loop runs on a
thread). For a benchmark, as its own process: `python tests/fakes/fake_openai.py --port P --tokens 64
--gap-ms 1`; `GET /fake/log` returns the log as JSON, `GET /fake/count` how many completions it read
and finished, and `POST /fake/reset` clears them.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from dataclasses import asdict, dataclass, field

try:   # imported as tests.fakes.fake_openai, or run as a script from this folder
    from tests.fakes.fake_metrics import FakeMetrics
except ImportError:
    from fake_metrics import FakeMetrics

WORD = " tok"
# the fields an OpenAI completions chunk carries; some clients (AIPerf) read `object` to know the kind
HEAD = {"id": "cmpl-fake", "object": "text_completion", "created": 0, "model": "fake"}


@dataclass(slots=True)
class Behaviour:
    tokens: int | None = None        # tokens per answer; None: the request's max_tokens
    gap_ms: float = 1.0              # between engine steps (one token to every stream per step)
    ttft_ms: float = 0.0             # from reading the request to its first token (at the next step)
    usage: bool = True               # a final usage event, when the request asks with stream_options
    stop_early_every: int = 0        # every n-th request stops after half its tokens, finish_reason "stop"
    error_every: int = 0             # every n-th request gets HTTP 500
    refuse_token_ids: bool = False   # a token-id prompt gets HTTP 500, as llama-cpp-python's server answers
    max_batch: int = 0               # streams decoding at once; later ones wait for a slot (0: no limit)
    metrics: str = ""                # serve GET /metrics as "vllm", "sglang", "tgi" or "llamacpp" names it
    kv_tokens: int = 4096            # the KV cache's size in tokens, for the metrics' usage
    prefix_block: int = 16           # the prefix cache's block, in tokens (vLLM's default)
    cached_usage: str = ""           # how answers report cached prompt tokens: "details", "timings", "both", ""
    chunk_tokens: int = 1            # tokens each step writes in one chunk (speculative decoding, MTP, parsers)
    spec_tokens: int = 0             # K: each decode step is a verification of K guesses that keeps chunk - 1 of
                                     # them; /metrics counts them as the engine does (fake_metrics.py)
    first_chunk: str = ""            # "role" or "empty": a chunk with no text first, at once, as vLLM's chat stream
                                     # opens with {"role": "assistant"}; "" none


@dataclass(slots=True)
class RequestLog:
    read_s: float                                            # perf_counter when the request's last bytes came
    writes_s: list[float] = field(default_factory=list)      # when each token's event was written
    done_s: float | None = None
    num_tokens: int = 0
    finish_reason: str = ""
    prompt_tokens: int = 0
    cached_tokens: int = 0                                   # found in the prefix cache
    client_port: int = 0                                     # the client's end of the connection: a benchmark
                                                             # matches its own requests to these by it, in order


@dataclass(slots=True)
class _Stream:
    writer: asyncio.StreamWriter
    log: RequestLog
    target: int                 # tokens to send
    finish: str                 # "length" or "stop"
    include_usage: bool
    prompt_tokens: int
    start_s: float              # not before this moment
    admitted_s: float | None    # when it got a batch slot (None: still waiting for one)
    cached: int = 0             # prompt tokens found in the prefix cache
    sent: int = 0
    chat: bool = False          # events as chat deltas
    running_usage: bool = False # usage on every chunk (stream_options.continuous_usage_stats, as vLLM)
    done: asyncio.Future | None = None


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(obj) -> bytes:
    return _chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


class FakeOpenAI:
    """The server; `start()`/`stop()` on a thread of its own, or `serve()` inside a running loop."""

    def __init__(self, behaviour: Behaviour | None = None, host: str = "127.0.0.1", port: int = 0):
        self.behaviour = behaviour or Behaviour()
        self.host, self.port = host, port
        self.url = ""
        self.bodies: list[dict] = []
        self.log: list[RequestLog] = []
        self.num_connections = 0
        self._streams: list[_Stream] = []
        self._count = 0
        self._read = 0                 # completions read since the last reset
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop_future: asyncio.Future | None = None
        self.metrics = FakeMetrics(self.behaviour)
        self.prefix_cache: set[int] = set()   # the key of every full block seen so far

    # ---- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> FakeOpenAI:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self._thread = threading.Thread(target=lambda: asyncio.run(self.serve()), name="fake-openai", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fake server did not start")

    def stop(self) -> None:
        if self._loop is not None and self._stop_future is not None:
            self._loop.call_soon_threadsafe(self._stop_future.set_result, None)
        if self._thread is not None:
            self._thread.join(10)

    async def serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_future = self._loop.create_future()
        self._wake = asyncio.Event()
        self._server = await asyncio.start_server(self._connection, self.host, self.port, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://{self.host}:{self.port}/v1"
        ticker = asyncio.create_task(self._engine())
        self._ready.set()
        try:
            await self._stop_future
        finally:
            ticker.cancel()
            self._server.close()
            for s in self._streams:
                s.writer.close()
            await asyncio.gather(ticker, return_exceptions=True)

    # ---- the log ---------------------------------------------------------------------------

    def logged(self, n: int, timeout_s: float = 5.0) -> list[RequestLog]:
        """The log once it holds n requests (or timeout_s passed): a request is logged on the server's loop just
        after its last bytes went out, so a client that has already read them can look before it is there."""
        end = time.monotonic() + timeout_s
        while len(self.log) < n and time.monotonic() < end:
            time.sleep(0.005)
        return self.log

    def true_gaps_ms(self) -> list[float]:
        """The gaps between consecutive token writes of each finished request, in ms."""
        return [(b - a) * 1000.0 for r in self.log for a, b in zip(r.writes_s, r.writes_s[1:])]

    def true_ttfts_ms(self) -> list[float]:
        return [(r.writes_s[0] - r.read_s) * 1000.0 for r in self.log if r.writes_s]

    def prefix_hits(self, tokens: list) -> int:
        """Cached tokens of a prompt (its longest prefix of full blocks seen before, less the last token
        at least), and its blocks remembered."""
        block = self.behaviour.prefix_block
        if block <= 0:
            return 0
        keys, parent = [], None
        for k in range(len(tokens) // block):   # a block is known by its parent's key and its own tokens
            parent = hash((parent, tuple(tokens[k * block:(k + 1) * block])))
            keys.append(parent)
        found = 0
        while found < len(keys) and keys[found] in self.prefix_cache:
            found += 1
        self.prefix_cache.update(keys)
        return min(found * block, (max(len(tokens) - 1, 0) // block) * block)

    def log_json(self) -> dict:
        return {"num_connections": self.num_connections, "requests": [asdict(r) for r in self.log]}

    def reset(self) -> None:
        self._read = 0
        self.log.clear()
        self.bodies.clear()
        self.num_connections = 0

    # ---- HTTP ------------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.num_connections += 1
        peer = writer.get_extra_info("peername")
        port = peer[1] if isinstance(peer, tuple) and len(peer) > 1 else 0
        # when the request's bytes came in, read as the loop hands them over: a burst of hundreds of requests is
        # parsed one after another, and the last would otherwise be logged as read long after it arrived (that
        # wait is this server's queue, part of a true TTFT)
        arrived = [0.0]
        feed = reader.feed_data

        def feed_stamped(data: bytes) -> None:
            arrived[0] = time.perf_counter()
            feed(data)
        reader.feed_data = feed_stamped
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                read_s = arrived[0] or time.perf_counter()
                if method == "GET" and path == "/fake/log":
                    self._reply(writer, 200, json.dumps(self.log_json()).encode())
                elif method == "GET" and path == "/fake/count":   # cheap enough to poll during a run
                    self._reply(writer, 200, json.dumps({"read": self._read, "done": len(self.log)}).encode())
                elif method == "GET" and path == "/metrics" and self.behaviour.metrics:
                    self._reply(writer, 200, self.metrics.page(self._streams).encode(), "text/plain; version=0.0.4")
                elif method == "POST" and path == "/fake/reset":
                    self.reset()
                    self._reply(writer, 200, b"{}")
                elif method == "POST" and path.endswith("/completions"):
                    await self._completion(writer, json.loads(body), read_s, chat=path.endswith("/chat/completions"),
                                           port=port)
                else:
                    self._reply(writer, 404, b'{"detail":"Not Found"}')
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def _reply(self, writer: asyncio.StreamWriter, status: int, data: bytes, kind: str = "application/json") -> None:
        writer.write(b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
                     % (status, kind.encode(), len(data), data))

    async def _completion(self, writer: asyncio.StreamWriter, body: dict, read_s: float, chat: bool,
                          port: int = 0) -> None:
        self.bodies.append(body)
        self._count += 1
        self._read += 1
        b = self.behaviour
        prompt = body.get("prompt") if not chat else body.get("messages", [{}])[-1].get("content", "")
        if b.refuse_token_ids and isinstance(prompt, list):
            message = f"1 validation error: prompt: Input should be a valid string (got {prompt[:3]}...)"
            self._reply(writer, 500, json.dumps({"error": {"message": message}}).encode())
            return
        if b.error_every and self._count % b.error_every == 0:
            self._reply(writer, 500, b'{"error": {"message": "the fake engine failed on purpose"}}')
            return
        target = b.tokens if b.tokens is not None else int(body.get("max_tokens") or 16)
        finish = "length"
        if b.stop_early_every and self._count % b.stop_early_every == 0:
            target, finish = max(1, target // 2), "stop"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        tokens = list(prompt) if isinstance(prompt, list) else str(prompt).split()
        prompt_tokens, cached = len(tokens), self.prefix_hits(tokens)
        log = RequestLog(read_s, prompt_tokens=prompt_tokens, cached_tokens=cached, client_port=port)
        self.metrics.admitted(prompt_tokens, cached)
        options = body.get("stream_options") or {}
        include_usage = b.usage and bool(options.get("include_usage"))
        stream = _Stream(writer, log, target, finish, include_usage, prompt_tokens, read_s + b.ttft_ms / 1000.0,
                         None if b.max_batch else read_s, cached, done=asyncio.get_running_loop().create_future(),
                         chat=chat, running_usage=include_usage and bool(options.get("continuous_usage_stats")))
        if b.first_chunk:
            delta = {"role": "assistant"} if b.first_chunk == "role" else {"content": ""}
            choice = {"index": 0, "delta": delta} if chat else {"index": 0, "text": ""}
            writer.write(_event({**HEAD, "choices": [{**choice, "finish_reason": None}]}))
        self._streams.append(stream)
        self._wake.set()
        await stream.done
        self.log.append(log)

    async def _engine(self) -> None:
        """One step every gap_ms: the next token to every stream in flight; idle when none is."""
        gap = self.behaviour.gap_ms / 1000.0
        per_chunk = max(1, self.behaviour.chunk_tokens)
        next_s = time.perf_counter()
        while True:
            if not self._streams:
                self._wake.clear()
                await self._wake.wait()
                next_s = time.perf_counter()
            now = time.perf_counter()
            keep = []
            self.metrics.step(self._streams, now)
            admitted = sum(s.admitted_s is not None for s in self._streams)
            for s in self._streams:
                if s.admitted_s is None:   # max_batch: waits for a slot, then its prefill takes ttft_ms
                    if admitted >= self.behaviour.max_batch:
                        keep.append(s)
                        continue
                    admitted += 1
                    s.admitted_s, s.start_s = now, now + self.behaviour.ttft_ms / 1000.0
                if now < s.start_s:
                    keep.append(s)
                    continue
                k = min(per_chunk, s.target - s.sent)
                s.sent += k
                last = s.sent >= s.target
                if last:
                    s.writer.write(self._last_bytes(s, k))
                else:
                    s.writer.write(_event(self._chunk_event(s, k, None)))
                # when this stream's bytes went to its socket: a step writes hundreds of streams one after another,
                # so the last goes out well after the step began (its truth, not the step's start)
                s.log.writes_s.append(time.perf_counter())
                self.metrics.token(s, now)
                if self.behaviour.spec_tokens and len(s.log.writes_s) > 1:   # a decode step: a verification
                    self.metrics.verified(self.behaviour.spec_tokens, k - 1)
                if last:
                    self.metrics.finished(s, now)
                    s.log.done_s = time.perf_counter()
                    s.log.num_tokens, s.log.finish_reason = s.sent, s.finish
                    s.done.set_result(None)
                else:
                    keep.append(s)
            self._streams = keep
            next_s += gap
            delay = next_s - time.perf_counter()
            if delay < -gap:   # fell behind by more than a step: do not try to catch up in a burst
                next_s = time.perf_counter()
                delay = 0.0
            await asyncio.sleep(max(0.0, delay))

    def _chunk_event(self, s: _Stream, k: int, finish: str | None) -> dict:
        choice = {"index": 0, "delta": {"content": WORD * k}} if s.chat else {"index": 0, "text": WORD * k}
        event = {**HEAD, "choices": [{**choice, "finish_reason": finish}]}
        if s.running_usage:   # the running count: a client indexes a chunk's tokens by it
            event["usage"] = {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.sent,
                              "total_tokens": s.prompt_tokens + s.sent}
        return event

    def _last_bytes(self, s: _Stream, k: int = 1) -> bytes:
        how = self.behaviour.cached_usage
        # llama.cpp puts its timings on the last event: the usage event where there is one
        timings = {"timings": {"cache_n": s.cached, "prompt_n": s.prompt_tokens - s.cached, "predicted_n": s.sent}} \
            if how in ("timings", "both") else {}
        last = self._chunk_event(s, k, s.finish)
        out = _event(last if s.include_usage else {**last, **timings})
        if s.include_usage:
            usage = {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.sent, "total_tokens": s.prompt_tokens + s.sent}
            if how in ("details", "both"):
                usage["prompt_tokens_details"] = {"cached_tokens": s.cached}
            elif how == "":   # vLLM without --enable-prompt-tokens-details
                usage["prompt_tokens_details"] = None
            out += _event({**HEAD, "choices": [], "usage": usage, **timings})
        return out + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"


def main() -> None:
    try:   # one connection a stream: thousands of streams need more descriptors than a shell's soft limit
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass
    parser = argparse.ArgumentParser(description="a fake OpenAI-compatible streaming server on loopback")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--tokens", type=int)
    parser.add_argument("--gap-ms", type=float, default=1.0)
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--max-batch", type=int, default=0)
    parser.add_argument("--metrics", choices=("vllm", "sglang", "tgi", "llamacpp"), default="")
    parser.add_argument("--prefix-block", type=int, default=16)
    parser.add_argument("--cached-usage", choices=("details", "timings", "both", ""), default="")
    parser.add_argument("--chunk-tokens", type=int, default=1)
    parser.add_argument("--first-chunk", choices=("role", "empty", ""), default="")
    args = parser.parse_args()
    server = FakeOpenAI(Behaviour(tokens=args.tokens, gap_ms=args.gap_ms, ttft_ms=args.ttft_ms,
                                  max_batch=args.max_batch, metrics=args.metrics, prefix_block=args.prefix_block,
                                  cached_usage=args.cached_usage, chunk_tokens=args.chunk_tokens,
                                  first_chunk=args.first_chunk), port=args.port)
    print(f"serving on 127.0.0.1:{args.port}", flush=True)
    try:
        asyncio.run(server.serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
