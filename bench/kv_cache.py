"""What the paged KV cache and its prefix caching buy, on the bundled model and in the simulator.

    python -m bench.kv_cache capacity  [--rounds 3] [--readme]
    python -m bench.kv_cache multiturn [--rounds 2] [--llama-server] [--readme]
    python -m bench.kv_cache mooncake  [--rows 1000] [--local N] [--readme]

  * capacity: one burst of requests of mixed prompt and output lengths (most sequences far shorter
    than the longest, which a slot must hold) at one KV budget (--kv-tokens), paged against slots:
    the requests decoding together (mean over decode steps) and output tokens/s.
  * multiturn: 8 users x 6 turns of a chat (the multi-turn-chat preset, lengths scaled down), TTFT
    by turn with prefix caching on and off; with --llama-server, the same conversations sent to
    llama-cpp-python's server (the bundled GGUF) with its prompt cache (--cache) on and off.
  * mooncake: the shipped 50-row Mooncake sample and a longer one (bench/make_mooncake.py) replayed
    in the simulator (an H100 pricing llama-8b: the traces' prompts of thousands of tokens are too
    long for this machine's CPU), the measured prefix hit rate against the theoretical one.
The decode and prefill steps' own cost, paged against slots, is bench/kv_layout.py's.

Sides alternate round by round (the order reversed every other round), so that the load of a shared
machine falls on them alike; figures are medians of the rounds and ratios medians of the rounds' ratios.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

from backend.config import EngineConfig, ModelChoice, RemoteEndpoint, RunConfig, SamplingConfig
from backend.session import execute
from backend.workload.spec import WorkloadSpec, workload_from_dict
from bench.common import ROOT, add_readme_flag, alternating, log, measured_line, publish, ratio_median

SAMPLE = ROOT / "tests" / "data" / "traces" / "mooncake-50.jsonl"
THREADS = 2
MAX_LEN = 384   # capacity: the longest prompt + output


def local(spec: WorkloadSpec, threads: int, **engine) -> tuple:
    config = RunConfig(mode="load", model=ModelChoice("smollm2-135m", "auto", "auto"), workload=spec,
                       sampling=SamplingConfig(ignore_eos=True), engine=EngineConfig(**engine))
    config.threads = threads
    finished = execute(config, lambda e: None, lambda: False)
    if finished.error:
        raise SystemExit(f"run failed: {finished.error}")
    return finished.summary, finished.data


# --- capacity ------------------------------------------------------------------------------------

def capacity(args) -> list[str]:
    spec = workload_from_dict({"arrival": "burst", "num_requests": args.requests, "prompt_len": "16:192",
                               "output_len": "8:192", "prompt_source": "synthetic", "seed": 3}, "capacity")
    # the same memory: a slot holds the longest sequence (384 tokens), so the budget is budget // 384 slots;
    # the paged pool is the budget in blocks, shared by up to --requests requests
    slots = max(1, args.kv_tokens // MAX_LEN)
    sides = {"slots": dict(kv_layout="slots", max_batch=slots, kv_tokens=slots * MAX_LEN),
             "paged": dict(kv_layout="paged", prefix_caching=False, max_batch=args.requests, kv_tokens=args.kv_tokens)}
    kept: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    for rnd, order in alternating(args.rounds, list(sides), warmup=0):
        for name in order:
            log(f"capacity round {rnd}: {name}")
            s, data = local(spec, args.threads, **sides[name])
            decoding = [st.num_decode_requests for st in data.steps if st.num_decode_requests]
            if rnd >= 0:
                kept[name].append((statistics.mean(decoding), s.output_tokens_per_s))
    med = {n: [statistics.median(v[i] for v in kept[n]) for i in (0, 1)] for n in sides}
    rows = [f"| {n} | {med[n][0]:.1f} | {med[n][1]:.1f} |" for n in sides]
    return [measured_line(f"{args.threads} torch threads, machine shared with other jobs"), "",
            f"SmolLM2-135M (bundled, q4_1), {args.requests} requests at once, prompts 16-192 tokens, outputs 8-192 "
            f"(uniform, --ignore-eos: the mean sequence is about 200 tokens, the longest 384), one KV budget of "
            f"{args.kv_tokens} tokens: slots of 384 tokens ({slots} of them) or blocks of 16 ({args.kv_tokens // 16}, "
            f"up to {args.requests} requests), prefix caching off; medians of {args.rounds} rounds, sides alternating",
            "", "| layout | requests decoding together (mean over decode steps) | output tokens/s |", "|---|---|---|",
            *rows, "",
            f"paged / slots: {ratio_median([v[0] for v in kept['paged']], [v[0] for v in kept['slots']]):.2f}x "
            f"requests decoding together, "
            f"{ratio_median([v[1] for v in kept['paged']], [v[1] for v in kept['slots']]):.2f}x output tokens/s "
            f"(medians of the rounds' ratios)"]


# --- multi-turn ----------------------------------------------------------------------------------

def chat(users: int = 8, turns: int = 6) -> WorkloadSpec:
    """The multi-turn-chat preset's shape, scaled down to run in minutes on 2 cores."""
    return workload_from_dict({"arrival": "closed", "concurrency": users, "num_requests": users, "turns": turns,
                               "think_ms": 200.0, "ramp_ms": 0.0, "shared_prefix_len": 48, "prompt_source": "text",
                               "prompt_len": "48:96", "turn_len": "8:24", "output_len": "8:16", "seed": 0}, "chat")


