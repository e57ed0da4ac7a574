"""`calibrate --from` end to end against the real llama.cpp server on this CPU: fit on runs at three
loads, predict two held-out loads' TTFT p50 and TPOT p50 with `load --simulate` on the fitted profile.

The server is llama-cpp-python's (`python -m llama_cpp.server`, the bundled GGUF as stored, one thread,
requests queued one at a time: `--max-batch 1`). One thread means for prefill too: the server's
`--n_threads_batch` is set to `--n_threads`, since its default is every CPU (2 here) while `--n_threads`
only covers decode. With two prefill threads that meet at a barrier after every op, a neighbour on the
other core stalls each barrier: on this shared 2-core machine prefill ran 1.5-5x slower and erratic
(a 4.5 s TTFT for a 65-token prompt), and the decode steps around it slowed too, by how busy the server
and its neighbours happened to be, which the fit then read as a load effect. One thread needs one core.

Every step is the command line's, in a child process:

  1. `load --endpoint URL` at each rate (Poisson, the same lengths), the fit's and the held-out ones
     alternating, in `--rounds` rounds (2), every other one backwards: 0.25, 0.5, 1, 1.5, 2, then 2,
     1.5, 1, 0.5, 0.25/s. The machine's speed drifts with its neighbours over a minute or so; run once
     in ascending order, the low loads met one weather and the high loads another, and the fit read the
     difference as the load's (a decode step 12.8 ms at 0.25/s and 8.9 ms at 1/s in one run, 9.2 and
     12.7 ms the other way round in another, flat in a third; in two rounds, 13.0 ms at 0.25/s in the
     first and 9.2 in the second). A client of its own, alternating idle, back-to-back and queued
     requests on one server, found no difference between them; back-to-back requests for two minutes
     found 8.3-8.7 ms while the rest of the machine kept 1.0 CPU busy and 13-15.6 ms while it kept 1.3;
  2. `calibrate --from` the fit's runs (every round's), `--profile cpu --model smollm2-135m --dtype q4_1`;
  3. `load --simulate --profile fitted.toml` for each held-out run, with its seed; a held-out rate's
     TTFT p50 and TPOT p50 are taken over its rounds' requests together, measured and simulated alike.

Each run's line says how many CPUs the rest of the machine kept busy meanwhile (bench/others_cpu.py).

    python -m bench.server_fit [--threads 1] [--rounds 2] [--keep DIR] [--readme]
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.common import add_readme_flag, log, measured_line, publish
from bench.others_cpu import others_cores, snapshot

ROOT = Path(__file__).resolve().parent.parent
FIT_RATES = (0.25, 1.0, 2.0)
HELD_RATES = (0.5, 1.5)
LENGTHS = ["--prompt-len", "48:160", "--output-len", "12:32", "--requests", "14"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def llama_server(threads: int, log_path: Path):
    """llama-cpp-python's server on the bundled GGUF, on loopback; its URL and pid, killed after."""
    from backend.loaders.catalog import bundled_gguf
    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(bundled_gguf()), "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", "2048", "--n_threads", str(threads), "--n_threads_batch", str(threads),
           "--verbose", "false", "--interrupt_requests", "false"]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}/v1"
            for _ in range(240):
                if proc.poll() is not None:
                    raise SystemExit(f"the server exited: {log_path.read_text()[-1000:]}")
                try:
                    urllib.request.urlopen(f"{url}/models", timeout=2).read()
                    break
                except OSError:
                    time.sleep(0.5)
            yield url, proc.pid
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def cli(*args: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "main.py"), *args], capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"main.py {' '.join(args)} failed:\n{(done.stdout + done.stderr)[-2000:]}")
    return done.stdout


def workload(rate: float, seed: int) -> list[str]:
    return ["--arrival", "poisson", "--rate", str(rate), "--seed", str(seed), *LENGTHS]


def quiet_line(others: dict[float, float | None]) -> list[str]:
    """How busy the rest of the machine was during each measured run: the figures' weather."""
    known = {rate: cores for rate, cores in others.items() if cores is not None}
    if not known:
        return []
    each = ", ".join(f"{cores:.2f} at {rate}/s" for rate, cores in sorted(known.items()))
    return ["", f"Other processes kept CPUs busy while the runs were measured, on average: {each}."]


