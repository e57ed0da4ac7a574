"""The simulator against published, measured serving figures (backend/sim/published_figures.py).

Each figure's setup becomes a simulated run (`run` for a fixed batch, `load` with a closed loop of
N users for a concurrency figure) on this repo's GPU profile, with the figure's model, precision,
KV dtype and tensor/pipeline parallelism; the printed table has the measured value, the simulated
one and the error, for the fitted and the held-out set apart (the held-out rule is in
published_figures.py and fixed; nothing here chooses it).

    python -m bench.sim_vs_published            # the profiles' own cost-model terms (the shipped GPU profiles
                                                # carry this fit's terms, so this reproduces its table)
    python -m bench.sim_vs_published --fit      # fit the terms on the fitted set only, then both sets again
    python -m bench.sim_vs_published --markdown # the tables as markdown too
    python -m bench.sim_vs_published --readme   # the last terms' errors and markdown table into bench/README.md

The simulated figures are this machine's simulator, not a GPU. A figure the simulator cannot
express (a model shape it lacks, a layout it refuses) is listed with the reason and left out of
both sets' statistics.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from dataclasses import dataclass

from backend.config import BatchRun, Deployment, EngineConfig, ModelChoice, RunConfig
from backend.errors import InputError
from backend.sim.published_figures import FIGURES, Figure, is_held_out
from backend.sim.published_fit import STRUCTURES, engine_of
from backend.sim.step_time import CostModel
from backend.workload.spec import LengthDist, WorkloadSpec
from bench.common import add_readme_flag, measured_line, write_table

STRUCTURE_NAMES = tuple(STRUCTURES)

SUMMARY_KEY = {"ttft_ms": "ttft_mean_ms", "itl_ms": "itl_mean_ms", "e2e_ms": "e2e_mean_ms"}


@dataclass(slots=True)
class Result:
    figure: Figure
    simulated: float | None     # None: the simulator could not express it (see reason)
    reason: str = ""

    @property
    def error_pct(self) -> float:
        return (self.simulated - self.figure.value) / self.figure.value * 100.0


def model_name(key: str) -> str:
    """The figure's model as the simulator names it: a shipped config key (profiles/models/)."""
    from backend.roofline.model_configs import SHIPPED_CONFIGS
    if key not in SHIPPED_CONFIGS:
        raise InputError(f"no shipped shape for model {key!r} (profiles/models/ has {', '.join(sorted(SHIPPED_CONFIGS))})")
    return key


def sim_config(fig: Figure) -> RunConfig:
    """The figure's setup as a simulated run."""
    model = ModelChoice(name=model_name(fig.model), dtype=fig.precision)
    # the figure's own engine family: its host terms (the profile's [simulation.<family>] table, else the shared)
    deployment = Deployment(tp=fig.tp, pp=fig.pp, kv_dtype=fig.kv_dtype, engine=engine_of(fig).value)
    common = dict(simulate=True, profile=fig.profile, model=model, deployment=deployment)
    if fig.kind == "batch":
        return RunConfig(mode="batch", batch=BatchRun(prompt_len=fig.prompt_len, output_len=fig.output_len,
                                                      batch=fig.batch), **common)
    workload = WorkloadSpec(name=fig.id, num_requests=fig.num_requests, arrival="closed", rate=None,
                            concurrency=fig.concurrency, prompt_len=LengthDist("fixed", fig.prompt_len),
                            output_len=LengthDist("fixed", fig.output_len))
    engine = EngineConfig(policy="continuous", max_batch=max(fig.concurrency, 1))
    return RunConfig(mode="load", workload=workload, engine=engine, **common)


def metric_of(fig: Figure, summary) -> float:
    """The figure's metric read from a simulated run's summary (a backend.summary.Summary)."""
    if fig.metric == "tok_s_per_gpu":
        return summary.num_output_tokens / summary.duration_s / fig.num_gpus
    if fig.metric == "tok_s":
        return summary.output_tokens_per_s
    return getattr(summary, SUMMARY_KEY[fig.metric])


