"""The remote driver against a fake server that logs its own true timing: how close are its figures?

The fake OpenAI-compatible server (tests/fakes/fake_openai.py) runs as its own process on loopback and
streams each answer one token per engine step, `--gap-ms` apart, logging when it read each request
and wrote each token on the machine's monotonic clock. The driver (`load --endpoint`, closed loop
at 1, 16, 64 and 256 concurrent streams, 128-token text prompts, 64-token answers) is run in
this process with its client workers, and its figures are set beside the server's own:

- requests/s and output tokens/s as the client counted them;
- TTFT p50/p99: the client's (request sent to first token read) and the server's (request read to
  first token written); their difference is the client's and the loopback's overhead;
- ITL p50/p99: the client's gaps between tokens and the server's true gaps between writes;
- end-to-end p50 overhead: the client's end-to-end minus the server's (read to last write);
- the client's CPU time (workers and coordinator) per request, and its busiest worker's share;
- connections the client opened and the server accepted;
- whether the run flagged itself client-limited, and why.

Targets (issue 18), at 256 streams with the default workers: ITL p50 within 0.2 ms of the true gap
p50, ITL p99 within 2x of the true p99, TTFT p50 within 5 ms of the server's; where the machine
cannot reach them the run must be flagged client-limited rather than wrong.

If `aiperf` is installed, the same runs go through it side by side; otherwise the report says so.

    python bench/remote_client.py --readme    (alone on the machine)
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import numpy as np  # noqa: E402

from backend.config import RemoteEndpoint, RunConfig
from backend.targets.remote.pool import default_workers  # noqa: E402
from backend.targets.remote.target import run_remote
from backend.workload.spec import workload_from_dict  # noqa: E402

README = Path(__file__).with_name("README.md")
BEGIN, END = "<!-- remote_client:begin -->", "<!-- remote_client:end -->"
ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, httpx {httpx.__version__}"


def proc_cpu_s(pid: int) -> float | None:
    """A process's user + system CPU seconds (Linux /proc), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class Server:
    def __init__(self, gap_ms: float):
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fakes" / "fake_openai.py"), "--port", str(self.port),
                                      "--gap-ms", str(gap_ms)], stdout=subprocess.PIPE, cwd=ROOT)
        self.proc.stdout.readline()   # "serving on ..."
        self.root = f"http://127.0.0.1:{self.port}"
        self.url = self.root + "/v1"

    def reset(self) -> None:
        httpx.post(self.root + "/fake/reset", timeout=10)

    def log(self) -> dict:
        return httpx.get(self.root + "/fake/log", timeout=60).json()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def p(values, q) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def one_run(server: Server, streams: int, requests_per_stream: int, output_len: int, workers: int | None) -> dict:
    server.reset()
    spec = workload_from_dict({"arrival": "closed", "concurrency": streams,
                               "num_requests": max(100, streams * requests_per_stream), "prompt_len": 128,
                               "output_len": output_len, "prompt_source": "text", "seed": 0}, "bench")
    config = RunConfig(mode="load", workload=spec,
                       endpoint=RemoteEndpoint(server.url, "smollm2", None, "completions", 60.0, False, None, workers))
    server_cpu0 = proc_cpu_s(server.proc.pid)
    finished = run_remote(config, lambda e: None, lambda: False)
    server_cpu = proc_cpu_s(server.proc.pid)
    if finished.error:
        raise SystemExit(f"the run failed: {finished.error}")
    s, info = finished.summary, finished.data.info
    log = server.log()
    reqs = log["requests"]
    gaps = [(b - a) * 1000 for r in reqs for a, b in zip(r["writes_s"], r["writes_s"][1:])]
    ttft = [(r["writes_s"][0] - r["read_s"]) * 1000 for r in reqs if r["writes_s"]]
    e2e = [(r["writes_s"][-1] - r["read_s"]) * 1000 for r in reqs if r["writes_s"]]
    cpu_s = s["client_cpu_s"] + s["client_coordinator_cpu_s"]
    return {
        "streams": streams, "workers": int(s["client_workers"]), "requests": int(s["num_finished"]),
        "req_s": s["requests_per_s"], "tok_s": s["output_tokens_per_s"],
        "ttft_p50": s["ttft_p50_ms"], "ttft_p99": s["ttft_p99_ms"], "srv_ttft_p50": p(ttft, 50),
        "srv_ttft_p99": p(ttft, 99),
        "itl_p50": s["itl_p50_ms"], "itl_p99": s["itl_p99_ms"], "gap_p50": p(gaps, 50), "gap_p99": p(gaps, 99),
        "e2e_over": s["e2e_p50_ms"] - p(e2e, 50),
        "cpu_ms_per_req": 1000 * cpu_s / max(1, s["num_finished"]), "cpu_share_max": s["client_cpu_share_max"],
        "lag_p99": s["client_loop_lag_p99_ms"],
        "server_cpu_s": None if server_cpu is None or server_cpu0 is None else server_cpu - server_cpu0,
        "conns": int(s["connections_opened"]), "srv_conns": log["num_connections"] - 1,   # less the log's GET
        "limited": bool(s["client_limited"]), "reasons": info["client"]["reasons"],
    }


