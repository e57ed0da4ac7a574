"""One streamed request to an OpenAI-compatible server, timed on the client's clock.

A request either ends with the server's finish reason or raises RemoteFailure, whose `kind`
(connection_refused, dns_failure, http_404, timeout, stream_cut, malformed_event, ...) is what
the run summary counts and whose `detail` keeps the server's own message.

This runs inside the client's worker processes (backend.targets.remote.worker), so its hot path is kept
short: the event stream is read as bytes, each chunk timed once as it arrives, `data:` lines
found with bytes.find and parsed with json.loads on the bytes; the stream is read to its very
end (past `data: [DONE]`) so that httpx returns the connection to its pool for the next request.
"""
from __future__ import annotations

import asyncio
import json
import re
import socket
from dataclasses import dataclass, field
from typing import Callable

import httpx

from backend.config import SamplingConfig, safe_url
from backend.errors import one_line

MAX_DETAIL = 300
DRAIN_S = 10.0         # after [DONE], how long to wait for the end of the response body (a starved loop is slow)
_PIECE = re.compile(r"\s*\w+|\s*[^\w\s]|\s+")   # a word or a mark, with the space before it
OPTIONAL_FIELDS = ("stream_options", "ignore_eos", "min_tokens")   # extras some servers reject with 400/422
_CONNECT_EVENTS = ("connection.connect_tcp.complete", "connection.connect_unix_socket.complete")


class RemoteFailure(Exception):
    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


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
    finish_reason: str | None = None
    num_events: int = 0


@dataclass(slots=True)
class Compat:
    """Optional request fields, dropped for the rest of the run once the server rejects one."""

    rejected: set[str] = field(default_factory=set)


def request_body(model: str, api: str, prompt: str | list[int], max_tokens: int, sampling: SamplingConfig,
                 compat: Compat) -> dict:
    body: dict = {"model": model, "max_tokens": max_tokens, "temperature": sampling.temperature, "stream": True}
    if sampling.top_p < 1:
        body["top_p"] = sampling.top_p
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    # continuous_usage_stats (vLLM, SGLang) puts the running token count on every chunk, so a chunk
    # that carries several tokens is indexed by tokens rather than by chunks
    body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    if sampling.ignore_eos:
        # vLLM and SGLang take ignore_eos; llama.cpp's Python server only min_tokens; both are harmless together
        body["ignore_eos"] = True
        body["min_tokens"] = max_tokens
    for name in compat.rejected:
        body.pop(name, None)
    return body


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


def connect_failure(exc: BaseException, url: str) -> RemoteFailure:
    """Name a failure to connect by its root cause (httpx wraps the socket error a few times)."""
    causes = []
    while exc is not None and len(causes) < 10:
        causes.append(exc)
        exc = exc.__cause__ or exc.__context__
    if any(isinstance(c, ConnectionRefusedError) for c in causes):
        return RemoteFailure("connection_refused", f"connection refused at {url}")
    if any(isinstance(c, socket.gaierror) for c in causes):
        return RemoteFailure("dns_failure", f"cannot resolve the host of {url} ({causes[-1]})")
    return RemoteFailure("connect_failed", f"cannot connect to {url}: {causes[-1] or type(causes[-1]).__name__}")


class TextPieces:
    """A stand-in tokenizer for text workloads (the served model's is not here): words and marks.

    Invertible, so a prompt cut to N pieces is sent as the text of those pieces; the server's
    usage then reports the true prompt length. A separator piece ends each text, as the
    workload joins its texts with a blank line.
    """

    def __init__(self):
        self._ids: dict[str, int] = {}
        self._pieces: list[str] = []

    def encode(self, text: str) -> list[int]:
        return [self._id(p) for p in [*_PIECE.findall(text), "\n\n"]]

    def decode(self, ids: list[int]) -> str:
        return "".join(self._pieces[i] for i in ids).strip()

    def _id(self, piece: str) -> int:
        if piece not in self._ids:
            self._ids[piece] = len(self._pieces)
            self._pieces.append(piece)
        return self._ids[piece]