def simulate(fig: Figure, cost_model: CostModel | None = None) -> Result:
    from backend.sim.target import run_simulated
    try:
        finished = run_simulated(sim_config(fig), emit=lambda e: None, should_stop=lambda: False,
                                 retain_records=False, cost_model=cost_model)
    except InputError as exc:   # DoesNotFit is one too: a layout the simulator refuses
        return Result(fig, None, str(exc))
    if finished.error:
        return Result(fig, None, str(finished.error))
    value = metric_of(fig, finished.summary)
    if not math.isfinite(value) or value <= 0:
        return Result(fig, None, f"the summary's {fig.metric} is {value!r}")
    return Result(fig, value)


def setup_text(fig: Figure) -> str:
    load = f"b{fig.batch}" if fig.kind == "batch" else f"c{fig.concurrency}"
    return f"{fig.prompt_len}/{fig.output_len} {load}"


def stats(results: list[Result]) -> tuple[float, float, int]:
    """Median and worst absolute error (%) of the expressed results, and how many."""
    errors = [abs(r.error_pct) for r in results if r.simulated is not None]
    if not errors:
        return math.nan, math.nan, 0
    return statistics.median(errors), max(errors), len(errors)


def table(results: list[Result], markdown: bool = False) -> str:
    head = ("id", "gpu", "n", "model", "prec", "tp", "setup", "metric", "measured", "simulated", "error", "set")
    rows = []
    for r in results:
        f = r.figure
        sim = f"{r.simulated:,.1f}" if r.simulated is not None else "n/a"
        err = f"{r.error_pct:+.1f}%" if r.simulated is not None else "n/a"
        rows.append((f.id, f.profile, str(f.num_gpus), f.model, f.precision, str(f.tp), setup_text(f), f.metric,
                     f"{f.value:,.1f}", sim, err, "held-out" if is_held_out(f) else "fitted"))
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    return "\n".join("  ".join(x.ljust(w) for x, w in zip(row, widths)) for row in (head, *rows))


def is_moe(fig: Figure) -> bool:
    from backend.roofline.model_configs import sim_shape
    return getattr(sim_shape(fig.model), "num_experts", 0) > 0


def summary_lines(results: list[Result], label: str) -> list[str]:
    """Median and worst error of each set, over all its figures and then its dense and its MoE ones apart."""
    lines = []
    for name, chosen in (("held-out", [r for r in results if is_held_out(r.figure)]),
                         ("fitted", [r for r in results if not is_held_out(r.figure)])):
        median, worst, n = stats(chosen)
        lines.append(f"{label}: {name} set: median |error| {median:.1f}%, worst {worst:.1f}% over {n} figures"
                     + (f" ({len(chosen) - n} not expressible)" if len(chosen) > n else ""))
        for kind, part in (("dense", [r for r in chosen if not is_moe(r.figure)]),
                           ("MoE", [r for r in chosen if is_moe(r.figure)])):
            median, worst, n = stats(part)
            if n:
                lines.append(f"{label}:   {name}, {kind} only: median |error| {median:.1f}%, worst {worst:.1f}% "
                             f"over {n} figures")
    return lines


