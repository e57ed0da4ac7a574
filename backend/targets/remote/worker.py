"""One client worker: a fresh interpreter with one event loop (uvloop where installed) and its own connection pool.

The run's coordinator (backend.targets.remote.pool) starts N of these through backend.launcher
(fresh interpreters that die with it) and talks to each over its stdin and stdout in the frames of
backend.protocol's CLIENT channel (the worker's stdout is the protocol's; anything a library prints
goes to stderr):

    coordinator -> worker   Job (first: the key goes here, never argv) | Go (the run's clock starts)
                            | Users (a closed loop's users on this worker) | Send (one request)
                            | End | Stop | Abort
    worker -> coordinator   Ready | ClientRecords | Stats | Done

time.perf_counter is the system's monotonic clock, shared by every process, so the worker's
times and the coordinator's planned arrivals are on one clock. The worker measures itself while
it runs: how late its event loop wakes (a probe sleeping PROBE_S), how late each request goes
out against its planned arrival, and its own CPU time.
"""
from __future__ import annotations

import asyncio
import heapq
import os
import sys
import time
from collections import deque

from backend.errors import one_line
from backend.launcher import child_started
from backend.protocol import (Abort, Channel, ClientRecords, Done, End, Go, Job, Message, ProtocolError, Ready,
                              RequestRow, Send, Side, Stats, Stop, Users, frame, read_message)
from backend.targets.remote.client import MAX_DETAIL, RemoteFailure, StreamState, Streamer

FLUSH_S = 0.05       # records go to the coordinator in batches at most this old
PROBE_S = 0.005      # the loop-lag probe's sleep
MAX_LAG_SAMPLES = 40_000


def _cpu_s() -> float:
    return time.process_time()   # this process's user + system time


