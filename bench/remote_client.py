"""The remote driver against a fake server that logs its own true timing, side by side with AIPerf and GuideLLM.

The fake OpenAI-compatible server (tests/fakes/fake_openai.py) runs as its own process on
loopback, pinned to core 0, and streams each answer one token per engine step, `--gap-ms`
apart, logging when it read each request and wrote each token on the machine's monotonic clock.
Everything on the client side (this process, the driver's workers, the other tools) is pinned
to the other cores, so what limits a client is that client.

1. CPU per 64-token request of the streaming client alone (bench.remote_cpu): ours against
   httpx reading the same streams, at 1, 16 and 64 streams, interleaved, medians of repeats.
2. At each stream count (closed loop, 128-token prompts, 64-token answers; fewer requests per
   stream at the high counts), the driver (`load --endpoint`) and then each anchor tool drive
   the same server; per run: ITL p50/p99 and TTFT p50 set against the server's truth, the
   client's CPU per request, and, for ours, whether the run flagged itself client_limited.
   A run is *exact* when ITL p50 is within 0.2 ms of the true gap p50, ITL p99 within 2x of the
   true p99 and TTFT p50 within 5 ms of the server's.

The anchors (AIPerf and GuideLLM, both on PyPI) are installed by this script into a bench-only
virtualenv, .venv-bench (bench/remote_anchors.py); `--no-anchors` skips them.

    python -m bench.remote_client --readme    (as alone on the machine as you can)
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from backend.config import RemoteEndpoint, RunConfig
from backend.targets.remote.target import run_remote
from backend.workload.spec import workload_from_dict
from bench import remote_anchors
from bench.common import ROOT, add_readme_flag, log, measured_line, publish
from bench.remote_fake import Server, client_cores, truth

PROMPT_LEN = 128
PROFILE_STREAMS = 64
ITL_P50_MS, ITL_P99_X, TTFT_P50_MS = 0.2, 2.0, 5.0   # the targets


def machine_extras() -> tuple[str, ...]:
    """The client's HTTP parser and event loop, which set its CPU per token."""
    import httptools
    try:
        import uvloop
        loop = f"uvloop {uvloop.__version__}"
    except ImportError:
        loop = "asyncio's own loop"
    return f"httptools {httptools.__version__}", loop