def run_all(model_for=None) -> list[Result]:
    """Every figure simulated; model_for(fig) gives the terms to price it with (None: the profile's own)."""
    return [simulate(fig, model_for(fig) if model_for else None) for fig in FIGURES]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fit", action="store_true", help="fit the cost-model terms on the fitted set, then rerun")
    # "shared+attn-fixed+pcie+efu-by-precision" is what `--structure select --among shared+attn-fixed,
    # shared+attn-fixed+efu-by-precision,shared+attn-fixed+link-latency+efu-by-precision,
    # shared+attn-fixed+pcie+efu-by-precision,shared+attn-fixed+link-latency+pcie+efu-by-precision,
    # shared+attn-fixed+link-latency+pcie` chose on 2026-12-02 over the 76 fitted figures (5-fold cross-validation on
    # the fitted set, median out-of-fold error: 17.2%, 12.7%, 12.4%, 10.6%, 13.7%, 11.3%); earlier runs, their traces
    # recorded at the terms before: shared 17.0%, shared+attn-fixed 14.0%, shared+efu-rows 15.7%, both 14.9%; shared
    # 15.5%, gpu 18.8%, precision 17.1%, gpu+efu 18.7%, precision+efu 15.8%, shared+efu-by-precision 15.9%,
    # gpu+efu-by-precision 20.3%
    # 2026-12-05, engines as a dimension (the traces recorded at the shipped terms of 12-02, the same 76 figures):
    # shared+attn-fixed+pcie+efu-by-precision 14.2% median, 77.6% worst out of fold; with each engine family's own
    # step, request and layer costs (+engine) 13.6%, 73.3%; with its collectives' fixed-cost multiple too
    # (+engine-links) 13.6% (13.56 against 13.64), 73.2%: chosen, and the profiles carry its terms
    parser.add_argument("--structure", default="shared+attn-fixed+pcie+efu-by-precision+engine-links",
                        choices=("select", *STRUCTURE_NAMES),
                        help="which figures share efficiencies in the fit (select: by cross-validation on the fitted set)")
    parser.add_argument("--among", default="",
                        help="with --structure select: only these structures, comma-separated (default: all)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="fit this many times, each round's traces recorded at the previous round's terms (the fit "
                             "is first-order around the terms the traces were recorded with)")
    parser.add_argument("--markdown", action="store_true", help="print the tables as markdown as well")
    add_readme_flag(parser)
    args = parser.parse_args()
    before = run_all()
    print(table(before))
    print("\n".join(summary_lines(before, "profiles' terms")))
    for r in before:
        if r.simulated is None:
            print(f"not expressible: {r.figure.id} ({r.figure.model} on {r.figure.profile}): {r.reason}")
    if args.markdown:
        print(table(before, markdown=True))
    if not args.fit:
        return readme_report(before, "profiles' terms", "", args.readme)
    from backend.sim.published_fit import fit_traces, record_all, select_structure, terms_report
    traces = record_all([f for f in FIGURES if not is_held_out(f)], simulate)
    structure = args.structure
    if structure == "select":
        among = [n for n in args.among.split(",") if n] or None
        structure, scores = select_structure(traces, among)
        print("\nfit structures, 5-fold cross-validated on the fitted set only (median, worst |error|):")
        for name, (median, worst) in scores.items():
            print(f"  {name}: {median:.1f}%, {worst:.1f}%" + ("   <- chosen" if name == structure else ""))
    # the final fit also starts from the terms the traces were recorded with (the profiles' own, fitted on this set)
    fit = fit_traces(traces, structure, starts=(traces[0].base_terms,))
    for _ in range(args.rounds - 1):   # re-linearize around the fitted terms (fitted set only), and fit again
        traces = record_all([f for f in FIGURES if not is_held_out(f)], lambda f, fit=fit: simulate(f, fit.model_for(f)))
        fit = fit_traces(traces, structure, starts=(traces[0].base_terms,))
    after = run_all(fit.model_for)
    print()
    print(terms_report(fit))
    print(table(after))
    print("\n".join(summary_lines(after, "fitted terms")))
    if args.markdown:
        print(table(after, markdown=True))
    return readme_report(after, "fitted terms", terms_report(fit), args.readme)


def bullet(line: str) -> str:
    """A summary line as a Markdown bullet; the dense and MoE lines (indented) under their set's."""
    return f"{'  ' if line.startswith('   ') else ''}- {line.strip()}"


def readme_report(results: list[Result], label: str, terms: str, readme: bool) -> int:
    """With --readme, the errors and the markdown table into bench/README.md (printed above already)."""
    if readme:
        lines = [measured_line(), "", f"The simulator at the {label}.", *(["", "```", terms, "```"] if terms else []),
                 "", *map(bullet, (line.removeprefix(f"{label}:") for line in summary_lines(results, label))), "",
                 table(results, markdown=True)]
        write_table("sim_vs_published", "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
