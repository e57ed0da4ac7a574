"""A burst: a batched server writes a chunk to every stream at once, so one turn of the client's event loop
finds many sockets readable. Each read must be stamped as it is read, before any stream's parsing and
bookkeeping, and a request's TTFT must count from its write to the socket. No timings are asserted: the
clock is a counter, so the order of its readings shows what was stamped before what."""
from __future__ import annotations

import asyncio
import threading

import pytest

from backend.config import SamplingConfig
from backend.targets.remote.client import Streamer, StreamState
from backend.targets.remote.http11 import Connection, Pool
from backend.targets.remote.response import StreamedResponse
from tests.fakes.raw_http import STREAM_HEAD, RawServer, chunk, event
from tests.targets.test_remote_http import LOOPS, full_stream, no_proxy_env  # noqa: F401 (the fixture)

RESPONSE = STREAM_HEAD + chunk(full_stream()) + b"0\r\n\r\n"


class Counter:
    """A clock that ticks once per reading: readings are ordered and none is ever read twice."""

    def __init__(self):
        self.n = 0

    def __call__(self) -> float:
        self.n += 1
        return float(self.n)


class FakeTransport:
    def __init__(self):
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name, default=None):
        return default


def connections(pool: Pool, n: int) -> list[Connection]:
    out = []
    for _ in range(n):
        conn = Connection(pool)
        conn.connection_made(FakeTransport())
        out.append(conn)
    return out


def test_every_read_of_a_burst_is_stamped_before_any_of_them_is_parsed():
    n = 16

    async def main():
        clock = Counter()
        pool = Pool(None, clock)
        seen = []   # (request, the read's stamp, the clock when its token was handled)

        def on_token(state, text, now):
            seen.append((state.request_id, now, clock()))   # a stream's bookkeeping reads the clock too
        conns = connections(pool, n)
        for i, conn in enumerate(conns):
            conn.send(b"POST / HTTP/1.1\r\n\r\n", StreamedResponse(conn, False, StreamState(i, 0.0), on_token,
                                                                    False, 60.0))
        first = clock.n
        for conn in conns:   # one loop turn: every socket read in turn, no parsing in between
            conn.data_received(RESPONSE)
        await asyncio.sleep(0)   # the pool's one drain for the turn
        return first, seen

    first, seen = asyncio.run(main())
    assert len(seen) == n * len(["Hello", " from", " raw", " bytes"])
    stamps = sorted({now for _, now, _ in seen})
    # n reads, n consecutive readings: nothing read the clock between the first read and the last
    assert stamps == [first + 1.0 + i for i in range(n)]
    assert min(handled for _, _, handled in seen) > stamps[-1]   # parsing and bookkeeping came after every stamp
    # and each stream's tokens carry its own read's stamp, in the order the sockets were read
    assert [now for rid, now, _ in seen if _ == min(h for r, _, h in seen if r == rid)] == stamps


def test_bytes_read_before_the_connection_ended_are_parsed_before_its_end():
    # a body without length or chunks ends when the server closes: the close may come before the drain
    async def main():
        pool = Pool(None, Counter())
        texts = []
        conn, = connections(pool, 1)
        state = StreamState(0, 0.0)
        response = StreamedResponse(conn, False, state, lambda s, text, now: texts.append(text), False, 60.0)
        conn.send(b"POST / HTTP/1.1\r\n\r\n", response)
        conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + event("a")
                           + event("b", "length"))
        conn.connection_lost(None)   # before the drain the read asked for
        await response.future        # a stream_cut here would raise
        return texts, state.finish_reason

    assert asyncio.run(main()) == (["a", "b"], "length")


def test_a_handler_that_raises_does_not_lose_the_other_reads_of_its_turn():
    async def main():
        pool = Pool(None, Counter())
        texts = []

        def on_token(state, text, now):
            if state.request_id == 0:
                raise RuntimeError("a bug in a handler")
            texts.append(text)
        conns = connections(pool, 2)
        responses = [StreamedResponse(c, False, StreamState(i, 0.0), on_token, False, 60.0)
                     for i, c in enumerate(conns)]
        for conn, response in zip(conns, responses):
            conn.send(b"POST / HTTP/1.1\r\n\r\n", response)
            conn.data_received(RESPONSE)
        with pytest.raises(RuntimeError, match="a bug in a handler"):
            pool.drain()
        await responses[1].future   # the other stream's read was still parsed
        return texts

    assert asyncio.run(main()) == ["Hello", " from", " raw", " bytes"]