def num_requests(streams: int, per_stream: int) -> int:
    """Fewer requests per stream at the high counts keeps the run short; at least 64 for the percentiles."""
    return max(64, streams * (per_stream if streams <= 64 else max(1, per_stream // 2) if streams <= 256 else 1))


def exact(row: dict) -> bool:
    return (abs(row["itl_p50"] - row["gap_p50"]) <= ITL_P50_MS and row["itl_p99"] <= ITL_P99_X * row["gap_p99"]
            and row["ttft_p50"] - row["srv_ttft_p50"] <= TTFT_P50_MS)


def ours(server: Server, streams: int, requests: int, output_len: int) -> dict:
    server.reset()
    spec = workload_from_dict({"arrival": "closed", "concurrency": streams, "num_requests": requests,
                               "prompt_len": PROMPT_LEN, "output_len": output_len, "prompt_source": "text", "seed": 0},
                              "bench")
    config = RunConfig(mode="load", workload=spec,
                       endpoint=RemoteEndpoint(server.url, "smollm2", None, "completions", 120.0, False, None, None))
    config.sampling.ignore_eos = True
    finished = run_remote(config, lambda e: None, lambda: False)
    if finished.error:
        return {"tool": "ours", "streams": streams, "error": finished.error}
    s, remote = finished.summary, finished.data.info.remote
    cpu_s = s.client_cpu_s + s.client_coordinator_cpu_s   # the workers' and the coordinator's, during the run
    return {"tool": "ours", "streams": streams, "requests": int(s.num_finished), "itl_p50": s.itl_p50_ms,
            "itl_p99": s.itl_p99_ms, "ttft_p50": s.ttft_p50_ms, **truth(server.log()),
            "cpu_ms_per_req": 1000 * cpu_s / max(1, s.num_finished), "workers": int(s.client_workers),
            "limited": bool(s.client_limited), "reasons": remote.client["reasons"],
            "lag_p99": s.client_loop_lag_p99_ms, "late_p99": s.client_dispatch_late_p99_ms,
            "share": s.client_cpu_share_max}


def cpu_micro(server: Server, repeats: int, requests: int) -> dict:
    """Median CPU ms per 64-token request of each streaming client alone, by streams; interleaved runs."""
    runs: dict[tuple[str, int], list[float]] = {}
    for _ in range(repeats):
        for streams in (1, 16, 64):
            for client in ("ours", "httpx"):
                done = subprocess.run([sys.executable, "-m", "bench.remote_cpu", "--url", server.url,
                                       "--client", client, "--streams", str(streams), "--requests", str(requests)],
                                      capture_output=True, text=True, cwd=ROOT, timeout=600)
                if done.returncode != 0:
                    raise SystemExit(f"bench.remote_cpu failed: {done.stderr.strip().splitlines()[-1:]}")
                runs.setdefault((client, streams), []).append(json.loads(done.stdout)["cpu_ms_per_request"])
    return {key: statistics.median(values) for key, values in runs.items()}


def profile(server: Server, streams: int, requests: int, top: int = 10) -> list[str]:
    """cProfile's top functions by own time in our streaming client alone: where its CPU goes."""
    done = subprocess.run([sys.executable, "-m", "bench.remote_cpu", "--url", server.url, "--client",
                           "ours", "--streams", str(streams), "--requests", str(requests), "--profile", str(top)],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    if done.returncode != 0:
        return [f"(the profile failed: {done.stderr.strip().splitlines()[-1:]})"]
    text = json.loads(done.stdout)["profile"].splitlines()
    start = next(i for i, line in enumerate(text) if line.strip().startswith("ncalls"))
    return [line.rstrip().replace("/".join(str(ROOT).split("/")[:-1]) + "/", "") for line in text[start:] if line.strip()]


def fmt(row: dict) -> str:
    if "error" in row:
        return f"| {row['streams']} | {row['tool']} | failed: {row['error'][:120]} | | | | | |"
    ok = "yes" if exact(row) else "no"
    flag = ""
    if row["tool"] == "ours":
        flag = "no" if not row["limited"] else "**yes**: " + "; ".join(r.split(":")[0].split(" (")[0]
                                                                     for r in row["reasons"])
    tool = row["tool"] + (" (ITL: per-request means)" if row.get("per_request_means") else "")
    return (f"| {row['streams']} | {tool} | {row['itl_p50']:.3f} / {row['gap_p50']:.3f} "
            f"({row['itl_p50'] - row['gap_p50']:+.3f}) | {row['itl_p99']:.2f} / {row['gap_p99']:.2f} "
            f"({row['itl_p99'] / row['gap_p99']:.2f}x) | {row['ttft_p50']:.2f} / {row['srv_ttft_p50']:.2f} "
            f"({row['ttft_p50'] - row['srv_ttft_p50']:+.2f}) | {row['cpu_ms_per_req']:.2f} | {ok} | {flag} |")


def most_exact(rows: list[dict], tool: str, streams: list[int]) -> int:
    """The most streams up to which every run of `tool` was exact (0: not even one stream)."""
    held = 0
    for n in streams:
        row = next((r for r in rows if r["tool"] == tool and r["streams"] == n), None)
        if row is None or "error" in row or not exact(row):
            break
        held = n
    return held


def report(args, streams: list[int], micro: dict | None, rows: list[dict], tools: list[str], notes: list[str],
           prof: list[str]) -> str:
    cores = client_cores()
    lines = [measured_line(*machine_extras()), "",
             "`python -m bench.remote_client` on a machine shared with other work, the fake server pinned to core 0 "
             f"and every client to core {','.join(map(str, cores))}; the tools ran interleaved in one run (at each stream count: ours, then "
             f"{', '.join(t for t in tools if t != 'ours') or 'no anchor'}). Closed loop, {PROMPT_LEN}-token prompts, "
             f"{args.output_len}-token answers, the fake server's engine step every {args.gap_ms:g} ms.", ""]
    if micro:
        lines += ["CPU per 64-token request of the streaming client alone (bench.remote_cpu; median of "
                  f"{args.cpu_repeats} interleaved runs of {args.cpu_requests} requests, user + system time):", "",
                  "| streams | ours | httpx (the old hot path) | httpx / ours |", "|---:|---:|---:|---:|"]
        for n in (1, 16, 64):
            a, b = micro[("ours", n)], micro[("httpx", n)]
            lines.append(f"| {n} | {a:.2f} ms | {b:.2f} ms | {b / a:.1f}x |")
        lines.append("")
    lines += ["Against the server's truth (client / true, and the error). CPU per request: ours is its workers' and "
              "coordinator's CPU from the first request to the last; each anchor's is its whole process tree's over "
              "the same span (sampled from /proc when the server read the first request and wrote the last token).",
              "", "| streams | tool | ITL p50 ms | ITL p99 ms | TTFT p50 ms | CPU ms per request | exact | ours "
              "flagged client_limited |", "|---:|---|---|---|---|---:|---|---|"]
    lines += [fmt(r) for r in rows]
    lines += ["", "Most streams held exact: " + ", ".join(f"{t} {most_exact(rows, t, streams):,}" for t in tools) + "."]
    flag_lines = []
    for r in rows:
        if r["tool"] == "ours" and "error" not in r and r["limited"] == exact(r):
            flag_lines.append(f"{r['streams']} streams: {'exact yet flagged' if r['limited'] else 'NOT exact and not flagged'}"
                              f" (loop lag p99 {r['lag_p99']:.2f} ms, dispatch late p99 {r['late_p99']:.1f} ms, busiest "
                              f"worker {100 * r['share']:.0f}% of a core)")
    lines.append("The client_limited flag " + ("agreed with exactness at every stream count." if not flag_lines
                                              else "disagreed with exactness at " + "; ".join(flag_lines) + "."))
    lines += ["", " ".join(notes)] if notes else []
    if prof:
        lines += ["", f"Where our client's CPU goes (cProfile of bench.remote_cpu at {PROFILE_STREAMS} streams, own time; "
                  "the profiler's own overhead inflates the small calls):", "", "```", *prof, "```"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="1,16,64,256,1024", help="concurrent streams, comma-separated")
    parser.add_argument("--requests-per-stream", type=int, default=4, help="halved above 64 streams, 1 above 256")
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--gap-ms", type=float, default=1.0, help="the fake server's gap between engine steps")
    parser.add_argument("--cpu-repeats", type=int, default=3, help="runs of each CPU measurement (0: none)")
    parser.add_argument("--cpu-requests", type=int, default=128)
    parser.add_argument("--no-anchors", action="store_true", help="only our driver (no AIPerf, no GuideLLM)")
    add_readme_flag(parser)
    args = parser.parse_args()
    streams = [int(x) for x in args.streams.split(",")]

    tools = ["ours"]
    notes: list[str] = []
    anchors = {}
    if not args.no_anchors:
        anchors, notes = remote_anchors.prepare(log)
        tools += list(anchors)
    server = Server(args.gap_ms)   # pinned to core 0; from here this process and its children run on the others
    os.sched_setaffinity(0, client_cores())
    rows: list[dict] = []
    micro, prof = None, []
    try:
        if args.cpu_repeats:
            log("CPU per request of the streaming clients alone")
            micro = cpu_micro(server, args.cpu_repeats, args.cpu_requests)
            prof = profile(server, PROFILE_STREAMS, args.cpu_requests)
        for n in streams:
            requests = num_requests(n, args.requests_per_stream)
            log(f"{n} streams, {requests} requests: ours")
            rows.append(ours(server, n, requests, args.output_len))
            for name, run in anchors.items():
                log(f"{n} streams, {requests} requests: {name}")
                rows.append(run(server, n, requests, args.output_len, PROMPT_LEN))
    finally:
        server.close()
    return publish("remote_client", report(args, streams, micro, rows, tools, notes, prof), args.readme)


if __name__ == "__main__":
    sys.exit(main())