def aiperf_run(server: Server, streams: int, requests_per_stream: int, output_len: int) -> dict | None:
    """The same closed-loop run through AIPerf, if it is installed: its own TTFT, ITL and throughput."""
    exe = shutil.which("aiperf")
    if exe is None:
        return None
    server.reset()
    with tempfile.TemporaryDirectory() as out:
        cmd = [exe, "profile", "-m", "smollm2", "--endpoint-type", "completions", "--streaming",
               "--url", f"127.0.0.1:{server.port}", "--concurrency", str(streams),
               "--request-count", str(max(100, streams * requests_per_stream)),
               "--synthetic-input-tokens-mean", "128", "--synthetic-input-tokens-stddev", "0",
               "--output-tokens-mean", str(output_len), "--output-tokens-stddev", "0", "--artifact-dir", out]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            return {"error": (done.stderr or done.stdout).strip().splitlines()[-1:] or ["failed"]}
        exports = list(Path(out).rglob("profile_export_aiperf.json"))
        if not exports:
            return {"error": ["no profile_export_aiperf.json written"]}
        data = json.loads(exports[0].read_text())

    def metric(name, stat):
        m = data.get(name) or data.get("records", {}).get(name) or {}
        return m.get(stat, float("nan")) if isinstance(m, dict) else float("nan")
    return {"req_s": metric("request_throughput", "avg"), "ttft_p50": metric("time_to_first_token", "p50"),
            "ttft_p99": metric("time_to_first_token", "p99"), "itl_p50": metric("inter_token_latency", "p50"),
            "itl_p99": metric("inter_token_latency", "p99"), "srv_conns": server.log()["num_connections"] - 1}


def table(rows: list[dict]) -> list[str]:
    out = ["| streams | workers | req/s | tok/s | TTFT p50 client / server | TTFT p99 client / server | "
           "ITL p50 client / true gap | ITL p99 client / true gap | E2E p50 overhead | client CPU per request "
           "(busiest worker) | connections client / server | client-limited |",
           "|---:|---:|---:|---:|---|---|---|---|---:|---|---|---|"]
    for r in rows:
        flag = "no" if not r["limited"] else "**yes**: " + "; ".join(x.split(":")[0] for x in r["reasons"])
        out.append(f"| {r['streams']} | {r['workers']} | {r['req_s']:.0f} | {r['tok_s']:,.0f} | "
                   f"{r['ttft_p50']:.2f} / {r['srv_ttft_p50']:.2f} ms | {r['ttft_p99']:.1f} / {r['srv_ttft_p99']:.1f} ms | "
                   f"{r['itl_p50']:.3f} / {r['gap_p50']:.3f} ms | {r['itl_p99']:.2f} / {r['gap_p99']:.2f} ms | "
                   f"{r['e2e_over']:+.2f} ms | {r['cpu_ms_per_req']:.2f} ms ({100 * r['cpu_share_max']:.0f}% of a core) | "
                   f"{r['conns']} / {r['srv_conns']} | {flag} |")
    return out


