"""The float32 panel product alone (backend/kernels/linear.c): this tree's kernels against another revision's.

    python -m bench.panel_product [--against REV] [--arch=-march=x86-64-v3] [--rounds 15] [--readme]

Both builds (the sources of backend/kernels in this tree and at REV, default HEAD~1) are compiled
here with the same compiler, flags and --arch (default -march=x86-64-v3: the AVX2 + FMA paths, no
AVX-512), loaded side by side in one process, and alternate round by round. Each times psk_linear
on two matrices of SmolLM2-135M's shapes packed in 32-wide panels, (out, in) = (1536, 576) and
(576, 1536), at 32, 128 and 512 rows (a decode batch, prefills): every row of a panel's product
runs through psk_linear_panel, the code prefills and decode batches of more than a few rows run
(qlinear.c's dequantized panels too). One thread, timed by the thread's CPU time, so the
machine's other work moves the figures little; a panel set fits in cache, so this is the
register tile's rate, not the memory's. The table gives the best round of each build and the
median of the round-by-round ratios, and whether the two builds' outputs are bit-identical (a
new tile shape keeps each output's order of additions).
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import torch

from backend import kernels
from backend.models.packed import Panels
from bench.common import ROOT, add_readme_flag, alternating, measured_line, publish

SHAPES = [(1536, 576), (576, 1536)]   # (out, in): gate_up's half, down
ROWS = (32, 128, 512)
SAMPLE_FLOPS = 2e9                    # products per timed sample: about 20 ms at 100 GFLOP/s


def compile_kernels(source: Path, arch: str, folder: Path, name: str) -> ctypes.CDLL:
    """backend/kernels' sources under `source`, compiled as kernels.build does, with `arch`."""
    compiler = kernels._compiler()
    out = folder / f"{name}.so"
    command = [*compiler, *arch.split(), *kernels.compile_flags(compiler),
               *map(str, sorted((source / "backend" / "kernels").glob("*.c"))), "-o", str(out)]
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    lib = ctypes.CDLL(str(out))
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.psk_linear.argtypes = [ptr, ptr, ptr, ptr, ptr, i64, i64, i64]
    lib.psk_linear.restype = None
    lib.psk_set_threads.argtypes = [ctypes.c_int]
    lib.psk_set_threads(1)
    return lib


def sources_at(rev: str, folder: Path) -> Path:
    """backend/kernels as of git revision `rev`, extracted under `folder`."""
    archive = subprocess.run(["git", "archive", "--format=tar", rev, "backend/kernels"], cwd=ROOT, check=True,
                             capture_output=True, timeout=60).stdout
    target = folder / "at-rev"
    with tempfile.TemporaryFile() as f:
        f.write(archive)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(target, filter="data")
    return target


def seconds(lib: ctypes.CDLL, panels: Panels, x: torch.Tensor, y: torch.Tensor, reps: int) -> float:
    """Thread CPU seconds of one product, the mean over `reps` back to back."""
    out, inp = panels.shape
    start = time.thread_time()
    for _ in range(reps):
        lib.psk_linear(panels.data.data_ptr(), x.data_ptr(), None, None, y.data_ptr(), x.shape[0], out, inp)
    return (time.thread_time() - start) / reps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", default="HEAD~1", help="the git revision whose kernels to compare with")
    parser.add_argument("--arch", default="-march=x86-64-v3", help="architecture flags of both builds")
    parser.add_argument("--rounds", type=int, default=15)
    add_readme_flag(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        libs = {args.against: compile_kernels(sources_at(args.against, folder), args.arch, folder, "rev"),
                "this tree": compile_kernels(ROOT, args.arch, folder, "tree")}
        lines = [measured_line(), "", f"`python -m bench.panel_product --against {args.against} --arch={args.arch}`, "
                 "one thread timed by its CPU time (the machine may be shared), "
                 f"{args.rounds} rounds alternating the builds; GFLOP/s of the best round", "",
                 f"| matrix (out x in) | rows | {args.against} GFLOP/s | this tree GFLOP/s "
                 "| speed-up (median of rounds) | outputs bit-identical |", "|---|---|---|---|---|---|"]
        gen = torch.Generator().manual_seed(0)
        for out, inp in SHAPES:
            panels = Panels.pack(torch.randn(out, inp, generator=gen), 32)
            for n in ROWS:
                x = torch.randn(n, inp, generator=gen)
                ys = {name: torch.empty(n, out) for name in libs}
                flops = 2 * n * out * inp
                reps = max(1, round(SAMPLE_FLOPS / flops))
                times: dict[str, list[float]] = {name: [] for name in libs}
                for rnd, order in alternating(args.rounds, list(libs)):
                    for name in order:
                        t = seconds(libs[name], panels, x, ys[name], reps)
                        if rnd >= 0:
                            times[name].append(t)
                old, new = (times[name] for name in libs)
                ratio = statistics.median(o / t for o, t in zip(old, new))
                same = "yes" if torch.equal(*ys.values()) else "no"
                lines.append(f"| {out} x {inp} | {n} | {flops / min(old) / 1e9:.1f} | {flops / min(new) / 1e9:.1f} | "
                             f"{ratio:.2f}x | {same} |")
                print(lines[-1], file=sys.stderr, flush=True)
    return publish("panel_product", lines, args.readme)


if __name__ == "__main__":
    sys.exit(main())
