"""Batch-1 decode with float32 and with int8 decode products (--decode-math), against the weight-read floor.

    python -m bench.int8_decode [--rounds 3] [--dtypes q8_0,q4_0,q4_1] [--arches native,-march=x86-64-v3] [--threads 1] [--readme]

For each build of the kernels (--arches: "native" is -march=native, anything else is
PHASESCOPE_KERNELS_ARCH, -march=x86-64-v3 the AVX2 paths on any x86-64 CPU that has them), a child
process loads the bundled model at each dtype, prefills 128 tokens and times 40 decode steps of
one token, float32 and int8 alternating step by step (so that load which drifts hits both), and
probes the read bandwidth (backend.roofline.calibrate) beside them: the floor is the weight bytes
a step reads over that bandwidth. Figures are medians over steps and rounds; the int8/fp32 ratio
is the median of the step-by-step ratios. A second table times the layer products alone (no
Python per layer, no attention or norms), passes of the two modes alternating.
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

from bench.common import add_readme_flag, in_order, measured_line, publish  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CACHED = 128
STEPS = 40


def child(dtypes: list[str], threads: int) -> int:
    """Prints {dtype: {isa, fp32: [s], int8: [s], floor: s}} as one JSON line."""
    import torch
    torch.set_num_threads(threads)   # the kernels' pool follows torch's count
    from backend import kernels
    from backend.kernels import decodemath, matmath
    from backend.loaders.weights import BUNDLED, load_model
    from backend.models import KVCache, make_step_batch
    from backend.roofline.calibrate import read_bandwidth
    out = {}
    for dtype in dtypes:
        loaded = load_model(BUNDLED, "cpu", dtype)
        model, shape = loaded.model, loaded.shape
        times: dict[str, list[float]] = {"fp32": [], "int8": []}
        with torch.inference_mode():
            cache = KVCache(shape, 1, CACHED + 2 * STEPS + 2, "cpu", torch.float32)
            prompt = [(i * 7919) % shape.vocab_size for i in range(CACHED)]
            model(make_step_batch([(0, 0, prompt)], [], "cpu"), cache)
            for i in range(2 * STEPS + 2):
                mode = ("fp32", "int8")[i % 2]
                with matmath.using(matmath.MatMath(decode=mode)):
                    start = time.perf_counter()
                    model(make_step_batch([], [(0, CACHED + i, 5)], "cpu"), cache).argmax(-1).tolist()
                    times[mode].append(time.perf_counter() - start)
        bandwidth = read_bandwidth(torch, torch.device("cpu"), 256, 0.5, lambda: None)
        products, product_bytes = layer_products(dtype)
        out[dtype] = {"isa": kernels.isa()[0], "int8_unit": decodemath.unit(), "fp32": times["fp32"][1:],
                      "int8": times["int8"][1:], "floor": loaded.weight_bytes / bandwidth,
                      "products_fp32": products["fp32"], "products_int8": products["int8"],
                      "products_floor": product_bytes / bandwidth}
    print(json.dumps(out))
    return 0


SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]   # SmolLM2-135M's qkv, o, gate_up, down: (out, in)
LAYERS = 30


def layer_products(fmt: str, passes: int = 20) -> tuple[dict[str, list[float]], int]:
    """Seconds of one pass of batch-1 products over 30 layers' matrices (random weights in `fmt`),
    float32 and int8 passes alternating; and the bytes one pass reads."""
    import torch
    from backend.kernels import matmath, ops
    g = torch.Generator().manual_seed(0)
    block = 256 if fmt.endswith("_k") else 32   # the K-quants: the down matrices only (576 is not 256s)
    mats = [(ops.quant_pack(ops.quantize_rows(torch.randn(o, i, generator=g), fmt), fmt, i), o, i)
            for _ in range(LAYERS) for o, i in SHAPES if i % block == 0]
    xs = {i: torch.randn(1, i, generator=g) for _, i in SHAPES}
    times: dict[str, list[float]] = {"fp32": [], "int8": []}
    for p in range(2 * passes + 2):
        mode = ("fp32", "int8")[p % 2]
        with matmath.using(matmath.MatMath(decode=mode)):
            start = time.perf_counter()
            for packed, o, i in mats:
                ops.qlinear(xs[i], packed, fmt, o)
            times[mode].append(time.perf_counter() - start)
    return {m: t[1:] for m, t in times.items()}, sum(packed.numel() for packed, _, _ in mats)


def run_child(arch: str, dtypes: list[str], threads: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PHASESCOPE_KERNELS_ARCH", None)
    if arch != "native":
        env["PHASESCOPE_KERNELS_ARCH"] = arch
    done = subprocess.run([sys.executable, "-m", "bench.int8_decode", "--child", ",".join(dtypes), "--threads", str(threads)], env=env,
                          cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def cells(figs: list[dict], prefix: str) -> str:
    """A table row's figures from the rounds' (`prefix`: "" for whole decode steps, "products_" for the
    layer products alone): float32 and int8 medians, their median ratio, the floor and both against it."""
    fp32 = statistics.median(t for f in figs for t in f[prefix + "fp32"])
    int8 = statistics.median(t for f in figs for t in f[prefix + "int8"])
    ratio = statistics.median(b / a for f in figs for a, b in zip(f[prefix + "fp32"], f[prefix + "int8"]))
    floor = statistics.median(f[prefix + "floor"] for f in figs)
    return (f"{fp32 * 1e3:.2f} | {int8 * 1e3:.2f} | {ratio:.2f}x | {floor * 1e3:.2f} | {fp32 / floor:.2f}x | "
            f"{int8 / floor:.2f}x |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtypes", default="q8_0,q4_0,q4_1")
    parser.add_argument("--arches", default="native,-march=x86-64-v3")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    add_readme_flag(parser)
    args = parser.parse_args()
    if args.child:
        return child(args.child.split(","), args.threads)
    dtypes, arches = args.dtypes.split(","), args.arches.split(",")
    got: dict = {}
    for r in range(args.rounds):
        for arch in in_order(r, arches):
            for dtype, fig in run_child(arch, dtypes, args.threads).items():
                got.setdefault((arch, dtype), []).append(fig)
                print(arch, dtype, round(statistics.median(fig["fp32"]) * 1e3, 2),
                      round(statistics.median(fig["int8"]) * 1e3, 2), round(fig["floor"] * 1e3, 2), file=sys.stderr)
    rows, product_rows = [], []
    for (arch, dtype), figs in got.items():
        label = f"{arch} ({figs[0]['isa']}; {figs[0]['int8_unit']})"
        rows.append(f"| {label} | {dtype} | " + cells(figs, ""))
        product_rows.append(f"| {arch} | {dtype} | " + cells(figs, "products_"))
    lines = [measured_line(f"{args.threads} thread(s)"), "",
             f"Batch-1 decode of the bundled model, 128 tokens cached, medians of {args.rounds} "
             f"rounds x {STEPS} steps, float32 and int8 decode products alternating step by step. The machine was "
             "shared with other jobs: absolute times are inflated and noisy, read the ratios (measured side by "
             "side). The floor: the weight bytes a step reads over the read bandwidth probed in the same process.",
             "", "| build (vector path; int8 unit) | weights | fp32 step (ms) | int8 step (ms) | int8 / fp32 "
             "| floor (ms) | fp32 / floor | int8 / floor |", "|---|---|---|---|---|---|---|---|", *rows, "",
             "The layer products alone: one pass of batch-1 products over 30 layers of SmolLM2-135M's matrices "
             "(random weights in the format, 120 products; the K-quants' 30 down matrices only, as 576 is not a "
             "multiple of 256), float32 and int8 passes alternating; the floor is the pass's packed bytes over the "
             "same read bandwidth.", "",
             "| build | weights | fp32 pass (ms) | int8 pass (ms) | int8 / fp32 | floor (ms) | fp32 / floor "
             "| int8 / floor |", "|---|---|---|---|---|---|---|---|", *product_rows]
    return publish("int8_decode", lines, args.readme)


if __name__ == "__main__":
    sys.exit(main())
