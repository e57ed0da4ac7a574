"""How late the remote client stamps a burst: every stream's chunk readable in one turn of its event loop.

A batched server writes a chunk to every stream in the same step. The client stamps each read as it
is read and parses the turn's reads after all of them (backend.targets.remote.http11); before, it
parsed each read in its own callback, so the last socket of a burst was stamped after every other
one's parsing. Both ways run here side by side in alternating rounds ("parse in the callback" is the
old `data_received`, put back for the bench only):

1. One burst, no server timing involved: n streams' chunks written while the client's loop is held,
   so its next turn reads them all; the spread of their stamps (first to last) and per read.
2. A closed loop against the fake server (its own process on core 0, logging when each request's
   bytes came in and when it wrote each stream's token), the Streamer in this process on the other
   cores: where the client's TTFT and token times part from the server's, request by request
   (matched by the client's port and order).

    python -m bench.burst_stamps [--streams 64,256] [--ticks 1,10] [--rounds 5] [--readme]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import threading
import time
from contextlib import contextmanager

import numpy as np

from backend.config import SamplingConfig
from backend.targets.remote import http11
from backend.targets.remote.client import Streamer, StreamState
from bench.common import add_readme_flag, alternating, log, measured_line, publish
from bench.remote_client import machine_extras
from bench.remote_fake import Server, client_cores
from tests.fakes.raw_http import STREAM_HEAD, RawServer, chunk

WAYS = ("stamp, then parse the turn", "parse in the callback")
clock = lambda: time.perf_counter() * 1000.0   # noqa: E731  (the fake server's clock, in ms)


@contextmanager
def way(name: str):
    """The old way: each read parsed in its own callback, stamped when its callback began."""
    if name == WAYS[0]:
        yield
        return
    own = http11.Connection.data_received
    http11.Connection.data_received = lambda self, data: self.feed(data, self.clock())
    try:
        yield
    finally:
        http11.Connection.data_received = own


def event(i: int, last: bool) -> bytes:
    e = {"id": "cmpl-fake", "object": "text_completion", "created": 0, "model": "fake",
         "choices": [{"index": 0, "text": " tok", "finish_reason": "length" if last else None}],
         "usage": {"prompt_tokens": 128, "completion_tokens": i + 1, "total_tokens": 129 + i}}
    return chunk(b"data: " + json.dumps(e, separators=(",", ":")).encode() + b"\n\n")


def one_burst(n: int) -> float:
    """The ms between the first and the last stamp of n streams' chunks read in one loop turn."""
    held, written, writers, read = threading.Event(), threading.Event(), [], [0]

    async def script(server, reader, writer, number):
        if await server.read_request(reader) is None:
            return
        writers.append(writer)
        writer.write(STREAM_HEAD)
        read[0] += 1
        if read[0] == n:
            await asyncio.get_running_loop().run_in_executor(None, held.wait, 10)
            for w in writers:
                w.write(event(0, False))
            written.set()
            await asyncio.sleep(0.05)
            for w in writers:
                w.write(event(1, True) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await server.read_request(reader)

    async def main(url):
        streamer = Streamer(url, "m", "completions", {}, SamplingConfig(), 10.0, clock)
        first: dict[int, float] = {}
        tasks = [asyncio.create_task(streamer.send("hi", 2, StreamState(i, 0.0),
                                                   lambda s, t, now: first.setdefault(s.request_id, now)))
                 for i in range(n)]
        while read[0] < n:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.02)   # the heads read
        held.set()
        written.wait(10)            # the loop held while every stream's chunk is written
        await asyncio.gather(*tasks)
        streamer.close()
        return max(first.values()) - min(first.values())

    with RawServer(script) as server, asyncio.Runner(loop_factory=_loop()) as runner:
        return runner.run(main(server.url))


