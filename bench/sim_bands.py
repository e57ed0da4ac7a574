"""The simulator's bands: made from the fitted published figures, measured on the held-out ones.

    python -m bench.sim_bands --write     # regenerate profiles/bands.csv: the fitted set's figures, each predicted
                                          # by a 5-fold cross-validated fit that did not see it (the shipped
                                          # structure; each fold's terms run through the full simulator)
    python -m bench.sim_bands [--readme]  # the held-out figures at the profiles' terms: how many fall inside
                                          # their 80% band, and how wide the bands are

The held-out figures play no part in --write (backend/sim/bands.py says how a band is made from the table);
the second command only reads them. The simulated figures are this machine's simulator, not a GPU.
"""
from __future__ import annotations

import argparse
import datetime
import math
import statistics
import sys

from backend.sim import bands
from backend.sim.published_figures import FIGURES, is_held_out
from bench.common import add_readme_flag, measured_line, write_table
from bench.sim_vs_published import Result, simulate

STRUCTURE = "shared+attn-fixed+pcie+efu-by-precision+engine-links"   # the shipped profiles' fit (bench/sim_vs_published.py)


def cross_validated(structure: str = STRUCTURE) -> list[bands.Residual]:
    """Each fitted figure predicted by the fit of the other four folds (fold i mod 5, as published_fit's)."""
    from backend.sim.published_fit import FOLDS, fit_traces, record_all
    traces = record_all([f for f in FIGURES if not is_held_out(f)], simulate)
    out = []
    for fold in range(FOLDS):
        fit = fit_traces([t for i, t in enumerate(traces) if i % FOLDS != fold], structure)
        for t in (t for i, t in enumerate(traces) if i % FOLDS == fold):
            fig = t.figure
            result = simulate(fig, fit.model_for(fig))
            if result.simulated is None:
                continue
            out.append(bands.Residual(fig.id, fig.metric, bands.published_regimes(fig), fig.value, result.simulated,
                                      bands.time_residual(fig.metric, fig.value, result.simulated)))
        print(f"fold {fold + 1}/{FOLDS} done", file=sys.stderr)
    return sorted(out, key=lambda r: int(r.figure[1:]))


def write(structure: str) -> int:
    residuals = cross_validated(structure)
    provenance = [
        "The simulator's cross-validated residuals on the fitted published figures (backend/sim/bands.py reads them).",
        f"Made {datetime.date.today()} by `python -m bench.sim_bands --write`: structure {structure!r}, 5 folds "
        f"(figure i of the fitted set in fold i mod 5), each fold's terms run through the full simulator.",
        "residual = log(measured time / predicted time); a rate's (tok_s*) is the inverse ratio's. The held-out set "
        "(every third figure) is not in this table.",
    ]
    bands.write_table(bands.TABLE, residuals, provenance)
    errors = [abs(math.expm1(r.residual)) * 100 for r in residuals]
    print(f"wrote {bands.TABLE}: {len(residuals)} residuals, cross-validated median |error| "
          f"{statistics.median(errors):.1f}%, worst {max(errors):.1f}%")
    return 0


def band_of(result: Result, table: bands.BandTable, level: float) -> bands.Band:
    fig = result.figure
    edges = table.edges(bands.published_regimes(fig), level)
    return edges.of_rate(result.simulated) if fig.metric in bands.RATE_METRICS else edges.of_time(result.simulated)


def coverage_lines(results: list[Result], table: bands.BandTable, level: float) -> list[str]:
    """Inside-the-band share and median width over the results, all and by phase regime."""
    rows = []
    groups = [("all held-out", results)] + [
        (regime.value, [r for r in results if regime in bands.published_regimes(r.figure)])
        for regime in (*bands.PHASES, bands.Regime.MOE, bands.Regime.TP, bands.Regime.LOW_PRECISION)]
    for name, chosen in groups:
        chosen = [r for r in chosen if r.simulated is not None]
        if not chosen:
            rows.append(f"| {name} | 0 | | | | |")
            continue
        inside = [band_of(r, table, level).contains(r.figure.value) for r in chosen]
        widths = [band_of(r, table, level).width(r.simulated) * 100 for r in chosen]
        errors = [abs(r.error_pct) for r in chosen]
        rows.append(f"| {name} | {len(chosen)} | {sum(inside)} ({sum(inside) / len(chosen):.0%}) | "
                    f"{statistics.median(widths):.0f}% | {statistics.median(errors):.1f}% | {max(errors):.1f}% |")
    head = [f"| figures | n | inside the {level:.0%} band | median band width | median abs error | worst |",
            "|---|---|---|---|---|---|"]
    return head + rows


def regime_lines(table: bands.BandTable, level: float) -> list[str]:
    lines = [f"| regime | residuals | {level:.0%} band (time ratio) |", "|---|---|---|"]
    for regime in bands.Regime:
        values = table.of(regime)
        edges = bands.conformal_edges(values, level)
        text = f"x{math.exp(edges[0]):.2f} to x{math.exp(edges[1]):.2f}" if edges else "too few: not used"
        lines.append(f"| {regime.value} | {len(values)} | {text} |")
    return lines


def leave_one_out(table: bands.BandTable, level: float) -> tuple[int, int, float]:
    """The rule on the table itself: each fitted figure's residual against the band the other residuals make
    (inside, of how many, median width as a fraction of the centre): the rule's own conservatism, seen
    without the held-out figures."""
    inside, widths = 0, []
    for i, r in enumerate(table.residuals):
        others = bands.BandTable(table.residuals[:i] + table.residuals[i + 1:], [])
        edges = others.edges(r.regimes, level)
        inside += edges.low <= r.residual <= edges.high
        widths.append(math.exp(edges.high) - math.exp(edges.low))
    return inside, len(table.residuals), statistics.median(widths)


def measure(level: float, readme: bool) -> int:
    table = bands.shipped()
    results = [simulate(f) for f in FIGURES if is_held_out(f)]
    lines = [measured_line(), "",
             f"Bands from profiles/bands.csv ({len(table.residuals)} cross-validated residuals of the fitted set); "
             f"the held-out figures at the profiles' terms. The held-out coverage is read only here, and was first "
             f"read after the band's rule (split-conformal per regime, the widest edge over a figure's regimes) "
             f"was fixed; nothing was tuned on it.", "", *coverage_lines(results, table, level), ""]
    inside, n, width = leave_one_out(table, level)
    lines += [f"The rule on the fitted set's own residuals, each left out of the band it is checked against: "
              f"{inside} of {n} inside ({inside / n:.0%}), median width {width:.0%} of the centre.", "",
              *regime_lines(table, level)]
    text = "\n".join(lines)
    print(text)
    if readme:
        write_table("sim_bands", text)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="regenerate profiles/bands.csv from the fitted set")
    parser.add_argument("--structure", default=STRUCTURE, help="the fit's structure (bench/sim_vs_published.py)")
    parser.add_argument("--level", type=float, default=bands.DEFAULT_LEVEL, help="the bands' level (default 0.8)")
    add_readme_flag(parser)
    args = parser.parse_args()
    if args.write:
        return write(args.structure)
    return measure(args.level, args.readme)


if __name__ == "__main__":
    sys.exit(main())