class Worker:
    def __init__(self, job: Job, out):
        self.job = job
        self.out = out                      # a binary stream (stdout's buffer)
        self.t0 = 0.0
        self.started = asyncio.Event()
        self.ending = False                 # "end": no more requests will come
        self.cancel_why: str | None = None  # "stop" or "abort": cancel what is in flight
        self.inflight: dict[int, asyncio.Task] = {}
        self.idle = asyncio.Event()
        self.lag: list[float] = []
        self.num_tokens = 0
        self.num_clumped = 0                # tokens that came in the same read as their stream's previous one
        self._requests: list[RequestRow] = []
        self._tokens: list[list] = []
        self._text: dict[int, str] = {}
        self._flush_soon = False
        self._sent: list[list] = []            # [id, ms] of requests sent since the last flush
        # closed loop: when each idle user is free to send, a heap: the earliest goes first (a user whose answer
        # came goes before one still waiting for its turn on the ramp)
        self.free_at: list[float] = []
        self.think_ms = 0.0                    # closed loop: a user's wait after its answer
        # closed loop: requests waiting for a free user, each with when it reached this worker
        self.reserve: deque[tuple[Send, float]] = deque()

    def now_ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1000.0

    async def run(self, reader: asyncio.StreamReader) -> None:
        job = self.job
        headers = {"Authorization": f"Bearer {job.api_key}"} if job.api_key else {}
        # one pool with no limit (a load driver never queues its own requests); a closed loop's user
        # finds the connection its last answer came on, the most recently freed
        self.streamer = Streamer(job.url, job.model, job.api, headers, job.sampling, job.timeout_s, self.now_ms)
        try:
            self._send(Ready())
            commands = asyncio.create_task(self._commands(reader))
            await self.started.wait()
            cpu0, wall0 = _cpu_s(), time.perf_counter()
            background = [asyncio.create_task(self._probe()), asyncio.create_task(self._flush_every())]
            try:
                while not (self.cancel_why or (self.ending and not self.inflight and not self.reserve)):
                    self.idle.clear()
                    await self.idle.wait()
                tasks = list(self.inflight.values())
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            finally:
                for task in background:
                    task.cancel()
                await asyncio.gather(*background, return_exceptions=True)
            self._flush()
            self._send(Stats(self.lag, _cpu_s() - cpu0, time.perf_counter() - wall0, self.streamer.num_connections,
                             self.num_tokens, self.num_clumped, sorted(self.streamer.compat.rejected)))
            self._send(Done())
            commands.cancel()
            await asyncio.gather(commands, return_exceptions=True)
        finally:
            self.streamer.close()

    async def _commands(self, reader: asyncio.StreamReader) -> None:
        while True:
            msg = await read_message(reader, Channel.CLIENT, Side.CLIENT)
            if msg is None:   # the coordinator went away: stop at once
                self.cancel_why = self.cancel_why or "cancelled: the coordinator ended"
                self.started.set()
                self.idle.set()
                return
            if isinstance(msg, Send):
                if msg.at_ms is None:
                    self.reserve.append((msg, self.now_ms()))
                    self._start_reserved()
                else:
                    self.inflight[msg.request_id] = asyncio.create_task(self._one(msg.request_id, msg.at_ms, msg))
            elif isinstance(msg, Users):   # each user's first moment: the closed loop's ramp
                for start in msg.starts or [0.0] * msg.n:
                    heapq.heappush(self.free_at, start)
                self.think_ms = float(msg.think_ms or 0.0)
            elif isinstance(msg, Go):
                self.t0 = msg.t0
                self.started.set()
            elif isinstance(msg, End):
                self.ending = True
                self.idle.set()
            elif isinstance(msg, (Stop, Abort)):
                self.cancel_why = "stopped by user" if isinstance(msg, Stop) else f"cancelled: {msg.why}"
                self.started.set()
                self.idle.set()

    def _start_reserved(self) -> None:
        """A closed loop's user sends its next request as soon as its last one left, with no round
        trip to the coordinator: the next request already waits here."""
        while self.free_at and self.reserve and not self.cancel_why:
            msg, received = self.reserve.popleft()
            at = heapq.heappop(self.free_at)   # the user's moment
            self.inflight[msg.request_id] = asyncio.create_task(
                self._one(msg.request_id, at, msg, closed=True, ready=max(at, received)))

    async def _one(self, rid: int, at: float, msg: Send, closed: bool = False, ready: float | None = None) -> None:
        """One request, sent at `at` ms; its RequestRow goes with the next ClientRecords when it ends.

        `ready` is when it could have gone out: `at` for a planned arrival; for a closed loop's next request,
        the later of its user being free (`at`) and the request reaching this worker. The coordinator makes a
        user's next request only once the previous one has ended, so until it arrives the wait is the loop's
        own round trip, not this worker being slow: lateness counts from `ready`."""
        ready = at if ready is None else ready
        state = StreamState(rid, at)
        sent = None
        status, kind, reason = "finished", "", ""
        try:
            # never before its moment: uvloop's timers have whole-millisecond ticks and can wake early
            while (delay := (at - self.now_ms()) / 1000.0) > 0:
                await asyncio.sleep(delay)
            # when the worker started it (its lateness counts to here); the streamer moves the arrival, which TTFT
            # counts from, to the request's write to the socket
            sent = state.arrival_ms = self.now_ms()
            self._sent.append([rid, sent])
            await self.streamer.send(msg.prompt, msg.max_tokens, state, self._on_token)
            reason = state.finish_reason or "stop"
        except asyncio.CancelledError:
            status = "decoding" if state.token_times else "prefilling" if sent is not None else "waiting"
            reason = self.cancel_why or "cancelled"
        except Exception as exc:   # RemoteFailure, or a client-side surprise that must not lose the request
            failure = exc if isinstance(exc, RemoteFailure) \
                else RemoteFailure("client_error", one_line(exc, typed=True, limit=MAX_DETAIL))
            status, kind, reason = "error", failure.kind, f"{failure.kind}: {failure.detail}"
        now = self.now_ms()
        times = state.token_times
        self._requests.append(RequestRow(
            rid, status, kind, reason, state.arrival_ms, times[0] if times else None, times[-1] if times else None,
            state.finish_ms if state.finish_ms is not None else now,
            state.token_indices[-1] + 1 if state.token_indices else 0, state.prompt_tokens, state.completion_tokens,
            "".join(state.text), None if sent is None else sent - ready,
            state.cached_tokens if state.cached_tokens is not None else state.cached_timings,
            state.first_chunk_ms, state.first_chunk, None if sent is None else ready - at))
        self.inflight.pop(rid, None)
        if closed:
            heapq.heappush(self.free_at, now + self.think_ms)
            self._start_reserved()
        if not self._flush_soon:   # at once (once per loop pass): a closed loop's next request waits on this
            self._flush_soon = True
            asyncio.get_running_loop().call_soon(self._flush)
        self.idle.set()

    def _on_token(self, state: StreamState, text: str, now: float) -> None:
        self.num_tokens += 1
        if state.token_times and state.token_times[-1] == now:
            self.num_clumped += 1   # read together with the stream's previous token: its gap reads as 0
        indices = state.token_indices
        index = indices[-1] + 1 if indices else 0
        uncounted = len(text)   # the coordinator counts this chunk's tokens by the tokenizer, from its text
        if state.completion_tokens:   # a chunk that carries several tokens, counted by the server
            index = max(index, state.completion_tokens - 1)
            uncounted = 0
        state.token_times.append(now)
        indices.append(index)
        state.text.append(text)
        rid = state.request_id
        self._tokens.append([rid, index, now, uncounted])
        self._text[rid] = self._text.get(rid, "") + text

    async def _probe(self) -> None:
        """How late the loop wakes from a short sleep: the delay every event it handles can suffer."""
        stride, n = 1, 0
        while True:
            before = time.perf_counter()
            await asyncio.sleep(PROBE_S)
            n += 1
            if n % stride == 0:   # a long run keeps an even sample of its readings, at most MAX_LAG_SAMPLES
                self.lag.append(max(0.0, (time.perf_counter() - before - PROBE_S) * 1000.0))
                if len(self.lag) >= MAX_LAG_SAMPLES:
                    del self.lag[::2]
                    stride *= 2

    async def _flush_every(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            self._flush()

    def _flush(self) -> None:
        self._flush_soon = False
        if self._requests or self._tokens or self._text or self._sent:
            self._send(ClientRecords(self._sent, self._requests, self._tokens, self._text))
            self._requests, self._tokens, self._text, self._sent = [], [], {}, []

    def _send(self, msg: Message) -> None:
        self.out.write(frame(Channel.CLIENT, Side.CLIENT, msg))
        self.out.flush()


async def _main(out) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 26)   # a request's frame holds a whole prompt
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    first = await read_message(reader, Channel.CLIENT, Side.CLIENT)
    if first is None:   # the coordinator ended before the job came
        return
    if not isinstance(first, Job):
        raise ProtocolError(f"a client worker's first message must be 'job', not '{first.op.value}'")
    await Worker(first, out).run(reader)


def _raise_file_limit() -> None:
    """One connection a stream: a thousand streams need more descriptors than many shells' soft limit of 1,024."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):   # no such limit here (Windows), or not allowed: keep the soft one
        pass


def main() -> None:
    """The child's entry point (backend.launcher): the protocol on stdin and stdout."""
    child_started()
    _raise_file_limit()
    # the protocol gets its own copy of stdout; anything a library prints goes to stderr instead
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    try:
        import uvloop   # a faster loop where installed (not on Windows): the same results, less CPU per chunk
        loop_factory = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(_main(out))


if __name__ == "__main__":
    main()
