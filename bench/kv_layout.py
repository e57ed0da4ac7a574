"""What the paged KV cache costs against the slot cache it replaced: the same model steps, side by side.

    python -m bench.kv_layout [--baseline PATH] [--rounds 41] [--readme]

The bundled SmolLM2-135M in float32 on the C kernels, one process per side: a 512-token prefill
and decode steps at batch 1 and 32 with CACHED tokens cached, one step of each side in turn
(the order alternating round by round, and rotating: bench.common.in_order), so that the load of a shared machine, which drifts
within seconds, falls on the sides alike:

  * slots: the code at --baseline (a checkout from before the paged cache, e.g. a worktree of
    main at the branch point), run read-only from its own folder: k and v (slots, kv, max_len, hd);
  * paged, identity table: this checkout, the slot layout's table (row r owns blocks r*B..);
  * paged, scrambled table: this checkout, every row's blocks drawn from a permutation of the pool
    (what a long-running paged allocator leaves), so a request's blocks are nowhere adjacent.

Without --baseline only the two paged sides run. Each side is its own process (the kernels of
two source trees cannot share one), waiting on its stdin while the others run, so they never
share the cores. Prints medians and the medians of the round-by-round ratios to the first side.
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

HERE = Path(__file__).resolve().parent
CACHED = 256
BATCHES = (1, 32)   # decode rows 0..B-1
MAX_LEN = 640


def _worker(side: str) -> None:
    """One side: load once, then one timed step per line on stdin ('prefill', or 'decode B P': B rows
    decoding at position P), its seconds on stdout."""
    import torch
    from backend.loaders.weights import BUNDLED, load_model
    from backend.models import KVCache, make_step_batch
    from backend.models.packed import pack_weights
    loaded = load_model(BUNDLED, "cpu", "float32")
    assert pack_weights(loaded.model)
    model, shape = loaded.model, loaded.shape
    rows = max(BATCHES)
    cache = KVCache(shape, rows, MAX_LEN, "cpu", torch.float32)
    if side == "scrambled":   # every row's blocks from a permutation of the pool
        per_row = cache.max_blocks_per_row
        perm = torch.randperm(cache.num_blocks, generator=torch.Generator().manual_seed(0))
        for row in range(cache.num_slots):
            cache.set_row(row, perm[row * per_row:(row + 1) * per_row])
    prompt = [(i * 7919) % shape.vocab_size for i in range(512)]
    with torch.inference_mode():   # every row's context once: the decode steps rewrite positions past it
        model(make_step_batch([(s, 0, prompt[:CACHED]) for s in range(rows)], [], "cpu"), cache)
    print(json.dumps({"ready": side, "threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            return
        with torch.inference_mode():
            if words[0] == "prefill":   # the last row: its first CACHED keys come out as they were
                batch = make_step_batch([(rows - 1, 0, prompt)], [], "cpu")
            else:
                size, position = int(words[1]), int(words[2])
                batch = make_step_batch([], [(s, position, 5) for s in range(size)], "cpu")
            start = time.perf_counter()
            model(batch, cache).argmax(-1).tolist()
            print(json.dumps(time.perf_counter() - start), flush=True)


class Side:
    """A worker process of one side, started from a source tree."""

    def __init__(self, name: str, label: str, tree: Path):
        self.name, self.label = name, label
        env = dict(os.environ, PYTHONPATH=str(tree))
        # the file itself, not `-m bench...`: the baseline tree need not have this benchmark
        self.process = subprocess.Popen([sys.executable, str(HERE / "kv_layout.py"), "--worker", name],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tree)
        ready = json.loads(self.process.stdout.readline() or "{}")
        if ready.get("ready") != name:
            raise SystemExit(f"the {label} side did not start (see its error above)")
        self.threads = ready["threads"]

    def time(self, step: str) -> float:
        self.process.stdin.write(step + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def main() -> int:
    if "--worker" in sys.argv:
        _worker(sys.argv[sys.argv.index("--worker") + 1])
        return 0
    from bench.common import add_readme_flag, alternating, measured_line, publish, ratio_median
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="a checkout with the slot cache (the code before paging)")
    parser.add_argument("--rounds", type=int, default=41)
    add_readme_flag(parser)
    args = parser.parse_args()
    tree = HERE.parent
    sides = [Side("identity", "paged, identity table", tree), Side("scrambled", "paged, scrambled table", tree)]
    if args.baseline:
        sides.insert(0, Side("slots", "slots (before paging)", args.baseline.resolve()))
    steps = {"prefill 512": lambda rnd: "prefill",
             **{f"decode batch {b}": (lambda rnd, b=b: f"decode {b} {CACHED + rnd % 64}") for b in BATCHES}}
    results: dict[str, list[list[float]]] = {}
    load = [os.getloadavg()[0]]   # the machine's other work, said beside the table (its ratios hold, its times not)
    try:   # one step of each side in turn, the order alternating, so the sides' samples are neighbours in time
        for name, step in steps.items():
            kept = results[name] = [[] for _ in sides]
            for rnd, order in alternating(args.rounds, list(enumerate(sides)), warmup=2):
                for i, side in order:
                    seconds = side.time(step(rnd))
                    if rnd >= 0:
                        kept[i].append(seconds)
    finally:
        for side in sides:
            side.close()
    load.append(os.getloadavg()[0])
    lines = [measured_line(f"{sides[0].threads} torch threads"), "",
             f"SmolLM2-135M fp32 on the C kernels, one process per side, {args.rounds} rounds of one step per side "
             f"(the order alternating) after 2 warm-up rounds; decode steps with {CACHED}+ tokens cached; blocks of "
             f"16 tokens; ratios are medians of the rounds' ratios; the machine was shared with other work (load "
             f"average {load[0]:.1f} at the start, {load[1]:.1f} at the end, on {os.cpu_count()} cores): the times "
             f"are inflated by it, the interleaved ratios much less", "",
             "| step | " + " | ".join(s.label for s in sides) + " | " +
             " | ".join(f"{s.label} / {sides[0].label}" for s in sides[1:]) + " |",
             "|---" * (2 * len(sides)) + "|"]
    for name, runs in results.items():
        medians = [f"{statistics.median(r) * 1000:.2f} ms" for r in runs]
        ratios = [f"{ratio_median(r, runs[0]):.3f}" for r in runs[1:]]
        lines.append(f"| {name} | " + " | ".join(medians) + " | " + " | ".join(ratios) + " |")
    return publish("kv_layout", lines, args.readme)


if __name__ == "__main__":
    raise SystemExit(main())
