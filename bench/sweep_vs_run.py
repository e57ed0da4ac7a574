"""A batch-sweep point against `run --batch B` of the same shape: one measurement now, so one figure.

    python -m bench.sweep_vs_run [--batches 1,8,32] [--context 256] [--steps 16] [--repeats 5] [--readme]

Since the sweeps run their points through the engine (backend/sweeps/steps.py), a batch-sweep
point at batch B and context C is the median decode step of a run of B synthetic prompts of C
tokens. This script checks that claim side by side: for each repeat and each B, interleaved (the
order alternating by repeat), it runs `sweep batch --batches B --context C --steps S` and
`run --batch B --prompt-len C --output-len 2+S+1 --ignore-eos` on the bundled model (one
ModelCache, so neither reloads it), and compares the sweep point's step_ms with the run's median
decode step after the same 2 warm-up steps. Prints a Markdown table (the medians over repeats, the
median of run-by-run ratios and their range); --readme writes it into bench/README.md.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # as main.py, before torch loads

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

from backend.config import BatchRun, EngineConfig, ModelChoice, RunConfig, SamplingConfig, SweepSpec  # noqa: E402
from backend.events import SweepPoint  # noqa: E402
from backend.loaders.cache import ModelCache  # noqa: E402
from backend.records import Phase  # noqa: E402
from backend.session import execute  # noqa: E402
from bench.common import add_readme_flag, alternating, log, measured_line, publish, ratio_median  # noqa: E402
WARMUP = 2   # the sweep's default warm-up steps, left out of both medians


def sweep_point(models: ModelCache, batch: int, context: int, steps: int) -> float:
    points: list[SweepPoint] = []
    config = RunConfig(mode="sweep-batch", model=ModelChoice(), sweep=SweepSpec("batch", batches=[batch],
                                                                                context=context, steps=steps))
    execute(config, lambda e: points.append(e) if isinstance(e, SweepPoint) else None, lambda: False, models=models)
    return points[0].step_ms


def run_median(models: ModelCache, batch: int, context: int, steps: int) -> tuple[float, dict]:
    """The run's median decode step after WARMUP, and its run.json info."""
    config = RunConfig(mode="batch", model=ModelChoice(), sampling=SamplingConfig(ignore_eos=True),
                       engine=EngineConfig(policy="static", max_batch=batch),
                       batch=BatchRun(prompt_len=context, output_len=WARMUP + steps + 1, batch=batch))
    finished = execute(config, lambda e: None, lambda: False, models=models)
    decode = [s.duration_ms for s in finished.data.steps if s.phase is Phase.DECODE][WARMUP:]
    return statistics.median(decode), finished.data.info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    add_readme_flag(parser)
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    models = ModelCache()
    _, info = run_median(models, 1, 16, 2)   # loads the model and warms the thread pool before any figure
    samples = {b: {"sweep": [], "run": []} for b in batches}
    for rep, order in alternating(args.repeats, ("sweep", "run"), warmup=0):
        for b in batches:
            for kind in order:
                ms = (sweep_point(models, b, args.context, args.steps) if kind == "sweep" else
                      run_median(models, b, args.context, args.steps)[0])
                samples[b][kind].append(ms)
                log(f"repeat {rep + 1} batch {b} {kind}: {ms:.2f} ms")
    lines = [measured_line(f"{torch.get_num_threads()} torch threads"), "",
             f"The bundled SmolLM2-135M as stored ({info.dtype} weights, "
             f"{info.host.kernels}): context {args.context}, {args.steps} timed "
             f"decode steps after {WARMUP} warm-up steps, {args.repeats} repeats interleaved (the order alternating).",
             "", "| batch | sweep point step ms | run's decode median ms | sweep / run (median, range) |",
             "|---|---|---|---|"]
    for b in batches:
        s, r = samples[b]["sweep"], samples[b]["run"]
        ratios = [x / y for x, y in zip(s, r)]
        lines.append(f"| {b} | {statistics.median(s):.2f} | {statistics.median(r):.2f} | "
                     f"{ratio_median(s, r):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) |")
    return publish("sweep_vs_run", lines, args.readme)


if __name__ == "__main__":
    sys.exit(main())
