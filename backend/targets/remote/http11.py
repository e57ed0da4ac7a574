"""HTTP/1.1 on asyncio for the streaming hot path: keep-alive connections that hand each response to a callback object.

A streamed completion is dozens of small chunks a second on each of hundreds of connections, so
nothing here runs a coroutine per chunk. A batched server writes a chunk to every stream in the
same step, so one turn of the event loop finds hundreds of sockets readable and reads them in
turn. `Connection.data_received` therefore only reads the clock and queues the bytes with that
reading (the pool's `pending`); one callback per turn (`Pool.drain`) then feeds them, in the
order they came, to llhttp (httptools: status, headers, chunked framing) and each piece of body
to the response's `Handler`. Parsing in the read callback instead stamped the last socket of a
burst after every other socket's parsing and bookkeeping: hundreds of streams' parse costs late.
Connecting (TLS, proxies) is backend.targets.remote.connect's; what the body means is the caller's.
"""
from __future__ import annotations

import asyncio
from typing import Callable

import httptools


class Handler:
    """What a connection tells the one response it reads; `now` is the clock (ms) of the read whose bytes
    are being parsed: when they arrived, not when they are parsed."""

    now: float = 0.0

    def on_head(self, status: int, headers: dict[str, str]) -> None: ...

    def on_body(self, data: bytes) -> None: ...

    def on_end(self) -> None: ...

    def on_lost(self, reason: str, answered: bool) -> None:
        """The connection ended before the response did; `answered`: whether any byte of it came."""

    def on_bad_response(self, reason: str) -> None: ...


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; it reads one response at a time, then goes back to its pool."""

    def __init__(self, pool: Pool):
        self.pool = pool
        self.clock = pool.clock
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.handler: Handler | None = None
        self.closed = False
        self.num_requests = 0
        self._headers: dict[str, str] = {}
        self._answered = False
        self._framed = True        # the body has a length or chunks (else it ends when the connection does)

    # ---- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        # one reading per read, before anything else: every event in these bytes arrived then. Parsing waits
        # for the pool's drain, after every other socket of this loop turn has been read and stamped.
        self.pool.received(self, data, self.clock())

    def feed(self, data: bytes, now: float) -> None:
        """Parse one read's bytes, stamped `now` when they arrived (Pool.drain calls this in arrival order)."""
        h = self.handler
        if h is None:   # bytes nobody asked for: this connection cannot be trusted with the next request
            self.close()
            return
        h.now = now
        self._answered = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:   # a handler raised: a bug, kept as what it is
            raise (exc.__context__ or exc) from None
        except httptools.HttpParserError as exc:
            self.handler = None
            self.close()
            h.on_bad_response(f"{type(exc).__name__}: {exc}")

    def eof_received(self) -> bool:
        return False   # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.pool.drain()   # the bytes that came before the end are read first
        self.closed = True
        h, self.handler = self.handler, None
        if h is None:
            return
        if self._answered and not self._framed and self.parser.get_status_code():
            h.on_end()   # a body without length or chunks ends with the connection
        else:
            h.on_lost(str(exc) if exc else "closed by the server", self._answered)

    # ---- httptools callbacks ------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        headers = self._headers
        self._framed = "content-length" in headers or "chunked" in headers.get("transfer-encoding", "").lower()
        if self.handler is not None:
            self.handler.on_head(self.parser.get_status_code(), headers)

    def on_body(self, body: bytes) -> None:
        if self.handler is not None:
            self.handler.on_body(body)

    def on_message_complete(self) -> None:
        h, self.handler = self.handler, None
        if h is None:
            return
        keep = self.parser.should_keep_alive()
        h.on_end()
        if keep and not self.closed:
            self.pool.release(self)
        else:
            self.close()

    # ---- the caller's side --------------------------------------------------------------------

    def send(self, request: bytes, handler: Handler) -> None:
        self.handler = handler
        self.num_requests += 1
        self._headers = {}
        self._answered = False
        self._framed = True
        self.transport.write(request)

    def abandon(self) -> None:
        """The caller stopped listening mid-response (cancelled, a bad event, a timeout): not reusable.
        May be called from inside the handler's own callbacks, while llhttp is still parsing."""
        self.handler = None
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.close()


class Pool:
    """Keep-alive connections to one origin: the most recently used idle one first, a new one when none is idle.

    There is no limit: a load driver never queues its own requests. `open` is a coroutine function
    that makes and connects a Connection (backend.targets.remote.connect.opener).
    """

    def __init__(self, open: Callable, clock: Callable[[], float]):
        self._open = open
        self.clock = clock
        self.idle: list[Connection] = []
        self.num_opened = 0
        self.pending: list[tuple[Connection, bytes, float]] = []   # reads stamped but not yet parsed
        self._drain_soon = False

    def received(self, conn: Connection, data: bytes, now: float) -> None:
        self.pending.append((conn, data, now))
        if not self._drain_soon:
            self._drain_soon = True
            asyncio.get_running_loop().call_soon(self.drain)

    def drain(self) -> None:
        """Parse every read queued since the last drain, in the order they came, each with its own stamp."""
        self._drain_soon = False
        while self.pending:   # a handler that closes a connection may end in connection_lost, which drains too
            batch, self.pending = self.pending, []
            done = 0
            try:
                for conn, data, now in batch:
                    done += 1
                    conn.feed(data, now)
            finally:
                if done < len(batch):   # a handler raised (a bug, raised as it is): the other reads are still read
                    self.pending[:0] = batch[done:]
                    if not self._drain_soon:
                        self._drain_soon = True
                        asyncio.get_running_loop().call_soon(self.drain)

    async def acquire(self) -> tuple[Connection, bool]:
        """A connection and whether it was reused (a reused one may have been closed by the server in between)."""
        idle = self.idle
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn, True
        conn = await self._open(lambda: Connection(self))
        self.num_opened += 1
        return conn, False

    def release(self, conn: Connection) -> None:
        self.idle.append(conn)

    def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()
