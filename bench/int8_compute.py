"""Compute rate of the batch-1 quantized products, float32 and int8 routes, weights held in L2, one thread.

    python -m bench.int8_compute [--formats q8_0,...] [--runs 300] [--read-gbs 15.8] [--arch FLAGS] [--readme]

Why a second measure beside bench.int8_decode: on a machine shared with other jobs the read
bandwidth and whole decode steps move with the others' load (the probe reads 4-30 GB/s from one
run to the next), so "time over the weight-read floor" says more about the neighbours than the
kernels. Here one product (576 x 1536, a SmolLM2 down matrix, about 0.5-1.6 MB: in L2) runs
on one thread, float32 and int8 routes alternating, and the fastest of --runs each is taken:
load only ever adds time, so the minimum is the kernel's own rate. A route can only stream
weights at the read floor if it computes at least as fast as one core's share of the read
bandwidth (--read-gbs: half of 31.6 GB/s, what calibrate's probe gave on a quiet moment of this
2-core machine) delivers them: the table gives each route's time over that, under 1 meaning
compute keeps up with the reads (in a real decode, with some margin: reads and arithmetic
overlap imperfectly). The kernels are those of PHASESCOPE_KERNELS_ARCH (--arch sets it for a child).
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from bench.common import ROOT, add_readme_flag, measured_line, publish  # noqa: E402

FORMATS = "q8_0,q4_0,q4_1,q5_0,q5_1,q4_k,q5_k,q6_k"
OUT, IN = 576, 1536


def child(formats: list[str], runs: int) -> int:
    """Prints {fmt: [isa, bytes per weight, fp32 s, int8 s]} as one JSON line."""
    import torch
    torch.set_num_threads(1)   # the kernels' pool follows torch's count
    from backend import kernels
    from backend.kernels import matmath, ops
    from backend.precision import precision
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, IN, generator=g)
    out = {}
    for fmt in formats:
        packed = ops.quant_pack(ops.quantize_rows(torch.randn(OUT, IN, generator=g), fmt), fmt, IN)
        best = {"fp32": float("inf"), "int8": float("inf")}
        for r in range(2 * runs):
            mode = ("fp32", "int8")[r % 2]
            with matmath.using(matmath.MatMath(decode=mode)):
                start = time.perf_counter()
                ops.qlinear(x, packed, fmt, OUT)
                best[mode] = min(best[mode], time.perf_counter() - start)
        p = precision(fmt)
        out[fmt] = [kernels.isa()[0], p.block_bytes / p.block, best["fp32"], best["int8"]]
    print(json.dumps(out))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--formats", default=FORMATS)
    parser.add_argument("--runs", type=int, default=300, help="runs of each route (the fastest is taken)")
    parser.add_argument("--read-gbs", type=float, default=15.8, help="one core's share of the read bandwidth, GB/s")
    parser.add_argument("--arch", default="-march=x86-64-v3", help="PHASESCOPE_KERNELS_ARCH of the child")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    add_readme_flag(parser)
    args = parser.parse_args()
    if args.child:
        return child(args.child.split(","), args.runs)
    env = {**os.environ, "PHASESCOPE_KERNELS_ARCH": args.arch, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "bench.int8_compute", "--child", args.formats, "--runs", str(args.runs)],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    isa = next(iter(got.values()))[0]
    lines = [measured_line(f"kernels built with {args.arch} (the {isa} paths), 1 thread; the machine shared with "
                           "other jobs, hence the fastest of each route's runs"), "",
             f"One batch-1 product of a {OUT} x {IN} matrix held in L2, the fastest of {args.runs} runs of each route "
             f"(alternating). Needed: the weights a second one core must multiply to keep up with {args.read_gbs} GB/s "
             "of reads; over 1, the route cannot reach the weight-read floor.", "",
             "| format | bytes / weight | needed (G weights/s) | fp32 (G weights/s) | fp32, time over needed "
             "| int8 (G weights/s) | int8, time over needed |", "|---|---|---|---|---|---|---|"]
    for fmt, (_, bpw, fp32, int8) in got.items():
        need = args.read_gbs / bpw
        rf, ri = OUT * IN / fp32 / 1e9, OUT * IN / int8 / 1e9
        lines.append(f"| {fmt} | {bpw:.3f} | {need:.1f} | {rf:.1f} | {need / rf:.2f}x | {ri:.1f} | {need / ri:.2f}x |")
    return publish("int8_compute", lines, args.readme)


if __name__ == "__main__":
    raise SystemExit(main())
