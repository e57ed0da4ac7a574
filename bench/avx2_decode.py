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
With --before, a second table times the layer products alone, one process holding both builds
(two libraries): a batch-1 product of every layer matrix of SmolLM2-135M's shapes (random
weights in each format; the K-quants only where a row is whole super-blocks, the down matrices),
one build then the other, 40 times alternating: finer-grained interleaving than whole processes,
for a machine whose load moves.
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


KINDS = {"q8_0": 1, "q4_0": 2, "q4_1": 3, "q5_0": 4, "q5_1": 5, "q4_k": 6, "q5_k": 7, "q6_k": 8}
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]   # qkv, o, gate_up, down: (out, in)
LAYERS = 30


def products(libraries: dict[str, str], fmts: list[str], repeats: int = 40) -> list[str]:
    """Table rows: each format's batch-1 products of every layer matrix, each library's median and the speed-up."""
    import ctypes

    import torch
    from backend.kernels import ops
    libs = {name: ctypes.CDLL(path) for name, path in libraries.items()}
    torch.manual_seed(0)
    xs = {i: torch.randn(1, i) for i in (576, 1536)}
    ys = {o: torch.empty(1, o) for o in (960, 576, 3072)}
    rows = []
    for fmt in fmts:
        mats = [(ops.quant_pack(ops.quantize_rows(torch.randn(o, i) * 0.05, fmt), fmt, i), o, i)
                for _ in range(LAYERS) for o, i in SHAPES if i % (256 if fmt.endswith("_k") else 32) == 0]
        weights = sum(o * i for _, o, i in mats)

        def step(lib) -> float:
            start = time.perf_counter()
            for p, o, i in mats:
                lib.psk_qlinear(KINDS[fmt], ctypes.c_void_p(p.data_ptr()), ctypes.c_void_p(xs[i].data_ptr()), None,
                                None, ctypes.c_void_p(ys[o].data_ptr()), ctypes.c_int64(1), ctypes.c_int64(o),
                                ctypes.c_int64(i))
            return time.perf_counter() - start
        times: dict[str, list[float]] = {name: [] for name in libs}
        for rnd in range(-1, repeats):
            for name in in_order(rnd, list(libs)):
                t = step(libs[name])
                if rnd >= 0:
                    times[name].append(t)
        before, after = times["before"], times["after"]
        rows.append(f"| {fmt} | {len(mats)} | {statistics.median(before) * 1000:.1f} ms | "
                    f"{statistics.median(after) * 1000:.1f} ms | {weights / statistics.median(after) / 1e9:.1f} | "
                    f"{ratio_median(before, after):.2f}x |")
    return rows


def library(tree: Path, arch: str) -> str:
    """The path of `tree`'s kernels built with `arch` (built now if not cached)."""
    env = {**os.environ, "PHASESCOPE_KERNELS_ARCH": arch, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", "from backend import kernels; print(kernels.build())"], cwd=tree,
                          env=env, capture_output=True, text=True, timeout=900, check=True)
    return done.stdout.strip().splitlines()[-1]


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
    parser.add_argument("--formats", default=",".join(KINDS), help="the formats of the products' table")
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
    if args.before:
        libraries = {name: library(tree, args.arch) for name, tree in sides}
        lines += ["", f"The layer products alone (batch 1, SmolLM2-135M's {LAYERS} layers' shapes, random weights), "
                  "medians of 40 alternating runs in one process", "",
                  "| format | products | before | after | after, G weights/s | speed-up |", "|---|---|---|---|---|---|"]
        lines += products(libraries, args.formats.split(","))
    return publish("avx2_decode", lines, args.readme)


if __name__ == "__main__":
    raise SystemExit(main())
