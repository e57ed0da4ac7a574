"""What the paged KV cache costs against the slot cache it replaced: the same model steps, side by side.

    python -m bench.kv_layout [--baseline PATH] [--rounds 41] [--processes 3] [--readme]

The bundled SmolLM2-135M in float32 on the C kernels: a 512-token prefill and decode steps at
batch 1 and 32 with CACHED tokens cached, one step of each side in turn (the order alternating
round by round, and rotating: bench.common.in_order), so that the load of a shared machine, which
drifts within seconds, falls on the sides alike:

  * slots: the code at --baseline (a checkout from before the paged cache, e.g. a worktree of
    main at the branch point), run read-only from its own folder: k and v (slots, kv, max_len, hd);
  * paged, identity table: this checkout, the slot layout's table (row r owns blocks r*B..);
  * paged, scrambled table: this checkout, every row's blocks drawn from a permutation of the pool
    (what a long-running paged allocator leaves), so a request's blocks are nowhere adjacent.

The two paged sides are two caches in one process, on one copy of the weights: the table is all
that differs between them. The slot side is another process (the kernels of two source trees
cannot share one), waiting on its stdin while the other runs, so they never share the cores.
A process's own memory placement moves a batch-1 decode step, which is the weights' stream, by
several per cent from one process to the next with the same code and table, for as long as the
process lives (measured: four processes of the identity side 0.94-1.01x of the first, bench/README.md),
so alternating rounds do not average it out: the rounds are split over --processes fresh sets of workers.
Without --baseline only the paged sides run. Prints medians and the medians of the round-by-round
ratios to the first side.
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


def _worker(layouts: list[str]) -> None:
    """One process: load once, a cache for each of `layouts` ('slots' and 'identity': the default
    table; 'scrambled'), then one timed step per line on stdin ('LAYOUT prefill', or 'LAYOUT decode
    B P': B rows decoding at position P), its seconds on stdout."""
    import torch
    from backend.loaders.weights import BUNDLED, load_model
    from backend.models import KVCache, make_step_batch
    from backend.models.packed import pack_weights
    loaded = load_model(BUNDLED, "cpu", "float32")
    assert pack_weights(loaded.model)
    model, shape = loaded.model, loaded.shape
    rows = max(BATCHES)
    prompt = [(i * 7919) % shape.vocab_size for i in range(512)]
    caches = {}
    for layout in layouts:
        cache = caches[layout] = KVCache(shape, rows, MAX_LEN, "cpu", torch.float32)
        if layout == "scrambled":   # every row's blocks from a permutation of the pool
            per_row = cache.max_blocks_per_row
            perm = torch.randperm(cache.num_blocks, generator=torch.Generator().manual_seed(0))
            for row in range(cache.num_slots):
                cache.set_row(row, perm[row * per_row:(row + 1) * per_row])
        with torch.inference_mode():   # every row's context once: the decode steps rewrite positions past it
            model(make_step_batch([(s, 0, prompt[:CACHED]) for s in range(rows)], [], "cpu"), cache)
    print(json.dumps({"ready": layouts, "threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            return
        cache = caches[words[0]]
        with torch.inference_mode():
            if words[1] == "prefill":   # the last row: its first CACHED keys come out as they were
                batch = make_step_batch([(rows - 1, 0, prompt)], [], "cpu")
            else:
                size, position = int(words[2]), int(words[3])
                batch = make_step_batch([], [(s, position, 5) for s in range(size)], "cpu")
            start = time.perf_counter()
            model(batch, cache).argmax(-1).tolist()
            print(json.dumps(time.perf_counter() - start), flush=True)


class Worker:
    """A worker process holding one cache per layout, started from a source tree."""

    def __init__(self, layouts: list[str], tree: Path):
        self.layouts = layouts
        env = dict(os.environ, PYTHONPATH=str(tree))
        # the file itself, not `-m bench...`: the baseline tree need not have this benchmark
        self.process = subprocess.Popen([sys.executable, str(HERE / "kv_layout.py"), "--worker", ",".join(layouts)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tree)
        ready = json.loads(self.process.stdout.readline() or "{}")
        if ready.get("ready") != layouts:
            raise SystemExit(f"the worker for {', '.join(layouts)} did not start (see its error above)")
        self.threads = ready["threads"]

    def time(self, layout: str, step: str) -> float:
        self.process.stdin.write(f"{layout} {step}\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


LABELS = {"slots": "slots (before paging)", "identity": "paged, identity table", "scrambled": "paged, scrambled table"}


def _measure(steps: dict, baseline: Path | None, rounds: int, results: dict[str, list[list[float]]],
             slots_first: bool) -> int:
    """`rounds` rounds of every step in one fresh set of workers, appended to `results` (one list a
    side, in LABELS' order); the workers' torch threads. slots_first: start the slots worker before
    the paged one, not after (the sets take turns: with one process a side, the side started first,
    the identity table, came out slower at batch 1 than the one started second, the scrambled table,
    in all five runs of the README's notes; which process starts first may matter)."""
    from bench.common import alternating
    kinds = (["slots"] if baseline else []) + ["paged"]
    trees = {"slots": baseline, "paged": HERE.parent}
    started = {kind: Worker(["slots"] if kind == "slots" else ["identity", "scrambled"], trees[kind])
               for kind in (kinds if slots_first else kinds[::-1])}
    workers = [started[kind] for kind in kinds]   # LABELS' order
    sides = [(worker, layout) for worker in workers for layout in worker.layouts]
    try:   # one step of each side in turn, the order alternating, so the sides' samples are neighbours in time
        for name, step in steps.items():
            kept = results.setdefault(name, [[] for _ in sides])
            for rnd, order in alternating(rounds, list(enumerate(sides)), warmup=2):
                for i, (worker, layout) in order:
                    seconds = worker.time(layout, step(rnd))
                    if rnd >= 0:
                        kept[i].append(seconds)
    finally:
        for worker in workers:
            worker.close()
    return workers[-1].threads


def main() -> int:
    if "--worker" in sys.argv:
        _worker(sys.argv[sys.argv.index("--worker") + 1].split(","))
        return 0
    from bench.common import add_readme_flag, measured_line, publish, ratio_median
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="a checkout with the slot cache (the code before paging)")
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--processes", type=int, default=3,
                        help="fresh pairs of worker processes the rounds are split over (each with 2 warm-up rounds)")
    add_readme_flag(parser)
    args = parser.parse_args()
    baseline = args.baseline.resolve() if args.baseline else None
    labels = [LABELS[layout] for layout in ("slots", "identity", "scrambled") if baseline or layout != "slots"]
    steps = {"prefill 512": lambda rnd: "prefill",
             **{f"decode batch {b}": (lambda rnd, b=b: f"decode {b} {CACHED + rnd % 64}") for b in BATCHES}}
    results: dict[str, list[list[float]]] = {}
    load = [os.getloadavg()[0]]   # the machine's other work, said beside the table (its ratios hold, its times not)
    processes = max(1, min(args.processes, args.rounds))
    for p in range(processes):   # the rounds split as evenly as they go
        rounds = args.rounds * (p + 1) // processes - args.rounds * p // processes
        threads = _measure(steps, baseline, rounds, results, slots_first=p % 2 == 1)
    load.append(os.getloadavg()[0])
    lines = [measured_line(f"{threads} torch threads"), "",
             f"SmolLM2-135M fp32 on the C kernels, {args.rounds} rounds of one step per side (the order alternating "
             f"and rotating) over {processes} fresh sets of worker processes (the paged sides two caches in one "
             f"process, the slots side its own), each set after 2 warm-up rounds; decode steps with {CACHED}+ tokens "
             f"cached; blocks of 16 tokens; ratios are medians of the rounds' ratios; the machine was shared with "
             f"other work (load average {load[0]:.1f} at the start, {load[1]:.1f} at the end, on {os.cpu_count()} "
             f"cores): the times are inflated by it, the interleaved ratios much less", "",
             "| step | " + " | ".join(labels) + " | "
             + " | ".join(f"{label} / {labels[0]}" for label in labels[1:]) + " |",
             "|---" * (2 * len(labels)) + "|"]
    for name, runs in results.items():
        medians = [f"{statistics.median(r) * 1000:.2f} ms" for r in runs]
        ratios = [f"{ratio_median(r, runs[0]):.3f}" for r in runs[1:]]
        lines.append(f"| {name} | " + " | ".join(medians) + " | " + " | ".join(ratios) + " |")
    return publish("kv_layout", lines, args.readme)


if __name__ == "__main__":
    raise SystemExit(main())