def schedule(rounds: int) -> list[tuple[float, int]]:
    """(rate, round) in measuring order: the fit's and the held-out rates alternating, every other round
    backwards, so that the machine's weather over the runs falls alike on the low and the high loads."""
    one = [x for pair in zip(FIT_RATES, (*HELD_RATES, None)) for x in pair if x is not None]
    return [(rate, r) for r in range(rounds) for rate in (one if r % 2 == 0 else one[::-1])]


def pooled_p50s(folders: list[Path]) -> tuple[float, float]:
    """TTFT p50 and TPOT p50 over the finished requests of several runs together (each run's own
    summary takes the same medians over its own requests)."""
    ttfts: list[float] = []
    tpots: list[float] = []
    for folder in folders:
        with open(folder / "requests.csv", newline="") as f:
            for row in csv.DictReader(f):
                if row["status"] == "finished" and row["ttft_ms"]:
                    ttfts.append(float(row["ttft_ms"]))
                    if row["tpot_ms"]:
                        tpots.append(float(row["tpot_ms"]))
    return statistics.median(ttfts), statistics.median(tpots)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="the server's threads")
    parser.add_argument("--rounds", type=int, default=2, help="runs per rate, every other round backwards")
    parser.add_argument("--keep", metavar="DIR", help="keep the runs and the fitted profile here")
    add_readme_flag(parser)
    args = parser.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="server-fit-"))
    work.mkdir(parents=True, exist_ok=True)
    order = schedule(max(1, args.rounds))
    seed = {run: 10 + i for i, run in enumerate(order)}
    name = {run: f"rate-{run[0]}-{run[1]}" for run in order}
    others: dict[float, list[float]] = {}
    with llama_server(args.threads, work / "server.log") as (url, pid):
        cli("load", "--endpoint", url, "--served-model", "smollm2", *workload(1.0, 99), "--requests", "2", "--ignore-eos",
            "--out", str(work / "warmup"))
        for run in order:
            log(f"measuring at {run[0]}/s against the server (round {run[1] + 1})")
            before = snapshot(pid)
            cli("load", "--endpoint", url, "--served-model", "smollm2", *workload(run[0], seed[run]), "--ignore-eos",
                "--out", str(work / name[run]))
            cores = others_cores(before, snapshot(pid))
            if cores is not None:
                others.setdefault(run[0], []).append(cores)
                log(f"the rest of the machine kept {cores:.2f} CPUs busy meanwhile")
    profile = work / "fitted.toml"
    fit_out = cli("calibrate", "--from", *(str(work / name[run]) for run in order if run[0] in FIT_RATES),
                  "--profile", "cpu", "--model", "smollm2-135m", "--dtype", "q4_1", "--max-batch", "1", "--out", str(profile))
    print(fit_out)
    rows = ["| held-out rate | TTFT p50 measured | simulated | error | TPOT p50 measured | simulated | error |",
            "|---|---|---|---|---|---|---|"]
    for rate in HELD_RATES:
        runs = [run for run in order if run[0] == rate]
        for run in runs:
            cli("load", "--simulate", "--profile", str(profile), "--model", "smollm2-135m", "--max-batch", "1",
                *workload(rate, seed[run]), "--out", str(work / f"sim-{name[run]}"))
        (mt, mp) = pooled_p50s([work / name[run] for run in runs])
        (st, sp) = pooled_p50s([work / f"sim-{name[run]}" for run in runs])
        rows.append(f"| {rate}/s | {mt:,.0f} ms | {st:,.0f} ms | {(st / mt - 1) * 100:+.0f}% | {mp:,.1f} ms | "
                    f"{sp:,.1f} ms | {(sp / mp - 1) * 100:+.0f}% |")
    band = next((line for line in fit_out.splitlines() if line.startswith("band ")), "")
    rounds = f"{len(order) // len(FIT_RATES + HELD_RATES)} rounds of" if len(order) > 5 else "one round of"
    lines = [measured_line(f"llama-cpp-python server, {args.threads} thread(s) for decode and prefill"), "",
             f"Fitted with `calibrate --from` on remote runs at {', '.join(f'{r}/s' for r in FIT_RATES)} (Poisson, "
             f"{rounds} 14 requests at each rate, every other round backwards, prompts 48-160, outputs 12-32); "
             "predicted with `load --simulate` on the fitted profile, each held-out rate's rounds pooled.",
             "", *rows, "", f"The fit's own {band}." if band else "",
             *quiet_line({rate: statistics.fmean(v) for rate, v in others.items()})]
    log(f"the runs and the fitted profile: {work}")
    return publish("server_fit", lines, args.readme)


if __name__ == "__main__":
    raise SystemExit(main())
