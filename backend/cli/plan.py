"""`plan`: the cheapest deployments of a model that meet TTFT and TPOT objectives at an arrival rate,
found by simulating candidates (backend/planner); the table, plan.csv, pareto.csv and plan.png.

The PNG is drawn by the window's libraries in a child process (`python -m gui.plan_plot`): backend
imports no Qt, and a machine without PySide6 still gets the table and the CSVs, with one line
saying the picture was skipped.
"""
from __future__ import annotations

import sys
from pathlib import Path

from backend.planner.inputs import DEFAULT_GPUS, problem_and_space
from backend.planner.report import render_png


def add_plan_parser(sub) -> None:
    from backend.cli.flags import engine_flag, positive_int
    from backend.planner.candidates import POLICIES, PRECISION_ORDER
    from backend.planner.search import DEFAULT_BUDGET
    p = sub.add_parser("plan", help="search GPU type and count, TP/PP/DP, precision, policy and batch limits by "
                       "simulation for the cheapest deployments that meet TTFT and TPOT objectives")
    p.add_argument("--model", required=True, help="a known shape (see `models`) or a config.json")
    p.add_argument("--slo-ttft-ms", type=float, required=True, help="time to first token objective")
    p.add_argument("--slo-tpot-ms", type=float, required=True, help="time per output token objective")
    p.add_argument("--attainment", type=float, default=0.9,
                   help="share of requests that must meet both objectives (default 0.9)")
    p.add_argument("--confidence", type=float,
                   help="rank by the SLOs met at the simulated figures' pessimistic band edge at this level "
                        "(0.8: an 80%% band; default: rank by the centre, the 80%% edge shown beside it)")
    p.add_argument("--rate", type=float, help="Poisson arrivals per second (with --trace: ignored)")
    p.add_argument("--trace", help="replay this trace's arrivals and lengths instead of Poisson arrivals")
    p.add_argument("--prompt-len", default="1024", help="N or A:B (uniform), default 1024")
    p.add_argument("--output-len", default="256", help="N or A:B (uniform), default 256")
    p.add_argument("--requests", type=positive_int, default=200,
                   help="requests simulated per candidate (default 200)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gpus", default=DEFAULT_GPUS, help=f"comma-separated profile keys (default {DEFAULT_GPUS})")
    p.add_argument("--max-gpus", type=positive_int, default=8, help="most devices a deployment may use (default 8)")
    p.add_argument("--precisions", default=",".join(PRECISION_ORDER),
                   help="tried where the GPU has their peak (default bfloat16,fp8,nvfp4)")
    p.add_argument("--kv-dtypes", default="auto,fp8",
                   help="KV cache dtypes tried: auto (the activations') and fp8 where the GPU has an FP8 peak "
                        "(default auto,fp8)")
    p.add_argument("--policies", default=",".join(POLICIES), help=f"default {','.join(POLICIES)}")
    p.add_argument("--max-batches", default="32,64,128,256", help="max_batch limits tried (default 32,64,128,256)")
    engine_flag(p)
    g = p.add_argument_group("speculative decoding, searched as K (docs/plan.md)")
    g.add_argument("--spec", help="ngram | draft:MODEL: the proposer of the candidates that speculate (default: off)")
    g.add_argument("--spec-tokens", default="4",
                   help="K values searched, comma-separated; 0 is off (e.g. 0,2,4,8; default 4)")
    g.add_argument("--spec-acceptance", type=float, default=None,
                   help="per-guess acceptance rate alpha the simulator keeps guesses with (default 0.7)")
    g.add_argument("--spec-draft-cost", type=float, default=None,
                   help="a draft pass as a fraction of a target decode step (default: 0 for ngram; a draft model "
                        "priced by the cost model)")
    g.add_argument("--spec-from", default="", help="a run folder that speculated: its measured alpha and draft time")
    p.add_argument("--budget", type=positive_int, default=DEFAULT_BUDGET,
                   help=f"candidates simulated, the most promising by a roofline estimate (default {DEFAULT_BUDGET})")
    p.add_argument("--workers", type=positive_int, help="simulating processes (default: the cores)")
    p.add_argument("--top", type=positive_int, default=5, help="cheapest configurations shown (default 5)")
    p.add_argument("--out", help="write plan.csv, pareto.csv and plan.png here")


def run_plan(args) -> int:
    from backend.planner import report
    from backend.planner.search import search
    problem, space = problem_and_space(args)

    def progress(outcome, done: int, total: int) -> None:
        if sys.stderr.isatty():
            print(f"\rsimulated {done}/{total}", end="" if done < total else "\n", file=sys.stderr, flush=True)

    try:
        result = search(problem, space, workers=args.workers, budget=args.budget, on_outcome=progress)
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 130
    print(report.text(result, args.top))
    if args.out:
        paths = report.write_csvs(result, args.out)
        png = Path(args.out) / "plan.png"
        title = (f"{problem.model}: TTFT \u2264 {problem.slo_ttft_ms:g} ms, TPOT \u2264 {problem.slo_tpot_ms:g} ms "
                 f"for {problem.attainment:.0%}, " + (f"trace {Path(problem.trace).name}" if problem.trace
                                                       else f"{problem.rate:g} req/s"))
        line = render_png(paths[0], png, title)
        print(f"wrote   {', '.join(str(p) for p in paths)}" + (f", {png}" if line is None else ""))
        if line is not None:
            print(line)
    return 0
