"""The CPU's matrix-product kernels on SmolLM2-135M's layer matrices: torch's and ours.

    python -m bench.gemv [--rounds 3] [--readme]

A batch-1 decode step is 121 matrix-vector products over SmolLM2-135M's layer matrices
(425 MB in fp32) plus the LM head. This streams the same matrices (random values, the model's
shapes) through each kernel and prints the bytes per second each reaches, beside what a plain
read and a copy reach on the same amount of memory, with 1 and 2 threads, round after round so
that noise from other work shows as spread. A kernel at the read speed puts the step on the
floor. A second table gives the FLOP/s of the same kernels at 8, 32 and 512 rows (a decode
batch, a large one, a prefill), 2 threads.

The kernels: MKL behind F.linear (what transformers runs), MKL on the matrix stored (in, out),
oneDNN's packed layout (this project's fallback, and its kernel before backend/kernels), and
this project's C kernel on its panel layout (backend/kernels/linear.c).
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from backend import kernels  # noqa: E402
from backend.kernels import ops  # noqa: E402
from backend.models.packed import Panels  # noqa: E402
from bench.common import add_readme_flag, measured_line, publish  # noqa: E402

LAYERS = 30
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]   # qkv (9 + 2 x 3 heads of 64), o, gate_up, down: (out, in)
BATCHES = (8, 32, 512)


def seconds(fn, repeats: int = 9) -> float:
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def products(weights, transposed, onednn, panels, rows) -> dict:
    """Each kernel over every matrix, for the input rows in `rows` ({in_features: (n, in)})."""
    kinds = {
        "F.linear (MKL, what transformers runs)": lambda: [F.linear(rows[w.shape[1]], w) for w in weights],
        "x @ W.T stored (in, out) (MKL)": lambda: [rows[w.shape[0]] @ w for w in transposed],
        "oneDNN packed (our fallback)": lambda: [torch.ops.mkldnn._linear_pointwise(rows[w.shape[1]], p, None, "none", [], "")
                                                 for w, p in zip(weights, onednn)],
    }
    if panels:
        kinds["panels, backend/kernels (ours)"] = lambda: [ops.linear(rows[w.shape[1]], p.data, p.out_features)
                                                           for w, p in zip(weights, panels)]
    return kinds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    add_readme_flag(parser)
    args = parser.parse_args()
    ours = ops.usable(torch.device("cpu"), torch.float32)
    if not ours:
        print(f"note: the C kernels are not built here ({kernels.reason()}); their rows are left out", file=sys.stderr)
    weights = [torch.randn(*shape) for _ in range(LAYERS) for shape in SHAPES]
    transposed = [w.t().contiguous() for w in weights]            # (in, out): MKL's better layout for one row
    onednn = [torch.ops.mkldnn._reorder_linear_weight(w, 32) for w in weights]
    panels = [Panels.pack(w, kernels.load().psk_panel_width()) for w in weights] if ours else []
    nbytes = sum(w.numel() * w.element_size() for w in weights)
    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    one_row = {576: torch.randn(1, 576), 1536: torch.randn(1, 1536)}
    kinds = products(weights, transposed, onednn, panels, one_row)
    kinds["read: sum (torch)"] = lambda: src.sum()
    if ours:
        kinds["read: backend/kernels (calibrate's read probe)"] = lambda: ops.read(src)
    kinds["copy (read + write, as calibrate)"] = lambda: dst.copy_(src)

    results: dict[tuple[str, int], list[float]] = {}
    batched: dict[tuple[str, int], list[float]] = {}
    flops = {n: 2 * n * nbytes / 4 for n in BATCHES}
    for _ in range(args.rounds):
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for name, fn in kinds.items():
                moved = 2 * nbytes if name.startswith("copy") else nbytes
                results.setdefault((name, threads), []).append(moved / seconds(fn) / 1e9)
        torch.set_num_threads(2)
        for n in BATCHES:
            rows = {576: torch.randn(n, 576), 1536: torch.randn(n, 1536)}
            for name, fn in products(weights, transposed, onednn, panels, rows).items():
                batched.setdefault((name, n), []).append(flops[n] / seconds(fn, 3 if n > 32 else 9) / 1e9)

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"

    lines = [measured_line(), "", f"{nbytes / 1e6:.0f} MB of fp32 matrices, {args.rounds} rounds; median (min-max)", "",
             "One row (a batch-1 decode step), GB/s:", "", "| kernel | 1 thread | 2 threads |", "|---|---|---|"]
    lines += [f"| {name} | {cell(results[(name, 1)])} | {cell(results[(name, 2)])} |" for name in kinds]
    lines += ["", "More rows, 2 threads, GFLOP/s:", "",
              "| kernel | " + " | ".join(f"{n} rows" for n in BATCHES) + " |", "|---|" + "---|" * len(BATCHES)]
    lines += [f"| {name} | " + " | ".join(f"{statistics.median(batched[(name, n)]):.0f}" for n in BATCHES) + " |"
              for name in products(weights, transposed, onednn, panels, one_row)]
    return publish("gemv", lines, args.readme)


if __name__ == "__main__":
    raise SystemExit(main())
