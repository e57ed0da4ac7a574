"""The local fit, end to end, as a user runs it: sweep, fit, then a held-out workload measured and simulated.

  1. `sweep batch` and `sweep prompt` of the bundled model (as stored: q4_1, the kernels' own matrix unit);
  2. `calibrate --fit` on those two runs, into a profile in a temporary folder (this machine's calibrated
     profile copied there first, or a fresh `calibrate`): the user's own profile is not touched;
  3. a Poisson workload the fit never saw, measured (`load`) and simulated on the fitted profile
     (`load --simulate --profile`), `--rounds` times, measured runs alternating with the sweeps' machine state;
  4. the simulated TTFT p50 and TPOT p50 against the measured medians over the rounds.

Every step is the command line's, in a child process, as the issue that asked for it measured it.
The machine's load moves the measured side (a shared machine's noise is the error's floor): run it on a
quiet one.

    python -m bench.local_fit [--rounds 5] [--sweeps 3] [--threads 2] [--keep DIR] [--readme]

Each sweep runs in several processes (--sweeps) and the held-out workload in several (--rounds): on this
project's 2-core VM a fresh process's batch-1 decode step took anywhere from 2.8 to 5.1 ms for its whole
life with nothing else running (no thread of the kernels' pool sharing a core, transparent huge pages on
or off alike), so a fit on one process's sweeps priced whatever that process happened to be.
"""
from __future__ import annotations

import argparse
import csv
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import add_readme_flag, log, measured_line, publish

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ["--arrival", "poisson", "--rate", "1.0", "--requests", "12", "--prompt-len", "64:192",
            "--output-len", "16:48", "--max-batch", "8", "--seed", "3"]


def cli(*args: str) -> None:
    """One command of main.py; its last lines shown when it fails."""
    done = subprocess.run([sys.executable, str(ROOT / "main.py"), *args], capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"main.py {' '.join(args)} failed:\n{(done.stdout + done.stderr)[-2000:]}")


def p50s(folder: Path) -> tuple[float, float]:
    """(TTFT p50, TPOT p50) in ms from a run folder's summary.csv."""
    with open(folder / "summary.csv", newline="") as f:
        rows = {r[0]: r[1] for r in csv.reader(f) if len(r) >= 2}
    return float(rows["ttft_p50_ms"]), float(rows["tpot_p50_ms"])


def steps_of(folder: Path) -> list[dict[str, str]]:
    """A run folder's steps.csv, a dict a row."""
    with open(folder / "steps.csv", newline="") as f:
        return list(csv.DictReader(f))


def step_medians(folder: Path) -> tuple[float, float, float]:
    """(median decode step ms, median prefill ms per token, share of decode steps over twice the median):
    the steps under the percentiles, and how many another process interrupted."""
    steps = steps_of(folder)
    decode = [float(s["duration_ms"]) for s in steps if s["phase"] == "decode"]
    prefill = [float(s["duration_ms"]) / int(s["num_tokens"]) for s in steps if s["phase"] == "prefill"]
    mid = statistics.median(decode)
    return mid, statistics.median(prefill), sum(d > 2 * mid for d in decode) / len(decode)


