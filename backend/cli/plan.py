"""`plan`: the cheapest deployments of a model that meet TTFT and TPOT objectives at an arrival rate,
found by simulating candidates (backend/planner); the table, plan.csv, pareto.csv and plan.png.

The PNG is drawn by the window's libraries in a child process (`python -m gui.plan_plot`): backend
imports no Qt, and a machine without PySide6 still gets the table and the CSVs, with one line
saying the picture was skipped.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from backend.errors import InputError

DEFAULT_GPUS = "h100-sxm,h200-sxm,a100-80gb-sxm,b200"


def add_plan_parser(sub) -> None:
    from backend.cli.flags import positive_int
    from backend.planner.candidates import POLICIES, PRECISION_ORDER
    from backend.planner.search import DEFAULT_BUDGET
    p = sub.add_parser("plan", help="search GPU type and count, TP/PP/DP, precision, policy and batch limits by "
                       "simulation for the cheapest deployments that meet TTFT and TPOT objectives")
    p.add_argument("--model", required=True, help="a known shape (see `models`) or a config.json")
    p.add_argument("--slo-ttft-ms", type=float, required=True, help="time to first token objective")
    p.add_argument("--slo-tpot-ms", type=float, required=True, help="time per output token objective")
    p.add_argument("--attainment", type=float, default=0.9,
                   help="share of requests that must meet both objectives (default 0.9)")
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
    p.add_argument("--budget", type=positive_int, default=DEFAULT_BUDGET,
                   help=f"candidates simulated, the most promising by a roofline estimate (default {DEFAULT_BUDGET})")
    p.add_argument("--workers", type=positive_int, help="simulating processes (default: the cores)")
    p.add_argument("--top", type=positive_int, default=5, help="cheapest configurations shown (default 5)")
    p.add_argument("--out", help="write plan.csv, pareto.csv and plan.png here")


def _names(text: str, flag: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    if not names:
        raise InputError(f"{flag}: give at least one name")
    return names


def _ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in _names(text, flag))
    except ValueError:
        raise InputError(f"{flag}: expected whole numbers separated by commas, got {text!r}") from None
    if any(v < 1 for v in values):
        raise InputError(f"{flag}: every value must be at least 1, got {text!r}")
    return values


def problem_and_space(args):
    from backend.planner.candidates import POLICIES, PRECISION_ORDER, SearchSpace
    from backend.planner.evaluate import Problem
    from backend.workload.spec import LengthDist
    for flag, value in (("--slo-ttft-ms", args.slo_ttft_ms), ("--slo-tpot-ms", args.slo_tpot_ms)):
        if not value > 0:
            raise InputError(f"{flag} must be a positive number of milliseconds, got {value:g}")
    if args.trace is None and args.rate is None:
        raise InputError("give --rate R (Poisson arrivals per second) or --trace FILE")
    if args.rate is not None and not args.rate > 0:
        raise InputError(f"--rate must be a positive number of requests per second, got {args.rate:g}")
    precisions = _names(args.precisions, "--precisions")
    policies = _names(args.policies, "--policies")
    kv_dtypes = _names(args.kv_dtypes, "--kv-dtypes")
    for flag, names, known in (("--precisions", precisions, PRECISION_ORDER), ("--policies", policies, POLICIES),
                               ("--kv-dtypes", kv_dtypes, ("auto", "fp8"))):
        unknown = [n for n in names if n not in known]
        if unknown:
            raise InputError(f"{flag}: unknown {unknown[0]!r} (known: {', '.join(known)})")
    problem = Problem(model=args.model, slo_ttft_ms=args.slo_ttft_ms, slo_tpot_ms=args.slo_tpot_ms,
                      rate=args.rate if args.rate is not None else 1.0, num_requests=args.requests,
                      prompt_len=LengthDist.parse(args.prompt_len, "--prompt-len"),
                      output_len=LengthDist.parse(args.output_len, "--output-len"),
                      trace=args.trace, attainment=args.attainment, seed=args.seed)
    space = SearchSpace(gpus=_names(args.gpus, "--gpus"), max_gpus=args.max_gpus, precisions=precisions,
                        policies=policies, max_batches=_ints(args.max_batches, "--max-batches"), kv_dtypes=kv_dtypes)
    return problem, space


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


def render_png(csv_path: Path, png: Path, title: str = "") -> str | None:
    """Draw plan.png from plan.csv in a child process; None when written, else the one line why not."""
    root = str(Path(__file__).resolve().parents[2])   # the checkout (or site-packages) that holds gui/
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    try:
        done = subprocess.run([sys.executable, "-m", "gui.plan_plot", str(csv_path), str(png), title],
                              capture_output=True, text=True, timeout=120, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"plot    skipped: {exc}"
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return f"plot    skipped: {lines[-1] if lines else f'the plotter exited with {done.returncode}'}"
    return None
