"""One streamed completion's response, read from raw bytes as they arrive: status, SSE events, the end.

`StreamedResponse` is the http11.Handler of one request. Its `on_body` is the hot path: it runs
for every chunk of every stream (in the pool's drain, once the loop turn's reads are stamped), so
it finds `data:` lines with bytes.find, parses each with json.loads on the bytes, and hands text
to `on_token` with the time the chunk's read arrived, without a coroutine or a copy per event. The request's
coroutine waits on one future, set when the response ends or fails.

A request either ends with the server's finish reason or fails with RemoteFailure, whose `kind`
(connection_refused, dns_failure, tls_failure, proxy_error, http_404, timeout, stream_cut,
malformed_event, empty_stream, ...) is what the run summary counts and whose `detail` keeps
the server's own message.
"""
from __future__ import annotations

import asyncio
import json
import json.scanner
import zlib
from dataclasses import dataclass, field
from typing import Callable

from backend.targets.remote.http11 import Connection, Handler

MAX_DETAIL = 300
DRAIN_S = 10.0   # after [DONE], how long to wait for the end of the response body before dropping the connection
_SSE, _ERROR, _JSON = 0, 1, 2   # what the body is
# json.loads spends two thirds of its time on a small event finding the encoding and wrapping the
# C scanner; the scanner alone parses an event in a third of the time
_scan = json.scanner.make_scanner(json.JSONDecoder())


def parse_event(payload: bytes):
    """One event's JSON; ValueError when it is not exactly one JSON value."""
    text = payload.decode()
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        raise ValueError("not JSON") from None
    if end != len(text):
        raise ValueError("extra data after the JSON value")
    return value


class RemoteFailure(Exception):
    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


class StaleConnection(Exception):
    """A reused keep-alive connection that the server had closed: the request is sent again on a new one."""


@dataclass(slots=True)
class StreamState:
    """What one request has received so far; times are ms since the run started."""

    request_id: int
    arrival_ms: float
    token_times: list[float] = field(default_factory=list)   # one per chunk that carried text
    token_indices: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    finish_ms: float | None = None
    prompt_tokens: int | None = None       # from the server's usage
    completion_tokens: int | None = None
    cached_tokens: int | None = None       # prompt tokens the server found in its prefix cache, where it says
    cached_timings: int | None = None      # llama.cpp's timings.cache_n, where usage does not say
    finish_reason: str | None = None
    num_events: int = 0
    first_chunk_ms: float | None = None    # the first event of any kind (backend.results.definitions)
    first_chunk: str = ""                  # what it held: "content", "role" (a role-only delta) or "empty"


