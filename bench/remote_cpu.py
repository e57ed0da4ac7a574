"""CPU per streamed request of the remote driver's client alone, against httpx reading the same streams.

Each measurement is a fresh process on the client's core that keeps `streams` requests in flight
against the fake server (64-token answers), warms up, then counts its own CPU time (user +
system) over `requests` more. `ours` is backend.targets.remote.client.Streamer, the hot path the
workers run; `httpx` is what that path was before: httpx.AsyncClient.stream with aiter_raw, the
same bytes.find line splitting and json.loads on asyncio's own loop. bench.remote_client runs
both, interleaved, and puts the medians in its report.

    python -m bench.remote_cpu --url http://127.0.0.1:PORT/v1 --client ours --streams 16 --requests 200
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

PROMPT = "hello " * 128


async def _ours(url: str, streams: int, requests: int, output_len: int) -> dict:
    from backend.config import SamplingConfig
    from backend.targets.remote.client import Streamer, StreamState

    t0 = time.perf_counter()
    streamer = Streamer(url, "bench", "completions", {}, SamplingConfig(), 60.0,
                        lambda: (time.perf_counter() - t0) * 1000.0)

    def on_token(state, text, now):
        state.token_times.append(now)

    async def one():
        state = StreamState(0, 0.0)
        await streamer.send(PROMPT, output_len, state, on_token)
        return len(state.token_times)

    out = await _measure(one, streams, requests)
    streamer.close()
    return out


async def _httpx(url: str, streams: int, requests: int, output_len: int) -> dict:
    import httpx

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=60.0) as client:
        async def one():
            body = {"model": "bench", "prompt": PROMPT, "max_tokens": output_len, "stream": True,
                    "stream_options": {"include_usage": True}}
            times = []
            async with client.stream("POST", url + "/completions", json=body) as response:
                buf = b""
                async for chunk in response.aiter_raw():
                    now = time.perf_counter()
                    buf = buf + chunk if buf else chunk
                    start = 0
                    while (end := buf.find(b"\n", start)) >= 0:
                        line, start = buf[start:end], end + 1
                        if line.startswith(b"data:") and (payload := line[5:].strip()) != b"[DONE]":
                            event = json.loads(payload)
                            if event.get("choices") and event["choices"][0].get("text"):
                                times.append(now)
                    buf = buf[start:]
            return len(times)

        return await _measure(one, streams, requests)


async def _measure(one, streams: int, requests: int) -> dict:
    async def run(n: int) -> list[int]:
        left = [n]
        counts: list[int] = []

        async def user():
            while left[0] > 0:
                left[0] -= 1
                counts.append(await one())
        await asyncio.gather(*(user() for _ in range(streams)))
        return counts

    await run(streams)   # warm-up: connections opened, code paths taken once
    t0, wall0 = os.times(), time.perf_counter()
    counts = await run(requests)
    t1, wall = os.times(), time.perf_counter() - wall0
    user, system = t1.user - t0.user, t1.system - t0.system
    return {"cpu_ms_per_request": 1000.0 * (user + system) / requests, "cpu_share": (user + system) / wall,
            "system_share": system / max(user + system, 1e-9),
            "tokens_per_request": sum(counts) / len(counts)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--client", choices=("ours", "httpx"), required=True)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--profile", type=int, metavar="N", help="also print cProfile's top N functions (own time)")
    args = parser.parse_args()
    if args.profile:
        import cProfile
        import io
        import pstats
        profiler = cProfile.Profile()
        profiler.enable()
    work = (_ours if args.client == "ours" else _httpx)(args.url, args.streams, args.requests, args.output_len)
    if args.client == "ours":   # the workers' loop: uvloop where installed
        try:
            import uvloop
            result = uvloop.run(work)
        except ImportError:
            result = asyncio.run(work)
    else:
        result = asyncio.run(work)
    if args.profile:
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).strip_dirs().sort_stats("tottime").print_stats(args.profile)
        result["profile"] = text.getvalue()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