def ttft_by_turn(data, turns: int) -> list[float]:
    return [statistics.mean(r.ttft_ms for r in data.requests if r.turn == t and r.ttft_ms is not None)
            for t in range(turns)]


@contextlib.contextmanager
def llama_server(threads: int, cache: bool):
    """llama-cpp-python's OpenAI server on the bundled GGUF (as tests/fakes/llama_server.py starts it)."""
    from backend.loaders.weights import bundled_gguf
    from tests.fakes.llama_server import free_port
    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(bundled_gguf()), "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "2048", "--n_threads", str(threads), "--n_threads_batch", str(threads),
           "--verbose", "false", "--interrupt_requests", "false", "--cache", "true" if cache else "false"]
    with tempfile.TemporaryFile() as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            url = f"http://127.0.0.1:{port}/v1"
            for _ in range(240):
                if proc.poll() is not None:
                    logf.seek(0)
                    raise SystemExit("llama.cpp server died: " + logf.read().decode(errors="replace")[-400:])
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(url + "/models", timeout=2).read()
                    break
                time.sleep(0.5)
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def remote(spec: WorkloadSpec, url: str) -> tuple:
    from backend.targets.remote.target import run_remote
    config = RunConfig(mode="load", workload=spec,
                       endpoint=RemoteEndpoint(url, "smollm2", None, "completions", 300.0, False, client_workers=1))
    config.sampling.ignore_eos = True
    finished = run_remote(config, lambda e: None, lambda: False)
    if finished.error:
        raise SystemExit(f"remote run failed: {finished.error}")
    return finished.summary, finished.data


def multiturn(args) -> list[str]:
    spec, turns = chat(), 6
    sides = {"ours, prefix caching on": dict(kv_layout="paged", prefix_caching=True),
             "ours, prefix caching off": dict(kv_layout="paged", prefix_caching=False)}
    if args.llama_server:
        sides.update({"llama.cpp server, --cache true": True, "llama.cpp server, --cache false": False})
    kept: dict[str, list[list[float]]] = {n: [] for n in sides}
    hits: dict[str, list[tuple]] = {n: [] for n in sides}
    for rnd, order in alternating(args.rounds, list(sides), warmup=0):
        for name in order:
            log(f"multiturn round {rnd}: {name}")
            how = sides[name]
            if isinstance(how, dict):
                s, data = local(spec, args.threads, max_batch=8, **how)
            else:
                with llama_server(args.threads, how) as url:
                    s, data = remote(spec, url)
            kept[name].append(ttft_by_turn(data, turns))
            hits[name].append((s.prefix_hit_rate, s.prefix_ideal_hit_rate, s.prefix_ideal_sized_hit_rate))
    med = {n: [statistics.median(r[t] for r in kept[n]) for t in range(turns)] for n in sides}
    lines = [measured_line(f"{args.threads} threads on every side, machine shared with other jobs"), "",
             "8 users x 6 turns (closed loop, 200 ms think time), a 48-token system prompt, first messages 48-96 "
             "tokens, later ones 8-24, answers 8-16 (--ignore-eos), text prompts; SmolLM2-135M (bundled, q4_1) on "
             f"every side; mean TTFT (ms) of each turn's 8 requests, median of {args.rounds} rounds, sides alternating",
             "", "| side | " + " | ".join(f"turn {t + 1}" for t in range(turns)) + " | all turns |",
             "|---" * (turns + 2) + "|"]
    for n in sides:
        lines.append(f"| {n} | " + " | ".join(f"{v:,.0f}" for v in med[n]) + f" | {statistics.mean(med[n]):,.0f} |")
    on, off = "ours, prefix caching on", "ours, prefix caching off"
    later = [ratio_median([r[t] for r in kept[on]], [r[t] for r in kept[off]]) for t in range(1, turns)]
    rate, ideal, sized = hits[on][-1]
    lines += ["", f"Prefix caching on / off, TTFT of turns 2-6: {min(later):.2f}-{max(later):.2f}x. Hit rate with "
              f"caching on: measured {100 * rate:.1f}% of prompt tokens, theoretical {100 * ideal:.1f}% (infinite "
              f"cache), {100 * sized:.1f}% (this cache's blocks)."]
    if not args.llama_server:
        lines.append("llama.cpp's server was not run (--llama-server not given).")
    else:
        lines.append("llama-cpp-python's server runs one request at a time and keeps the last prompt's KV; "
                     "--cache true adds its RAM cache of earlier prompts' states (it has no "
                     "cache_prompt request field: that is the C++ llama-server's, which this machine does not have). "
                     "Its TTFT includes queueing behind "
                     "the 7 other users.")
    return lines