def error_message(response_text: str) -> str:
    """The server's own words from an error body: OpenAI/vLLM, TGI, FastAPI or plain text."""
    try:
        payload = json.loads(response_text)
    except ValueError:
        return " ".join(response_text.split())[:MAX_DETAIL] or "(empty body)"
    if isinstance(payload, dict):
        error = payload.get("error", payload.get("detail", payload.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if isinstance(error, list):   # FastAPI validation: [{"loc": [...], "msg": "..."}]
            error = "; ".join(f"{'.'.join(map(str, e.get('loc', [])))}: {e.get('msg', '')}"
                              if isinstance(e, dict) else str(e) for e in error)
        if error is not None:
            return " ".join(str(error).split())[:MAX_DETAIL]   # one line, even when it holds a traceback
    return str(payload)[:MAX_DETAIL]


class StreamedResponse(Handler):
    def __init__(self, conn: Connection, reused: bool, state: StreamState,
                 on_token: Callable[[StreamState, str, float], None], chat: bool, timeout_s: float):
        self.conn = conn
        self.reused = reused
        self.state = state
        self.on_token = on_token
        self.chat = chat
        self.timeout_s = timeout_s
        self.clock = conn.clock
        self.now = self.clock()          # the last read's time (ms): the timeout counts from it
        self.loop = asyncio.get_running_loop()
        self.future = self.loop.create_future()
        self.finished = False
        self.done = False                # [DONE] seen
        self.mode = _SSE
        self.status = 0
        self.body: list[bytes] = []      # an error's or a non-streamed answer's body
        self.decoder = None
        self.buf = b""
        self.timer = self.loop.call_later(timeout_s, self._check_timeout)

    # ---- http11.Handler -----------------------------------------------------------------------

    def on_head(self, status: int, headers: dict[str, str]) -> None:
        self.status = status
        if status >= 400:
            self.mode = _ERROR
        elif headers.get("content-type", "").startswith("application/json"):
            self.mode = _JSON   # a server that ignored stream: true answers in one piece
        encoding = headers.get("content-encoding", "identity").lower()
        if encoding in ("gzip", "deflate"):   # asked for identity, but a server may compress anyway
            self.decoder = zlib.decompressobj(zlib.MAX_WBITS | 32)   # gzip or zlib, by their header

    def on_body(self, data: bytes) -> None:
        if self.finished:
            return
        if self.decoder is not None:
            data = self.decoder.decompress(data)
        if self.mode != _SSE:
            self.body.append(data)
            return
        if self.done:
            return   # after [DONE] only the body's end matters
        now = self.now
        buf = self.buf + data if self.buf else data
        if b"\r" in buf:   # CRLF or CR line ends (a CR split from its LF only adds a blank line)
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        state = self.state
        start = 0
        try:
            while True:
                end = buf.find(b"\n", start)
                if end < 0:
                    break
                line = buf[start:end]
                start = end + 1
                if not line.startswith(b"data:"):
                    continue   # blank separators, comments, "event:" lines
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    self.done = True
                    state.finish_ms = now
                    self.timer.cancel()
                    self.timer = self.loop.call_later(DRAIN_S, self._drained)
                    return
                try:
                    event = parse_event(payload)
                except ValueError:
                    raise RemoteFailure("malformed_event", f"not JSON: {payload[:80]!r}") from None
                state.num_events += 1
                self._on_event(event, now)
        except RemoteFailure as failure:
            self.fail(failure)
            return
        self.buf = buf[start:] if start < len(buf) else b""

    def on_end(self) -> None:
        if self.finished:
            return
        if self.mode == _ERROR:
            self.fail(RemoteFailure(f"http_{self.status}", error_message(self._text())))
        elif self.mode == _JSON:
            try:
                self._on_event(json.loads(self._text()), self.now)
            except ValueError as exc:
                self.fail(RemoteFailure("malformed_event", str(exc)[:MAX_DETAIL]))
                return
            except RemoteFailure as failure:
                self.fail(failure)
                return
            self.state.finish_ms = self.now
            self._resolve()
        elif self.done:
            self._resolve()
        else:
            self.state.finish_ms = self.clock()
            if self.state.num_events == 0:
                # llama-cpp-python does this when a prompt exceeds its context (it logs why)
                self.fail(RemoteFailure("empty_stream", f"HTTP {self.status}, then the stream closed without a "
                                        "single event (see the server's log)"))
            elif self.state.finish_reason is None:
                self.fail(RemoteFailure("stream_cut", "the event stream ended before the completion did"))
            else:
                self._resolve()

    def on_lost(self, reason: str, answered: bool) -> None:
        if self.done:
            self._resolve()   # it closed after [DONE] instead of ending the body: everything was read
        elif not answered and self.reused:
            self._settle(StaleConnection())
        else:
            self.fail(RemoteFailure("stream_cut", f"the server closed the connection ({reason})"[:MAX_DETAIL]))

    def on_bad_response(self, reason: str) -> None:
        self.fail(RemoteFailure("bad_response", f"the server's answer is not valid HTTP/1.1 ({reason})"[:MAX_DETAIL]))

    # ---- ending -------------------------------------------------------------------------------

    def fail(self, failure: BaseException) -> None:
        """End the request with `failure`; the connection, left mid-response, is closed."""
        self._settle(failure)
        self.conn.abandon()

    def cancel(self) -> None:
        if not self.finished:
            self.finished = True
            self.timer.cancel()
            self.conn.abandon()

    def _resolve(self) -> None:
        self._settle(None)

    def _settle(self, failure: BaseException | None) -> None:
        if self.finished:
            return
        self.finished = True
        self.timer.cancel()
        if not self.future.done():
            if failure is None:
                self.future.set_result(None)
            else:
                self.future.set_exception(failure)

    def _check_timeout(self) -> None:
        idle_s = (self.clock() - self.now) / 1000.0
        if idle_s < self.timeout_s:   # something arrived since the timer was set
            self.timer = self.loop.call_later(self.timeout_s - idle_s, self._check_timeout)
            return
        what = "waiting for the next event" if self.status else "waiting for the answer"
        self.fail(RemoteFailure("timeout", f"no answer within {self.timeout_s:g} s {what}"))

    def _drained(self) -> None:
        self._resolve()        # a server that keeps the body open after [DONE]: this connection is not reused
        self.conn.abandon()

    def _text(self) -> str:
        return b"".join(self.body).decode("utf-8", "replace")

    # ---- events -------------------------------------------------------------------------------

    def _on_event(self, event, now: float) -> None:
        if not isinstance(event, dict):
            raise RemoteFailure("malformed_event", f"expected a JSON object, got {str(event)[:80]!r}")
        choices = event.get("choices")
        if "error" in event or event.get("object") == "error":   # a failure reported inside the stream
            raise RemoteFailure("server_error", error_message(json.dumps(event)))
        usage = event.get("usage")
        if not isinstance(choices, list) or (not choices and not usage):
            raise RemoteFailure("malformed_event", f"no choices in {json.dumps(event)[:80]!r}")
        state = self.state
        if usage and isinstance(usage, dict):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if isinstance(prompt, int):
                state.prompt_tokens = prompt
            if isinstance(completion, int):
                state.completion_tokens = completion
            details = usage.get("prompt_tokens_details")   # null unless the server is asked to report it
            if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                state.cached_tokens = details["cached_tokens"]
        timings = event.get("timings")   # llama.cpp's, on its last event
        if isinstance(timings, dict) and isinstance(timings.get("cache_n"), int):
            state.cached_timings = timings["cache_n"]
        first = state.first_chunk_ms is None
        if first:   # TTFT to the first chunk, whatever it held, is another tool's TTFT
            state.first_chunk_ms, state.first_chunk = now, "empty"
        for choice in choices:
            if not isinstance(choice, dict):
                raise RemoteFailure("malformed_event", f"a choice is not an object: {str(choice)[:80]!r}")
            if self.chat:
                delta = choice.get("delta") or choice.get("message")
                # reasoning models stream their thinking apart from the answer; both are output tokens
                text = (delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")) \
                    if isinstance(delta, dict) else None
                if first and not text and isinstance(delta, dict) and delta.get("role"):
                    state.first_chunk = "role"
            else:
                text = choice.get("text")
            if text and isinstance(text, str):
                if first:
                    state.first_chunk = "content"
                self.on_token(state, text, now)
            reason = choice.get("finish_reason")
            if reason:
                state.finish_reason = str(reason)