def batch_one_ms(folder: Path) -> float:
    """A batch sweep's batch-1 decode step, its median (the process's speed, seen from the sweep)."""
    one = [float(s["duration_ms"]) for s in steps_of(folder)
           if s["phase"] == "decode" and s["num_decode_requests"] == "1"]
    return statistics.median(one)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="held-out workload measurements (median taken)")
    parser.add_argument("--sweeps", type=int, default=3,
                        help="processes each sweep runs in, all fitted on (a process's speed is its own: see above)")
    parser.add_argument("--threads", default="2")
    parser.add_argument("--keep", metavar="DIR", help="keep the runs and the fitted profile here")
    add_readme_flag(parser)
    args = parser.parse_args()
    from backend.roofline.profiles import local_profile_path
    work = Path(args.keep or tempfile.mkdtemp(prefix="local-fit-"))
    work.mkdir(parents=True, exist_ok=True)
    profile = work / "fitted.toml"
    threads = ["--threads", args.threads]
    if local_profile_path().is_file():
        shutil.copy(local_profile_path(), profile)
    else:
        log("no calibrated profile here: calibrating first")
        cli("calibrate", "--out", str(profile), *threads)
    folders = []
    for i in range(args.sweeps):
        log(f"sweep batch and sweep prompt, process {i + 1} of {args.sweeps}")
        cli("sweep", "batch", "--batches", "1,2,4,8", "--context", "256", "--out", str(work / f"batch-{i}"),
            *threads)
        cli("sweep", "prompt", "--lengths", "32,64,128,256", "--out", str(work / f"prompt-{i}"), *threads)
        folders += [work / f"batch-{i}", work / f"prompt-{i}"]
    log("calibrate --fit")
    cli("calibrate", "--fit", *map(str, folders), "--out", str(profile), *threads)
    sweep_b1 = [batch_one_ms(work / f"batch-{i}") for i in range(args.sweeps)]
    cli("load", "--simulate", "--profile", str(profile), *WORKLOAD, "--out", str(work / "simulated"))
    sim_ttft, sim_tpot = p50s(work / "simulated")
    measured = []
    for i in range(args.rounds):
        log(f"held-out workload, round {i + 1} of {args.rounds}")
        cli("load", *WORKLOAD, "--ignore-eos", *threads, "--out", str(work / f"measured-{i}"))
        measured.append(p50s(work / f"measured-{i}"))
    ttft = statistics.median(m[0] for m in measured)
    tpot = statistics.median(m[1] for m in measured)
    rounds = "; ".join(f"{a:,.0f} / {b:,.1f}" for a, b in measured)
    steps = [step_medians(work / f"measured-{i}") for i in range(args.rounds)]
    sim_decode, sim_prefill, _ = step_medians(work / "simulated")
    decode = statistics.median(s[0] for s in steps)
    prefill = statistics.median(s[1] for s in steps)
    interrupted = ", ".join(f"{s[2] * 100:.0f}%" for s in steps)
    lines = [measured_line(f"{args.threads} threads"), "",
             f"Fitted on `sweep batch` (1, 2, 4, 8 at 256 tokens) and `sweep prompt` (32-256 tokens) of the bundled "
             f"model as stored, each run in {args.sweeps} processes; held out: 12 Poisson requests at 1/s, prompts "
             f"64-192, outputs 16-48, max batch 8, measured in {args.rounds} processes.", "",
             "| metric | measured p50 (median of rounds) | simulated p50 | error |",
             "|---|---|---|---|",
             f"| TTFT | {ttft:,.0f} ms | {sim_ttft:,.0f} ms | {(sim_ttft / ttft - 1) * 100:+.0f}% |",
             f"| TPOT | {tpot:,.1f} ms | {sim_tpot:,.1f} ms | {(sim_tpot / tpot - 1) * 100:+.0f}% |",
             f"| decode step (median) | {decode:,.1f} ms | {sim_decode:,.1f} ms | {(sim_decode / decode - 1) * 100:+.0f}% |",
             f"| prefill per token (median) | {prefill:,.2f} ms | {sim_prefill:,.2f} ms | "
             f"{(sim_prefill / prefill - 1) * 100:+.0f}% |",
             "", f"Measured rounds (TTFT / TPOT p50, ms): {rounds}. Decode steps over twice the median "
             f"(another process took the cores mid-step; the simulator prices none): {interrupted}. The sweeps' "
             f"batch-1 decode step, process by process: {', '.join(f'{x:.2f}' for x in sweep_b1)} ms."]
    log(f"the runs and the fitted profile: {work}")
    return publish("local_fit", lines, args.readme)


if __name__ == "__main__":
    raise SystemExit(main())
