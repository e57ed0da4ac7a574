"""How fast the simulator prices a workload: requests and steps priced per second of this machine's CPU.

    python -m bench.sim_speed [--requests 1000] [--repeats 3] [--against REV] [--readme]

Eight cases, each 1,000 Poisson requests (seeded) of Llama-3.1-70B (llama-3.1-8b on the 1-GPU rows):
chat-length (prompts normal 96 +- 48 tokens, outputs 16-128, 20 req/s) and 1,024/256 tokens (4 req/s),
on 1 GPU, TP 4, TP 4 x DP 2 (least-loaded) and disaggregated (1 prefill + 1 decode group of TP 4).
Each case runs in a fresh process after a warm-up run (the imports are not timed) and is timed in
CPU seconds (time.process_time: the figure least moved by other tenants of a shared machine) and
wall seconds; the table gives the median over the repeats. A fixed pure-Python probe is timed in each
process too: on a shared 2-core machine other tenants can slow even CPU seconds several-fold, and the
probe says how much.

--against REV runs the same cases on that git revision of this repository (exported with
`git archive`), interleaved with this tree's, repeat by repeat, and adds the speed-up and whether
the two trees' figures are identical (every summary figure, compared exactly).
--readme also writes the table into bench/README.md between its markers.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from bench.common import ROOT, add_readme_flag, log, measured_line, publish

CASES = [   # name, model, profile, dtype, lengths, deployment
    ("1 GPU, chat", "llama-3.1-8b", "h100-sxm", "auto", "chat", {}),
    ("1 GPU, 1024/256", "llama-3.1-8b", "h100-sxm", "auto", "long", {}),
    ("tp 4, chat", "llama-3.1-70b", "h100-sxm", "fp8", "chat", {"tp": 4}),
    ("tp 4, 1024/256", "llama-3.1-70b", "h100-sxm", "fp8", "long", {"tp": 4}),
    ("tp 4 x dp 2, chat", "llama-3.1-70b", "h100-sxm", "fp8", "chat", {"tp": 4, "dp": 2}),
    ("tp 4 x dp 2, 1024/256", "llama-3.1-70b", "h100-sxm", "fp8", "long", {"tp": 4, "dp": 2}),
    ("disaggregated, chat", "llama-3.1-70b", "h100-sxm", "fp8", "chat", {"tp": 4, "disaggregated": True}),
    ("disaggregated, 1024/256", "llama-3.1-70b", "h100-sxm", "fp8", "long", {"tp": 4, "disaggregated": True}),
]

# Runs inside a child process whose sys.path starts at the tree under test: one JSON line per case.
CHILD = r"""
import json, sys, time
from backend.config import Deployment, EngineConfig, ModelChoice, RunConfig
from backend.session import execute
from backend.workload.spec import LengthDist, WorkloadSpec

def config(model, profile, dtype, lengths, layout, requests):
    if lengths == "chat":
        prompt, output, rate = LengthDist("normal", mean=96, std=48, low=16, high=256), LengthDist("uniform", low=16, high=128), 20.0
    else:
        prompt, output, rate = LengthDist("fixed", 1024), LengthDist("fixed", 256), 4.0
    spec = WorkloadSpec(name="bench", num_requests=requests, arrival="poisson", rate=rate, prompt_len=prompt,
                        output_len=output, seed=0)
    disaggregated = layout.get("disaggregated", False)
    engine = EngineConfig(policy="disaggregated" if disaggregated else "continuous", max_batch=64,
                          prefill_workers=1, decode_workers=1)
    deployment = Deployment(tp=layout.get("tp", 1), dp=layout.get("dp", 1), router="least-loaded")
    return RunConfig(mode="load", simulate=True, profile=profile, model=ModelChoice(model, dtype=dtype), workload=spec,
                     engine=engine, deployment=deployment, slo_ttft_ms=1000.0, slo_tpot_ms=40.0)

cases, requests = json.loads(sys.argv[1]), int(sys.argv[2])
execute(config(*cases[0][1:], 2), lambda e: None, lambda: False, retain_records=False)   # warm-up: the imports
cpu = time.process_time()
sum(i * 2 for i in range(1_000_000))   # the probe: how fast this machine runs plain Python right now
print(json.dumps({"probe": time.process_time() - cpu}))
for name, *case in cases:
    run = config(*case, requests)
    cpu, wall = time.process_time(), time.perf_counter()
    finished = execute(run, lambda e: None, lambda: False, retain_records=False)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    summary = {k: repr(v) for k, v in sorted(finished.summary.to_json().items())}
    print(json.dumps({"name": name, "cpu": cpu, "wall": wall, "steps": finished.summary.num_steps,
                      "requests": finished.summary.num_finished, "summary": summary, "error": finished.error}))
"""


def run_tree(tree: Path, requests: int) -> dict[str, dict]:
    """Every case once, in a fresh process importing `tree`'s backend."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(CASES), str(requests)], cwd=tree, env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"the cases failed in {tree}:\n{out.stderr[-2000:]}")
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return {row.get("name", "probe"): row for row in rows}


def probe(runs: list[dict[str, dict]]) -> float:
    """The median probe: the machine's speed for plain Python while the cases ran (other tenants slow it)."""
    return statistics.median(run["probe"]["probe"] for run in runs)


def export(rev: str, into: Path) -> Path:
    """The repository at `rev` as plain files (git archive), to import its backend."""
    archive = into / "tree.tar"
    subprocess.run(["git", "archive", "--format=tar", "-o", str(archive), rev], cwd=ROOT, check=True)
    tree = into / "tree"
    tree.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--against", metavar="REV", help="a git revision to time beside this tree")
    add_readme_flag(parser)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, dict]]] = {"this": [], "base": []}
    with tempfile.TemporaryDirectory() as tmp:
        base = export(args.against, Path(tmp)) if args.against else None
        for r in range(args.repeats):
            log(f"repeat {r + 1} of {args.repeats}")
            runs["this"].append(run_tree(ROOT, args.requests))
            if base is not None:
                runs["base"].append(run_tree(base, args.requests))
    lines = [measured_line(), "",
             f"{args.requests} requests a case, median of {args.repeats} (CPU seconds, wall in brackets)"
             + (f"; base: {args.against}" if base is not None else "")
             + f"; the probe (a million-term generator sum) took {probe(runs['this'] + runs['base']):.3f} CPU s", ""]
    head = "| case | steps | CPU s (wall) | requests/s | steps/s |"
    rule = "|---|---|---|---|---|"
    if base is not None:
        head += " base CPU s (wall) | speed-up | same figures |"
        rule += "---|---|---|"
    lines += [head, rule]
    for name, *_ in CASES:
        this = [run[name] for run in runs["this"]]
        cpu, wall = statistics.median(r["cpu"] for r in this), statistics.median(r["wall"] for r in this)
        steps = this[0]["steps"]
        line = (f"| {name} | {steps:,} | {cpu:.2f} ({wall:.2f}) | {this[0]['requests'] / cpu:,.0f} | "
                f"{steps / cpu:,.0f} |")
        if base is not None:
            old = [run[name] for run in runs["base"]]
            old_cpu, old_wall = statistics.median(r["cpu"] for r in old), statistics.median(r["wall"] for r in old)
            same = all(r["summary"] == old[0]["summary"] for r in this + old)
            line += f" {old_cpu:.2f} ({old_wall:.2f}) | {old_cpu / cpu:.1f}x | {'yes' if same else 'NO'} |"
        lines.append(line)
    return publish("sim_speed", lines, args.readme)


if __name__ == "__main__":
    sys.exit(main())
