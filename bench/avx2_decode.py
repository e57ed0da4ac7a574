"""Batch-1 decode of the bundled model with the C kernels built for AVX2 without AVX-512, before and after a change.

    python -m bench.avx2_decode [--rounds 3] [--before DIR] [--dtypes q8_0,q4_0,q4_1] [--arch FLAGS] [--readme]

The kernels choose their vector paths at compile time, so a build for -march=x86-64-v3 (the
default --arch: AVX2, FMA, F16C) runs the AVX2 paths on any x86-64 CPU that has them, an
AVX-512 one included. Each side runs in its own child process (one build of the kernels each,
kept in the cache side by side: the cache key holds the sources and the flags): this checkout,
and with --before a copy of the sources before the change (e.g. `git archive HEAD~1 | tar -x -C
DIR`). Each round runs every side once, the order alternating by round, after a warm-up run of
each (the build, first-call costs); a child loads the bundled model at each dtype, prefills
128 tokens and times 16 decode steps of one token (the median step). Figures are medians over
rounds, ratios medians of the round-by-round ratios, so load that drifts hits both sides.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from bench.common import add_readme_flag, in_order, measured_line, publish, ratio_median  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CACHED = 128
STEPS = 16


def child(dtypes: list[str]) -> int:
    """Prints {dtype: [isa, median decode step in seconds]} as one JSON line."""
    import torch
    from backend import kernels
    from backend.loaders.weights import BUNDLED, load_model
    from backend.models import KVCache, make_step_batch
    out = {}
    for dtype in dtypes:
        loaded = load_model(BUNDLED, "cpu", dtype)
        model, shape = loaded.model, loaded.shape
        with torch.inference_mode():
            cache = KVCache(shape, 1, CACHED + STEPS + 1, "cpu", torch.float32)
            prompt = [(i * 7919) % shape.vocab_size for i in range(CACHED)]
            model(make_step_batch([(0, 0, prompt)], [], "cpu"), cache)
            steps = []
            for i in range(STEPS):
                start = time.perf_counter()
                model(make_step_batch([], [(0, CACHED + i, 5)], "cpu"), cache).argmax(-1).tolist()
                steps.append(time.perf_counter() - start)
        out[dtype] = [kernels.isa()[0], statistics.median(steps[1:])]
    print(json.dumps(out))
    return 0


def run_side(tree: Path, arch: str, dtypes: list[str]) -> dict[str, list]:
    env = {**os.environ, "PHASESCOPE_KERNELS_ARCH": arch, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-m", "bench.avx2_decode", "--child", ",".join(dtypes)], cwd=tree,
                          env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, help="a copy of the sources before the change, to run beside these")
    parser.add_argument("--dtypes", default="q8_0,q4_0,q4_1")
    parser.add_argument("--arch", default="-march=x86-64-v3", help="PHASESCOPE_KERNELS_ARCH of both sides")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    add_readme_flag(parser)
    args = parser.parse_args()
    if args.child:
        return child(args.child.split(","))
    dtypes = args.dtypes.split(",")
    sides = [("after", ROOT)] + ([("before", args.before.resolve())] if args.before else [])
    for _, tree in sides:   # warm-up: builds the kernels for each side's sources
        run_side(tree, args.arch, dtypes)
    runs: dict[str, list[dict]] = {name: [] for name, _ in sides}
    for rnd in range(args.rounds):
        for name, tree in in_order(rnd, sides):
            runs[name].append(run_side(tree, args.arch, dtypes))
            print(f"round {rnd} {name}: {runs[name][-1]}", file=sys.stderr, flush=True)
    isa = runs["after"][0][dtypes[0]][0]
    lines = [measured_line(f"kernels built with {args.arch} (the {isa} paths)"), "",
             f"Bundled SmolLM2-135M, batch-1 decode step with {CACHED} tokens cached (median of {STEPS - 1} steps), "
             f"medians of {args.rounds} interleaved rounds", ""]
    if args.before:
        lines += ["| dtype | before | after | speed-up |", "|---|---|---|---|"]
        for d in dtypes:
            before = [r[d][1] for r in runs["before"]]
            after = [r[d][1] for r in runs["after"]]
            lines.append(f"| {d} | {statistics.median(before) * 1000:.1f} ms | {statistics.median(after) * 1000:.1f} ms "
                         f"| {ratio_median(before, after):.2f}x |")
    else:
        lines += ["| dtype | decode step |", "|---|---|"]
        lines += [f"| {d} | {statistics.median(r[d][1] for r in runs['after']) * 1000:.1f} ms |" for d in dtypes]
    return publish("avx2_decode", lines, args.readme)


if __name__ == "__main__":
    raise SystemExit(main())