# --- mooncake ------------------------------------------------------------------------------------

def simulate(trace: Path, requests: int | None, kv_tokens: int | None) -> object:
    from backend.cli.main import main as cli
    from backend.results.export import read_run
    with tempfile.TemporaryDirectory() as tmp:
        flags = ["load", "--simulate", "--profile", "h100-sxm", "--model", "llama-8b", "--trace", str(trace),
                 "--max-batch", "32", "--out", f"{tmp}/run"]
        flags += ["--requests", str(requests)] if requests else []
        flags += ["--kv-tokens", str(kv_tokens)] if kv_tokens else []
        with contextlib.redirect_stdout(open(os.devnull, "w")):
            if cli(flags) != 0:
                raise SystemExit(f"simulated replay of {trace.name} failed")
        return read_run(Path(tmp) / "run").summary


def mooncake(args) -> list[str]:
    from bench.make_mooncake import rows
    import json
    lines = [measured_line(), "",
             "Simulated (h100-sxm pricing llama-8b, 16-token blocks, up to 32 requests at once, arrivals at the "
             "trace's times), both traces: their prompts of about 4,000 tokens would take several seconds of "
             "prefill each in the local engine here (512 tokens take about 0.9 s), over 10 minutes for the sample "
             "and hours for the long one. Theoretical: the same prompts replayed one at a time through an infinite "
             "cache, and through "
             "an LRU pool of the run's blocks.", "",
             "| trace | rows | KV budget | pool blocks | measured hit rate | theoretical, this pool | "
             "theoretical, infinite | evictions |", "|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        long = Path(tmp) / "mooncake-long.jsonl"
        long.write_text("".join(json.dumps(r) + "\n" for r in rows(args.rows, 7)), encoding="utf-8")
        for name, trace, n in ((SAMPLE.name, SAMPLE, 50), (f"make_mooncake --rows {args.rows}", long, args.rows)):
            for kv in (400_000, 100_000, 25_000):
                log(f"mooncake {name} kv {kv}")
                s = simulate(trace, n, kv)
                lines.append(f"| {name} | {n} | {kv:,} tokens | "
                             f"{s.prefix_ideal_num_blocks:,} | {100 * s.prefix_hit_rate:.1f}% | "
                             f"{100 * s.prefix_ideal_sized_hit_rate:.1f}% | {100 * s.prefix_ideal_hit_rate:.1f}% | "
                             f"{s.num_evictions:,} |")
    if args.local:
        log(f"mooncake {SAMPLE.name}: the first {args.local} rows on the local engine")
        s = replay_locally(SAMPLE, args.local, args.threads)
        lines += ["", f"The local engine on the sample's first {args.local} rows (SmolLM2-135M, bundled, {args.threads} "
                  f"threads; prompts cut to its 8,192-token context, those then too long for a sequence rejected and "
                  f"left out of both rates; up to 4 requests at once, arrivals at the trace's times): measured "
                  f"{100 * s.prefix_hit_rate:.1f}%, theoretical {100 * s.prefix_ideal_sized_hit_rate:.1f}% for its "
                  f"{s.prefix_ideal_num_blocks:,} blocks, {100 * s.prefix_ideal_hit_rate:.1f}% infinite; "
                  f"{s.num_rejected or 0} rejected."]
    return lines


def replay_locally(trace: Path, requests: int, threads: int):
    from backend.cli.main import main as cli
    from backend.results.export import read_run
    with tempfile.TemporaryDirectory() as tmp:
        flags = ["load", "--trace", str(trace), "--requests", str(requests), "--max-batch", "4",
                 "--threads", str(threads), "--out", f"{tmp}/run"]
        with contextlib.redirect_stdout(open(os.devnull, "w")):
            if cli(flags) != 0:
                raise SystemExit(f"local replay of {trace.name} failed")
        return read_run(Path(tmp) / "run").summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", choices=("capacity", "multiturn", "mooncake"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=THREADS)
    parser.add_argument("--requests", type=int, default=32, help="capacity: requests in the burst")
    parser.add_argument("--kv-tokens", type=int, default=1536, help="capacity: the KV budget in tokens")
    parser.add_argument("--llama-server", action="store_true", help="multiturn: also llama-cpp-python's server")
    parser.add_argument("--rows", type=int, default=1000, help="mooncake: rows of the generated trace")
    parser.add_argument("--local", type=int, default=0, metavar="N",
                        help="mooncake: also the shipped sample's first N rows on the local engine")
    add_readme_flag(parser)
    args = parser.parse_args()
    if args.which == "capacity":
        return publish("kv_cache_capacity", capacity(args), args.readme)
    if args.which == "multiturn":
        return publish("kv_cache_multiturn", multiturn(args), args.readme)
    return publish("kv_cache_mooncake", mooncake(args), args.readme)


if __name__ == "__main__":
    raise SystemExit(main())
