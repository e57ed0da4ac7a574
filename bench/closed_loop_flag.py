"""Does the CLIENT-LIMITED flag fire only where the figures go wrong? A closed loop on one client worker
against the fake server at 1, 10 and 30 ms engine steps.

The fake OpenAI server (tests/fakes/fake_openai.py) runs as its own process pinned to core 0 and logs its
true token times; the driver (`load --endpoint`, one client worker) runs on the other cores. Per tick: the
driver's ITL p50/p99 and TTFT p50 against the server's truth (exact as bench.remote_client defines it), the
send lag the flag reads (from when each request could have gone out), the closed loop's refill wait (a free
user waiting for the coordinator to make its next request: the loop's round trip, shown and never flagged),
the worker's loop lag and CPU share, and whether the run flagged itself.

    python -m bench.closed_loop_flag [--streams 256] [--ticks 1,10,30] [--readme]
"""
from __future__ import annotations

import argparse
import os
import sys

from backend.config import RemoteEndpoint, RunConfig
from backend.targets.remote.target import run_remote
from backend.workload.spec import workload_from_dict
from bench.common import add_readme_flag, log, measured_line, publish
from bench.remote_client import PROMPT_LEN, exact, machine_extras
from bench.remote_fake import Server, client_cores, truth


def closed_loop(server: Server, streams: int, requests: int, output_len: int) -> dict:
    server.reset()
    spec = workload_from_dict({"arrival": "closed", "concurrency": streams, "num_requests": requests,
                               "prompt_len": PROMPT_LEN, "output_len": output_len, "prompt_source": "text", "seed": 0},
                              "bench")
    config = RunConfig(mode="load", workload=spec,
                       endpoint=RemoteEndpoint(server.url, "smollm2", None, "completions", 120.0, False, None, 1))
    config.sampling.ignore_eos = True
    finished = run_remote(config, lambda e: None, lambda: False)
    if finished.error:
        raise SystemExit(f"the run failed: {finished.error}")
    s = finished.summary
    return {"itl_p50": s.itl_p50_ms, "itl_p99": s.itl_p99_ms, "ttft_p50": s.ttft_p50_ms, **truth(server.log()),
            "late_p99": s.client_dispatch_late_p99_ms, "refill_p99": s.client_refill_wait_p99_ms or 0.0,
            "lag_p99": s.client_loop_lag_p99_ms, "share": s.client_cpu_share_max, "limited": bool(s.client_limited),
            "clumped": float("nan") if s.client_clumped_share is None else s.client_clumped_share,
            "reasons": finished.data.info.remote.client["reasons"],
            "cpu_ms_per_req": 1000 * (s.client_cpu_s + s.client_coordinator_cpu_s) / max(1, s.num_finished)}


def fmt(tick: float, streams: int, r: dict) -> str:
    flag = "no" if not r["limited"] else "**yes**: " + "; ".join(x.split(" (")[0].split(":")[0] for x in r["reasons"])
    return (f"| {tick:g} | {streams} | {r['itl_p50']:.3f} / {r['gap_p50']:.3f} | {r['itl_p99']:.2f} / {r['gap_p99']:.2f} | "
            f"{r['ttft_p50']:.2f} / {r['srv_ttft_p50']:.2f} | {'yes' if exact(r) else 'no'} | {r['late_p99']:.2f} | "
            f"{r['refill_p99']:.2f} | {r['lag_p99']:.2f} | {100 * r['clumped']:.0f}% | {100 * r['share']:.0f}% | "
            f"{r['cpu_ms_per_req']:.2f} | "
            f"{flag} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="64,256", help="closed-loop streams, comma-separated")
    parser.add_argument("--requests-per-stream", type=int, default=2)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--ticks", default="1,10,30", help="the fake server's ms between engine steps")
    add_readme_flag(parser)
    args = parser.parse_args()
    rows = []
    load_before = os.getloadavg()[0]
    counts = [int(n) for n in args.streams.split(",")]
    for tick in (float(t) for t in args.ticks.split(",")):
        server = Server(tick)
        os.sched_setaffinity(0, client_cores())
        try:
            for n in counts:
                log(f"{tick:g} ms ticks, {n} closed-loop streams")
                rows.append((tick, n, closed_loop(server, n, n * args.requests_per_stream, args.output_len)))
        finally:
            server.close()
    lines = [measured_line(*machine_extras()), "",
             f"`python -m bench.closed_loop_flag` (load average {load_before:.1f} on the machine's cores before the "
             f"runs, {os.getloadavg()[0]:.1f} after: above about 1, other work shared them and lags are inflated): "
             f"the fake server pinned to core 0, one client "
             f"worker on core {','.join(map(str, client_cores()))}; closed loops of {args.streams} streams, "
             f"{args.requests_per_stream} requests per stream, {PROMPT_LEN}-token prompts, {args.output_len}-token "
             "answers. Client / true; exact as in bench.remote_client (ITL p50 within 0.2 ms, p99 within 2x, TTFT "
             "p50 within 5 ms). The send lag counts from when a request could have gone out: a closed loop's next "
             "request from the later of its user being free and the request reaching the worker; the refill wait "
             "is the time between those two, the loop's own round trip (the old measure counted it as lag). The flag "
             "(backend.targets.remote.honesty): send lag p99 more than 5 ms beyond the loop lag p99 (a request waits "
             "on a timer, so it goes out as late as the loop wakes); loop lag p99 over 1 ms with more than 25% of "
             "tokens clumped, or longer than two of the run's ITL p50, or with a p50 over 5 ms; a worker over 90% of "
             "a core. Each read is stamped as it is read, before the loop turn's parsing; TTFT counts from the "
             "request's write to the socket; the fake server logs each stream's own write.", "",
             "| tick ms | streams | ITL p50 ms | ITL p99 ms | TTFT p50 ms | exact | send lag p99 ms | refill wait p99 ms | "
             "loop lag p99 ms | clumped | busiest worker | CPU ms per request | flagged |",
             "|---:|---:|---|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    lines += [fmt(tick, n, r) for tick, n, r in rows]
    disagree = [f"{tick:g} ms, {n} streams ({'exact yet flagged' if r['limited'] else 'NOT exact and not flagged'})"
                for tick, n, r in rows if r["limited"] == exact(r)]
    lines += ["", "The flag " + ("agreed with exactness in every run." if not disagree
                                  else "disagreed with exactness at " + ", ".join(disagree) + ".")]
    return publish("closed_loop_flag", lines, args.readme)


if __name__ == "__main__":
    sys.exit(main())
