"""Why batch-1 decode stays above the weight-read floor on the CPU: the matrix-vector kernels.

    .venv/bin/python bench/gemv.py [--rounds 3]

A batch-1 decode step is 121 matrix-vector products over SmolLM2-135M's layer matrices
(478 MB in fp32) plus the LM head. This streams the same matrices (random values, the model's
shapes) through each kernel torch offers and prints the bytes per second each reaches, beside
what a plain read (sum) and a copy reach on the same memory, with 1 and 2 threads, round after
round so that noise from other work shows as spread. A kernel at the read speed would put the
step on the floor; the gap is the kernels'.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

LAYERS = 30
SHAPES = [(1728, 576), (576, 576), (3072, 576), (576, 1536)]   # qkv, o, gate_up, down: (out, in)


def seconds(fn, repeats: int = 9) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    weights = [torch.randn(*shape) for _ in range(LAYERS) for shape in SHAPES]
    transposed = [w.t().contiguous() for w in weights]            # (in, out): MKL's better layout for one row
    packed = [torch.ops.mkldnn._reorder_linear_weight(w, 32) for w in weights]
    nbytes = sum(w.numel() * w.element_size() for w in weights)
    rows = {576: torch.randn(1, 576), 1536: torch.randn(1, 1536)}
    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    kernels = {
        "F.linear (MKL, what transformers runs)": lambda: [F.linear(rows[w.shape[1]], w) for w in weights],
        "x @ W.T stored (in, out) (MKL)": lambda: [rows[w.shape[0]] @ w for w in transposed],
        "oneDNN packed (ours)": lambda: [torch.ops.mkldnn._linear_pointwise(rows[w.shape[1]], p, None, "none", [], "")
                                         for w, p in zip(weights, packed)],
        "read: sum": lambda: src.sum(),
        "copy (read + write, as calibrate)": lambda: dst.copy_(src),
    }
    results: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.rounds):
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for name, fn in kernels.items():
                moved = 2 * nbytes if name.startswith("copy") else nbytes
                results.setdefault((name, threads), []).append(moved / seconds(fn) / 1e9)
    print(f"{nbytes / 1e6:.0f} MB of fp32 matrices, {args.rounds} rounds; GB/s as median (min-max)\n")
    print("| kernel | 1 thread | 2 threads |\n|---|---|---|")
    for name in kernels:
        cells = [f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})" for v in (results[(name, 1)], results[(name, 2)])]
        print(f"| {name} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
