"""The plan as text and CSV: the cheapest configurations that meet the SLOs, the Pareto front, and
every simulated candidate's row."""
from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path

from backend.planner.search import PlanResult

COLUMNS = ("gpu", "devices", "precision", "kv_dtype", "policy", "tp", "pp", "dp", "ep", "prefill_workers",
           "decode_workers", "decode_tp", "max_batch", "spec_tokens", "meets_slo", "meets_slo_at_edge", "on_front", "goodput_rps", "attainment", "throughput_rps", "ttft_p90_ms",
           "tpot_p90_ms", "usd_per_hour", "usd_per_m_tokens", "usd_per_m_input", "usd_per_m_output",
           "attainment_low", "goodput_rps_low", "ttft_p90_ms_high", "tpot_p90_ms_high", "usd_per_m_tokens_high",
           "screen_ttft_ms", "screen_tpot_ms", "error")


def row(outcome, on_front: bool) -> dict:
    c = outcome.candidate
    return {"gpu": c.gpu, "devices": c.devices, "precision": c.precision, "kv_dtype": c.kv_dtype, "policy": c.policy,
            "tp": c.tp, "pp": c.pp, "dp": c.dp, "ep": c.ep, "prefill_workers": c.prefill_workers,
            "decode_workers": c.decode_workers, "decode_tp": c.pool_tps[1] if c.policy == "disaggregated" else 0,
            "max_batch": c.max_batch, "spec_tokens": c.spec_tokens, "meets_slo": int(outcome.meets), "meets_slo_at_edge": int(outcome.meets_at_edge),
            "on_front": int(on_front),
            "goodput_rps": outcome.goodput, "attainment": outcome.attainment, "throughput_rps": outcome.throughput,
            "ttft_p90_ms": outcome.ttft_p90_ms, "tpot_p90_ms": outcome.tpot_p90_ms,
            "usd_per_hour": outcome.usd_per_hour, "usd_per_m_tokens": outcome.usd_per_m_tokens,
            "usd_per_m_input": outcome.usd_per_m_input, "usd_per_m_output": outcome.usd_per_m_output,
            "attainment_low": outcome.attainment_low, "goodput_rps_low": outcome.goodput_low,
            "ttft_p90_ms_high": outcome.ttft_p90_high_ms, "tpot_p90_ms_high": outcome.tpot_p90_high_ms,
            "usd_per_m_tokens_high": outcome.usd_per_m_tokens_high,
            "screen_ttft_ms": outcome.screen.get("ttft_ms", math.nan),
            "screen_tpot_ms": outcome.screen.get("tpot_ms", math.nan), "error": outcome.error}


def write_csvs(result: PlanResult, folder: str | Path) -> list[Path]:
    """plan.csv (every simulated candidate) and pareto.csv (the front, increasing cost)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    front = set(result.front)
    paths = []
    for name, indices in (("plan.csv", range(len(result.outcomes))), ("pareto.csv", result.front)):
        path = folder / name
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            for i in indices:
                writer.writerow(row(result.outcomes[i], i in front))
        paths.append(path)
    return paths


def _num(value: float, digits: int = 1) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:,.{digits}f}"


def _usd(value: float) -> str:
    return "-" if value is None or not math.isfinite(value) else f"${value:,.3f}" if value < 10 else f"${value:,.2f}"


def table(outcomes, title: str) -> list[str]:
    head = (f"  {'#':>2}  {'devices':<33} {'layout':<17} {'policy':<13} {'batch':>5}  {'goodput':>7}  {'SLO met':>7}"
            f"  {'at edge':>7}  {'TTFT p90':>8}  {'TPOT p90':>8}  {'$/h':>7}  {'$/1M tok':>8}  {'$/1M in':>8}  {'$/1M out':>8}")
    lines = [title, head]
    for i, o in enumerate(outcomes, 1):
        c = o.candidate
        lines.append(f"  {i:>2}  {f'{c.devices} x {c.gpu} {c.numbers}':<33} {c.layout:<17} {c.policy:<13} "
                     f"{c.max_batch:>5}  {_num(o.goodput, 2):>7}  {_num(100 * o.attainment, 0) + '%':>7}  "
                     f"{_num(100 * o.attainment_low, 0) + '%':>7}  "
                     f"{_num(o.ttft_p90_ms):>8}  {_num(o.tpot_p90_ms):>8}  {_usd(o.usd_per_hour):>7}  "
                     f"{_usd(o.usd_per_m_tokens):>8}  {_usd(o.usd_per_m_input):>8}  {_usd(o.usd_per_m_output):>8}")
    return lines


def text(result: PlanResult, top: int = 5) -> str:
    p = result.problem
    errors = sum(1 for o in result.outcomes if o.error)
    meets = sum(1 for o in result.outcomes if o.meets)
    pruned = ", ".join(f"{n} {why}" for why, n in sorted(result.pruned.items(), key=lambda kv: -kv[1])) or "none"
    if p.trace:
        rate, prompt, output = p.traffic()
        arrivals = (f"trace {p.trace} replayed ({rate:.2f} req/s, mean prompt {prompt:,.0f}, "
                    f"mean output {output:,.0f} tokens)")
    else:
        arrivals = f"Poisson {p.rate:g} req/s, prompts {p.prompt_len.describe()}, outputs {p.output_len.describe()} tokens"
    lines = [f"plan    {p.model}: SLOs TTFT <= {p.slo_ttft_ms:g} ms and TPOT <= {p.slo_tpot_ms:g} ms for "
             f"{p.attainment:.0%} of requests; {arrivals}; {p.num_requests} requests simulated per candidate",
             f"search  {result.num_enumerated} candidates, {sum(result.pruned.values())} pruned before simulating "
             f"({pruned}), {result.num_screened_out} screened out by the roofline estimate, "
             f"{len(result.outcomes)} simulated ({errors} refused by the simulator) in {result.wall_s:.1f} s on "
             f"{result.workers} processes; {meets} meet the SLOs" + (" (stopped early)" if result.stopped else "")]
    edge_meets = sum(1 for o in result.outcomes if o.meets_at_edge)
    ranked_at_edge = p.confidence is not None
    lines.append(f"band    'at edge': the SLO attainment with every simulated TTFT and TPOT at its {p.band_level:.0%} "
                 f"band's pessimistic edge (the simulator's cross-validated errors on published figures); "
                 f"{edge_meets} meet the SLOs there; ranked by " + ("the edge (--confidence)" if ranked_at_edge
                                                                   else "the centre (--confidence L ranks by the edge)"))
    if result.best:
        title = (f"cheapest that meet the SLOs at the {p.band_level:.0%} band's pessimistic edge (of {edge_meets}), "
                 f"by their $/1M tokens there:" if ranked_at_edge else f"cheapest that meet the SLOs (of {meets}):")
        lines += table(result.best[:top], title)
    elif ranked_at_edge:
        lines.append(f"none of the simulated candidates meets the SLOs at the {p.band_level:.0%} band's pessimistic "
                     f"edge: relax them, lower --confidence or --rate, or allow more GPUs")
    else:
        lines.append("none of the simulated candidates meets the SLOs: relax them, lower --rate or allow more GPUs")
    lines += table([result.outcomes[i] for i in result.front], "Pareto front ($/1M tokens against goodput):")
    return "\n".join(lines)


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