@pytest.mark.parametrize("loop", LOOPS)
def test_a_burst_over_real_sockets_is_stamped_in_one_run_of_readings(loop):
    # n streams; the server answers all of them at once while the client's loop is held, so its next turn finds
    # every socket readable, as when a batched engine writes its step to every stream
    n = 24
    held, written = threading.Event(), threading.Event()
    writers, read = [], [0]

    async def script(server, reader, writer, number):
        if await server.read_request(reader) is None:
            return
        writers.append(writer)
        read[0] += 1
        if read[0] == n:   # the last request in: answer every stream in one go, once the client is held
            await asyncio.get_running_loop().run_in_executor(None, held.wait, 10)
            for w in writers:
                w.write(RESPONSE)
            for w in writers:
                await w.drain()
            written.set()
        await server.read_request(reader)   # keep the connection until the client closes it

    async def main(url):
        clock = Counter()
        streamer = Streamer(url, "m", "completions", {}, SamplingConfig(), 10.0, clock)
        seen = []
        states = [StreamState(i, 0.0) for i in range(n)]
        tasks = [asyncio.create_task(streamer.send("hi", 4, s, lambda st, t, now: seen.append((now, clock()))))
                 for s in states]
        while read[0] < n:
            await asyncio.sleep(0.005)
        held.set()
        assert written.wait(10)   # the loop is held (a blocking wait) while the server writes every stream
        await asyncio.gather(*tasks)
        streamer.close()
        return seen

    factory = None
    if loop == "uvloop":
        import uvloop
        factory = uvloop.new_event_loop
    with RawServer(script) as server, asyncio.Runner(loop_factory=factory) as runner:
        seen = runner.run(main(server.url))
    assert len(seen) == 4 * n
    stamps = sorted({now for now, _ in seen})
    assert len(stamps) == n and stamps[-1] - stamps[0] == n - 1   # one reading per socket, back to back
    assert min(handled for _, handled in seen) > stamps[-1]


def test_a_requests_ttft_counts_from_its_write_to_the_socket():
    # the clock is read while a new connection is made and the response set up: the arrival is the last
    # reading before the request's bytes were written, not the first
    async def script(server, reader, writer, number):
        while await server.read_request(reader) is not None:
            writer.write(RESPONSE)
            await writer.drain()

    async def main(url):
        clock = Counter()
        streamer = Streamer(url, "m", "completions", {}, SamplingConfig(), 10.0, clock)
        at_write = []
        open_ = streamer.pool._open

        async def opened(factory):
            conn = await open_(factory)
            write = conn.transport.write
            conn.transport.write = lambda data: (at_write.append(clock.n), write(data))
            return conn
        streamer.pool._open = opened
        state, tokens = StreamState(0, 0.0), []
        before = clock.n
        await streamer.send("hi", 4, state, lambda s, t, now: tokens.append(now))
        streamer.close()
        return before, at_write, state, tokens

    with RawServer(script) as server, asyncio.Runner() as runner:
        before, at_write, state, tokens = runner.run(main(server.url))
    assert at_write and state.arrival_ms == at_write[0] and state.arrival_ms > before + 1
    assert len(tokens) == 4 and tokens[0] > state.arrival_ms


def test_the_fake_servers_truth_is_each_streams_own_write():
    # a step writes every stream in turn: each stream's logged write is its own, after the ones before it
    from tests.fakes.fake_openai import Behaviour, FakeOpenAI

    async def main(url, n):
        streamer = Streamer(url, "m", "completions", {}, SamplingConfig(), 10.0, lambda: 0.0)
        await asyncio.gather(*(streamer.send("a b", 3, StreamState(i, 0.0), lambda s, t, now: None)
                               for i in range(n)))
        streamer.close()

    with FakeOpenAI(Behaviour(gap_ms=20.0)) as fake:
        asyncio.run(main(fake.url, 8))
        writes = [w for r in fake.logged(8) for w in r.writes_s]
    assert len(writes) == 24 and len(set(writes)) == len(writes)   # no two streams share the step's one reading




def test_the_fake_servers_read_time_is_when_the_requests_bytes_came_not_when_it_got_to_them():
    # n requests come in while the server's loop is held, so one turn reads them all and then handles them one by
    # one: each logged read is from that turn, before the first of them was handled
    import time
    from tests.fakes.fake_openai import Behaviour, FakeOpenAI
    n = 8

    async def main(fake, handled):
        streamer = Streamer(fake.url, "m", "completions", {}, SamplingConfig(), 10.0, lambda: 0.0)
        send = lambda: asyncio.gather(*(streamer.send("a b", 1, StreamState(i, 0.0), lambda s, t, now: None)
                                        for i in range(n)))
        await send()   # n connections, open and idle in the pool
        completion = fake._completion

        async def counted(*args, **kwargs):
            handled.append(time.perf_counter())
            return await completion(*args, **kwargs)
        fake._completion = counted
        fake._loop.call_soon_threadsafe(time.sleep, 0.3)   # hold the server's loop (a blocking sleep)
        await asyncio.sleep(0.05)
        await send()   # written while it is held
        streamer.close()

    with FakeOpenAI(Behaviour(gap_ms=1.0)) as fake:
        handled = []
        asyncio.run(main(fake, handled))
        reads = sorted(r.read_s for r in fake.logged(2 * n))[n:]
    assert len(handled) == n and max(reads) < min(handled)