class Streamer:
    """Sends requests over one pooled client and reads their event streams.

    `on_token(state, text, now_ms)` is called for every event that carries text, with the time
    its chunk arrived. `num_connections` counts the TCP connections the pool opened.
    """

    def __init__(self, client: httpx.AsyncClient, base_url: str, model: str, api: str, headers: dict[str, str],
                 sampling: SamplingConfig, timeout_s: float, now_ms: Callable[[], float]):
        self.client = client
        self.url = base_url.rstrip("/") + ("/chat/completions" if api == "chat" else "/completions")
        self.shown_url = safe_url(base_url)
        self.model = model
        self.api = api
        self.headers = headers
        self.sampling = sampling
        self.timeout = httpx.Timeout(timeout_s, pool=None)
        self.timeout_s = timeout_s
        self.now_ms = now_ms
        self.compat = Compat()
        self.num_connections = 0
        self._extensions = {"trace": self._trace}

    async def _trace(self, name: str, info: dict) -> None:
        if name in _CONNECT_EVENTS:
            self.num_connections += 1

    async def send(self, prompt: str | list[int], max_tokens: int, state: StreamState,
                   on_token: Callable[[StreamState, str, float], None]) -> None:
        """Stream one completion into `state`, retrying once per optional field the server rejects."""
        while True:
            body = request_body(self.model, self.api, prompt, max_tokens, self.sampling, self.compat)
            try:
                await self._stream(body, state, on_token)
                return
            except RemoteFailure as failure:
                rejected = self._rejected_field(failure, body)
                if rejected is None:
                    raise
                self.compat.rejected.add(rejected)

    def _rejected_field(self, failure: RemoteFailure, body: dict) -> str | None:
        if failure.kind not in ("http_400", "http_422"):
            return None
        return next((name for name in OPTIONAL_FIELDS if name in body and name in failure.detail), None)

    async def _stream(self, body: dict, state: StreamState, on_token) -> None:
        try:
            async with self.client.stream("POST", self.url, json=body, headers=self.headers, timeout=self.timeout,
                                          extensions=self._extensions) as response:
                if response.status_code >= 400:
                    text = (await response.aread()).decode("utf-8", "replace")
                    raise RemoteFailure(f"http_{response.status_code}", error_message(text))
                if response.headers.get("content-type", "").startswith("application/json"):
                    # a server that ignored stream: true answers in one piece
                    self._on_event(json.loads(await response.aread()), state, on_token, self.now_ms())
                    state.finish_ms = self.now_ms()
                    return
                await self._read_events(response, state, on_token)
        except httpx.ConnectError as exc:
            raise connect_failure(exc, self.shown_url) from None
        except httpx.TimeoutException as exc:
            what = "connecting" if isinstance(exc, httpx.ConnectTimeout) else "waiting for the next event"
            raise RemoteFailure("timeout", f"no answer within {self.timeout_s:g} s {what}") from None
        except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
            raise RemoteFailure("stream_cut", "the server closed the connection "
                                f"({one_line(exc, typed=True, limit=MAX_DETAIL)})") from None
        except httpx.HTTPError as exc:   # the rest: a proxy error, an unsupported scheme, a write failure
            raise RemoteFailure("transport_error", one_line(exc, typed=True, limit=MAX_DETAIL)) from None
        except ValueError as exc:   # a non-streamed JSON body that does not parse
            raise RemoteFailure("malformed_event", str(exc)[:MAX_DETAIL]) from None

    async def _read_events(self, response: httpx.Response, state: StreamState, on_token) -> None:
        # raw bytes unless the server compressed them: the decoders cost a few calls per chunk
        encoded = response.headers.get("content-encoding", "identity") not in ("identity", "")
        chunks = (response.aiter_bytes() if encoded else response.aiter_raw()).__aiter__()
        buf = b""
        done = False
        while not done:
            try:
                chunk = await chunks.__anext__()
            except StopAsyncIteration:
                break
            now = self.now_ms()   # one reading per chunk, as its bytes arrive: every event in it came then
            buf = buf + chunk if buf else chunk
            start = 0
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
                    done = True
                    state.finish_ms = now
                    break
                try:
                    event = json.loads(payload)
                except ValueError:
                    raise RemoteFailure("malformed_event", f"not JSON: {payload[:80]!r}") from None
                state.num_events += 1
                self._on_event(event, state, on_token, now)
            buf = buf[start:] if start else buf
        if done:
            # the rest of the body (its terminating chunk): read to the end, or the pool drops the connection
            try:
                await asyncio.wait_for(_drain(chunks), DRAIN_S)
            except (asyncio.TimeoutError, httpx.HTTPError):
                pass   # a server that keeps the body open after [DONE]: this connection is not reused
            return
        state.finish_ms = self.now_ms()
        if state.num_events == 0:
            # llama-cpp-python does this when a prompt exceeds its context (it logs why)
            raise RemoteFailure("empty_stream", f"HTTP {response.status_code}, then the stream closed "
                                "without a single event (see the server's log)")
        if state.finish_reason is None:
            raise RemoteFailure("stream_cut", "the event stream ended before the completion did")

    def _on_event(self, event, state: StreamState, on_token, now: float) -> None:
        if not isinstance(event, dict):
            raise RemoteFailure("malformed_event", f"expected a JSON object, got {str(event)[:80]!r}")
        choices = event.get("choices")
        if "error" in event or event.get("object") == "error":   # a failure reported inside the stream
            raise RemoteFailure("server_error", error_message(json.dumps(event)))
        usage = event.get("usage")
        if not isinstance(choices, list) or (not choices and not usage):
            raise RemoteFailure("malformed_event", f"no choices in {json.dumps(event)[:80]!r}")
        if usage and isinstance(usage, dict):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if isinstance(prompt, int):
                state.prompt_tokens = prompt
            if isinstance(completion, int):
                state.completion_tokens = completion
        for choice in choices:
            if not isinstance(choice, dict):
                raise RemoteFailure("malformed_event", f"a choice is not an object: {str(choice)[:80]!r}")
            text = self._choice_text(choice)
            if text:
                on_token(state, text, now)
            reason = choice.get("finish_reason")
            if reason:
                state.finish_reason = str(reason)

    def _choice_text(self, choice: dict) -> str:
        if self.api == "chat":
            delta = choice.get("delta") or choice.get("message")
            if not isinstance(delta, dict):
                return ""
            # reasoning models stream their thinking apart from the answer; both are output tokens
            text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
        else:
            text = choice.get("text")
        return text if isinstance(text, str) else ""


async def _drain(chunks) -> None:
    async for _ in chunks:
        pass
