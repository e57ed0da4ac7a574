"""Streamed requests to an OpenAI-compatible server, timed on the client's clock.

This runs inside the client's worker processes (backend.targets.remote.worker), so its hot path is
lean: HTTP/1.1 on keep-alive connections of its own (backend.targets.remote.http11, over
backend.targets.remote.connect for TLS and proxies), each response read from raw bytes by a
backend.targets.remote.response.StreamedResponse once the loop turn's reads are all stamped. httpx,
used for the few non-streamed calls elsewhere, is not on this path: its per-chunk machinery cost
12.6-13.3 ms of CPU per 64-token request.
"""
from __future__ import annotations

import asyncio
import json
import re
import socket
import ssl
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlsplit

from backend.config import SamplingConfig, safe_url
from backend.targets.remote.connect import Proxy, ProxyRefused, opener, origin_of, proxy_for
from backend.targets.remote.http11 import Pool
from backend.targets.remote.response import (MAX_DETAIL, RemoteFailure, StaleConnection, StreamedResponse,
                                             StreamState, error_message)

__all__ = ["MAX_DETAIL", "Compat", "RemoteFailure", "StreamState", "Streamer", "TextPieces", "connect_failure",
           "error_message", "request_body"]

_PIECE = re.compile(r"\s*\w+|\s*[^\w\s]|\s+")   # a word or a mark, with the space before it
OPTIONAL_FIELDS = ("stream_options", "ignore_eos", "min_tokens")   # extras some servers reject with 400/422


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


def connect_failure(exc: BaseException, url: str, proxy: Proxy | None = None) -> RemoteFailure:
    """Name a failure to connect by its root cause (libraries wrap the socket error a few times)."""
    causes = []
    while exc is not None and len(causes) < 10:
        causes.append(exc)
        exc = exc.__cause__ or exc.__context__
    found = lambda kind: next((c for c in causes if isinstance(c, kind)), None)   # noqa: E731
    via = f" through the proxy {proxy.shown}" if proxy else ""
    if refused := found(ProxyRefused):
        return RemoteFailure("proxy_error", str(refused))
    if found(ConnectionRefusedError):
        if proxy:
            return RemoteFailure("proxy_error", f"connection refused at the proxy {proxy.shown} (from the "
                                 "environment's HTTP(S)_PROXY; NO_PROXY lists hosts to reach directly)")
        return RemoteFailure("connection_refused", f"connection refused at {url}")
    if cert := found(ssl.SSLCertVerificationError):
        return RemoteFailure("tls_failure", f"the TLS certificate of {url} was not accepted: "
                             f"{cert.verify_message or cert.reason} (SSL_CERT_FILE names a CA bundle to trust)")
    if tls := found(ssl.SSLError):
        return RemoteFailure("tls_failure", f"the TLS handshake with {url}{via} failed: {tls.reason or tls}")
    if found(socket.gaierror):
        return RemoteFailure("dns_failure", f"cannot resolve the host of {url}{via} ({causes[-1]})")
    if timeout := found(TimeoutError):
        return RemoteFailure("timeout", f"no connection to {url}{via}: {timeout}")
    return RemoteFailure("connect_failed", f"cannot connect to {url}{via}: {causes[-1] or type(causes[-1]).__name__}")


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
    """Sends requests over one pool of keep-alive connections and reads their event streams.

    `on_token(state, text, now_ms)` is called for every event that carries text, with the time
    its chunk arrived. `num_connections` counts the connections the pool opened.
    """

    def __init__(self, base_url: str, model: str, api: str, headers: dict[str, str], sampling: SamplingConfig,
                 timeout_s: float, now_ms: Callable[[], float]):
        origin = origin_of(base_url)
        self.proxy = proxy_for(origin)
        self.shown_url = safe_url(base_url)
        self.model = model
        self.api = api
        self.sampling = sampling
        self.timeout_s = timeout_s
        self.compat = Compat()
        self.pool = Pool(opener(origin, self.proxy, timeout_s), now_ms)
        path = urlsplit(base_url).path.rstrip("/") + ("/chat/completions" if api == "chat" else "/completions")
        # through a proxy, plain http goes in absolute form; https goes through a CONNECT tunnel as if direct
        target = origin.url + path if self.proxy and origin.scheme == "http" else path
        host = origin.host if origin.port == (443 if origin.scheme == "https" else 80) else origin.authority
        lines = [f"POST {target} HTTP/1.1", f"Host: {host}", "User-Agent: phasescope", "Accept: text/event-stream",
                 "Accept-Encoding: identity", "Content-Type: application/json",
                 *(f"{name}: {value}" for name, value in headers.items())]
        if self.proxy and self.proxy.auth and origin.scheme == "http":
            lines.append(f"Proxy-Authorization: {self.proxy.auth}")
        self._head = ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")

    @property
    def num_connections(self) -> int:
        return self.pool.num_opened

    def close(self) -> None:
        self.pool.close()

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
        payload = json.dumps(body, separators=(",", ":")).encode()
        request = b"%s%d\r\n\r\n%s" % (self._head, len(payload), payload)
        while True:
            try:
                conn, reused = await self.pool.acquire()
            except (OSError, ProxyRefused) as exc:   # refused, DNS, TLS (ssl.SSLError is an OSError), timeout
                raise connect_failure(exc, self.shown_url, self.proxy) from None
            response = StreamedResponse(conn, reused, state, on_token, self.api == "chat", self.timeout_s)
            # TTFT counts from here, as the request's bytes go to the socket: not from before the body was built or
            # a new connection's handshake, which in a burst of hundreds of requests wait behind each other
            state.arrival_ms = self.pool.clock()
            conn.send(request, response)
            try:
                await response.future
                return
            except StaleConnection:
                continue   # the server had closed that idle connection: send again on the next one
            finally:
                response.cancel()   # cancelled or failed mid-response: the connection is not reused