def targets(row: dict) -> list[str]:
    checks = [("ITL p50 within 0.2 ms of the true gap p50", abs(row["itl_p50"] - row["gap_p50"]) <= 0.2,
               f"{row['itl_p50']:.3f} vs {row['gap_p50']:.3f} ms"),
              ("ITL p99 within 2x of the true p99", row["itl_p99"] <= 2 * row["gap_p99"],
               f"{row['itl_p99']:.2f} vs {row['gap_p99']:.2f} ms"),
              ("TTFT p50 within 5 ms of the server's", row["ttft_p50"] - row["srv_ttft_p50"] <= 5.0,
               f"{row['ttft_p50']:.2f} vs {row['srv_ttft_p50']:.2f} ms")]
    lines = []
    for name, met, figures in checks:
        verdict = "met" if met else ("missed, and the run flagged itself client-limited" if row["limited"]
                                     else "MISSED WITHOUT A FLAG")
        lines.append(f"- {name}: {figures}: {verdict}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="1,16,64,256", help="concurrent streams, comma-separated")
    parser.add_argument("--requests-per-stream", type=int, default=4)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--gap-ms", type=float, default=1.0, help="the fake server's gap between engine steps")
    parser.add_argument("--workers", type=int, help=f"client workers (default: one per core, {default_workers()})")
    parser.add_argument("--readme", action="store_true", help="write the report into bench/README.md")
    args = parser.parse_args()
    streams = [int(x) for x in args.streams.split(",")]

    def log(message: str) -> None:
        print(f"... {message}", file=sys.stderr, flush=True)

    server = Server(args.gap_ms)
    rows, theirs = [], {}
    try:
        for n in streams:
            log(f"{n} streams, {args.workers or default_workers()} workers")
            rows.append(one_run(server, n, args.requests_per_stream, args.output_len, args.workers))
            if n == max(streams) and (args.workers or default_workers()) != 1:
                log(f"{n} streams, 1 worker (for comparison)")
                rows.append(one_run(server, n, args.requests_per_stream, args.output_len, 1))
            theirs[n] = aiperf_run(server, n, args.requests_per_stream, args.output_len)
    finally:
        server.close()

    top = next(r for r in rows if r["streams"] == max(streams))
    lines = [f"Measured {datetime.date.today()} on {machine()}: `python bench/remote_client.py` "
             f"(closed loop, 128-token text prompts, {args.output_len}-token answers, the fake server's engine step "
             f"every {args.gap_ms:g} ms, {args.requests_per_stream} requests per stream, at least 100). Client figures "
             "are the driver's own summary; server figures come from the fake server's log of when it read each "
             "request and wrote each token, on the same monotonic clock.", ""]
    lines += table(rows)
    lines += ["", f"Targets at {top['streams']} streams with the default workers ({top['workers']}):"]
    lines += targets(top)
    if all(v is None for v in theirs.values()):
        lines += ["", "AIPerf is not installed here (`pip install aiperf`), so no side-by-side AIPerf rows were run."]
    else:
        lines += ["", "| streams | AIPerf req/s | TTFT p50 / p99 | ITL p50 / p99 | connections (server) |",
                  "|---:|---:|---|---|---:|"]
        for n, t in theirs.items():
            if t is None or "error" in t:
                lines.append(f"| {n} | failed: {' '.join(t['error']) if t else 'not run'} | | | |")
            else:
                lines.append(f"| {n} | {t['req_s']:.0f} | {t['ttft_p50']:.2f} / {t['ttft_p99']:.1f} ms | "
                             f"{t['itl_p50']:.3f} / {t['itl_p99']:.2f} ms | {t['srv_conns']} |")
    text = "\n".join(lines)
    print(text)
    if args.readme:
        body = README.read_text(encoding="utf-8")
        if BEGIN not in body or END not in body:
            raise SystemExit(f"{README} has no {BEGIN} ... {END} markers to write between")
        head, rest = body.split(BEGIN, 1)
        README.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.split(END, 1)[1]}", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