def closed_loop(server: Server, n: int, per_user: int, output_len: int) -> dict:
    """n users, each sending per_user requests one after another; client against server, request by request."""
    writes: dict[int, tuple[int, float]] = {}
    stamps: dict[int, list[float]] = {}
    states: dict[int, StreamState] = {}
    send = http11.Connection.send

    def sending(conn, request, handler):
        writes[handler.state.request_id] = conn.transport.get_extra_info("sockname")[1]
        send(conn, request, handler)

    async def main():
        streamer = Streamer(server.url, "m", "completions", {}, SamplingConfig(ignore_eos=True), 120.0, clock)

        async def user(u):
            for r in range(per_user):
                state = states[u * per_user + r] = StreamState(u * per_user + r, 0.0)
                words = " ".join(f"u{u}r{r}w{i}" for i in range(128))
                await streamer.send(words, output_len, state, lambda s, t, now: stamps.setdefault(
                    s.request_id, []).append(now))
        await asyncio.gather(*(user(u) for u in range(n)))
        streamer.close()

    server.reset()
    http11.Connection.send = sending
    try:
        with asyncio.Runner(loop_factory=_loop()) as runner:
            runner.run(main())
    finally:
        http11.Connection.send = send
    by_port: dict[int, list] = {}
    for q in server.log()["requests"]:
        by_port.setdefault(q["client_port"], []).append(q)
    mine: dict[int, list[int]] = {}
    for rid, port in writes.items():
        mine.setdefault(port, []).append(rid)
    ttft_err, late = [], []
    for port, rids in mine.items():
        theirs = sorted(by_port.get(port, []), key=lambda q: q["read_s"])
        for rid, q in zip(sorted(rids, key=lambda r: states[r].arrival_ms), theirs):
            true = [w * 1000 for w in q["writes_s"]]
            got = stamps.get(rid, [])
            if got and true:
                ttft_err.append((got[0] - states[rid].arrival_ms) - (true[0] - q["read_s"] * 1000))
                late += [c - s for c, s in zip(got, true)]
    p = lambda v, q: float(np.percentile(v, q)) if v else float("nan")   # noqa: E731
    return {"ttft_err_p50": p(ttft_err, 50), "late_p50": p(late, 50), "late_p99": p(late, 99)}


def _loop():
    try:
        import uvloop
        return uvloop.new_event_loop
    except ImportError:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="64,256")
    parser.add_argument("--ticks", default="1,10", help="the fake server's ms between steps (part 2)")
    parser.add_argument("--rounds", type=int, default=5)
    add_readme_flag(parser)
    args = parser.parse_args()
    counts = [int(n) for n in args.streams.split(",")]
    load = os.getloadavg()[0]
    os.sched_setaffinity(0, client_cores())
    bursts = {(w, n): [] for w in WAYS for n in counts}
    for rnd, ways in alternating(args.rounds, WAYS):
        for w in ways:
            for n in counts:
                with way(w):
                    spread = one_burst(n)
                if rnd >= 0:
                    bursts[(w, n)].append(spread)
    lines = [measured_line(*machine_extras()), "", f"`python -m bench.burst_stamps` (load average {load:.1f} before, "
             f"{os.getloadavg()[0]:.1f} after; above about 1, other work shared the cores). One burst: n streams' "
             f"chunks read in one loop turn, the spread of their stamps (median of {args.rounds} rounds, the two ways "
             "alternating):", "", "| streams | " + " | ".join(f"{w}: spread ms (µs a read)" for w in WAYS) + " |",
             "|---:|---:|---:|"]
    for n in counts:
        cells = [statistics.median(bursts[(w, n)]) for w in WAYS]
        lines.append(f"| {n} | " + " | ".join(f"{c:.3f} ({1000 * c / n:.1f})" for c in cells) + " |")
    lines += ["", "A closed loop against the fake server (2 requests a user, 64-token answers), one run each way a "
              "row: client TTFT less the server's (read to first write) p50, and each token's stamp less its true "
              "write:", "", "| tick ms | streams | way | TTFT - true p50 ms | token late p50 ms | token late p99 ms |",
              "|---:|---:|---|---:|---:|---:|"]
    for tick in (float(t) for t in args.ticks.split(",")):
        server = Server(tick)
        try:
            for n in counts:
                for w in WAYS:
                    log(f"{tick:g} ms ticks, {n} streams, {w}")
                    with way(w):
                        r = closed_loop(server, n, 2, 64)
                    lines.append(f"| {tick:g} | {n} | {w} | {r['ttft_err_p50']:.2f} | {r['late_p50']:.2f} | "
                                 f"{r['late_p99']:.2f} |")
        finally:
            server.close()
    return publish("burst_stamps", lines, args.readme)


if __name__ == "__main__":
    sys.exit(main())
