"""The simulator's bands: made from the fitted published figures, measured on the held-out ones.

    python -m bench.sim_bands --write     # regenerate profiles/bands.csv: the fitted set's figures, each predicted
                                          # by a 5-fold cross-validated fit that did not see it (the shipped
                                          # structure; each fold's terms run through the full simulator), then
                                          # choose the band's rule on them (what --select does)
    python -m bench.sim_bands --select    # choose the band's rule again on the table's residuals (seconds): the
                                          # candidates of backend/sim/band_rules.py by leave-one-out, the choice
                                          # itself checked by nested cross-validation; the rule goes in the table
    python -m bench.sim_bands [--readme]  # the held-out figures at the profiles' terms: how many fall inside
                                          # their 80% band, and how wide the bands are

The held-out figures play no part in --write or --select (select_rule is handed the table's residuals, which are
the fitted set's alone); the third command only reads them. The simulated figures are this machine's simulator,
not a GPU.
"""
from __future__ import annotations

import argparse
import datetime
import math
import statistics
import sys

from backend.sim import band_rules, bands
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
    rule, lines = select_rule(residuals, bands.DEFAULT_LEVEL)
    bands.write_table(bands.TABLE, residuals, provenance + [rule_provenance(rule, bands.DEFAULT_LEVEL)], rule)
    print("\n".join(lines))
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


def select_rule(residuals: list[bands.Residual], level: float) -> tuple[band_rules.Rule, list[str]]:
    """The band's rule chosen on `residuals` (the fitted set's: the table's rows), and the report of the choice:
    the candidates closest to `level` by leave-one-out, the first rule, and the nested cross-validation."""
    rule, scores = band_rules.select(residuals, level)
    outer, chosen = band_rules.nested(residuals, level)
    ranked = sorted(scores, key=lambda r: (abs(scores[r].coverage - level), scores[r].median_width))
    shown = list(dict.fromkeys(ranked[:8] + [band_rules.FIRST]))
    lines = [f"| rule (grouping, pooling, quantile, shape) | left-out residuals inside the {level:.0%} band | "
             f"median width |", "|---|---|---|"]
    for r in shown:
        s = scores[r]
        mark = " (chosen)" if r == rule else " (the first rule)" if r == band_rules.FIRST else ""
        lines.append(f"| {r.text}{mark} | {s.inside} of {s.n} ({s.coverage:.0%}) | {s.median_width:.0%} |")
    folds = ", ".join(r.text for r in chosen)
    return rule, [
        f"The band's rule, chosen on the {len(residuals)} fitted residuals alone among {len(scores)} candidates "
        f"(backend/sim/band_rules.py): each residual left out of the band the others make, the rule whose coverage is "
        f"closest to {level:.0%} and the narrowest of equally close ones. The {len(shown) - 1} closest, and the "
        f"first rule:", "", *lines, "",
        f"The choice itself, checked by nested cross-validation on the fitted set (the selection run on four fifths, "
        f"its rule's band scored on the fifth it did not see): {outer.inside} of {outer.n} inside "
        f"({outer.coverage:.0%}), median width {outer.median_width:.0%}; the folds chose {folds}."]


def rule_provenance(rule: band_rules.Rule, level: float) -> str:
    return (f"Rule chosen {datetime.date.today()} by `python -m bench.sim_bands --select` on these residuals alone "
            f"(leave-one-out coverage closest to {level:.0%}, then the narrowest): {rule.text}.")


def select(level: float) -> int:
    table = bands.shipped()
    rule, lines = select_rule(table.residuals, level)
    provenance = [p for p in table.provenance if not p.startswith("Rule chosen")] + [rule_provenance(rule, level)]
    bands.write_table(bands.TABLE, table.residuals, provenance, rule)
    print("\n".join(lines) + f"\n\nwrote the rule into {bands.TABLE}: {rule.text}")
    return 0


def cell_lines(table: bands.BandTable, level: float) -> list[str]:
    """Each combination of regimes in the table: its residuals and the band a figure of it gets by the rule."""
    cells = sorted({r.regimes for r in table.residuals}, key=lambda c: [x.value for x in c])
    lines = [f"| regimes | residuals | {level:.0%} band (time ratio) | made of |", "|---|---|---|---|"]
    for cell in cells:
        n = sum(r.regimes == cell for r in table.residuals)
        e = table.edges(cell, level)
        lines.append(f"| {', '.join(x.value for x in cell)} | {n} | x{math.exp(e.low):.2f} to x{math.exp(e.high):.2f} "
                     f"| {', '.join(x.value for x in e.regimes)} |")
    return lines


def measure(level: float, readme: bool) -> int:
    table = bands.shipped()
    rule = table.rule or band_rules.FIRST
    _, selection = select_rule(table.residuals, level)
    results = [simulate(f) for f in FIGURES if is_held_out(f)]
    lines = [measured_line(), "", *selection, "",
             f"The held-out figures at the profiles' terms, each in the band the table's rule ({rule.text}) makes of "
             f"profiles/bands.csv ({len(table.residuals)} cross-validated residuals of the fitted set). The held-out "
             f"coverage is read only here, once, after the rule was chosen; nothing was tuned on it.", "",
             *coverage_lines(results, table, level), "", *cell_lines(table, level)]
    text = "\n".join(lines)
    print(text)
    if readme:
        write_table("sim_bands", text)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="regenerate profiles/bands.csv from the fitted set")
    parser.add_argument("--select", action="store_true", help="choose the band's rule again on profiles/bands.csv")
    parser.add_argument("--structure", default=STRUCTURE, help="the fit's structure (bench/sim_vs_published.py)")
    parser.add_argument("--level", type=float, default=bands.DEFAULT_LEVEL, help="the bands' level (default 0.8)")
    add_readme_flag(parser)
    args = parser.parse_args()
    if args.write:
        return write(args.structure)
    if args.select:
        return select(args.level)
    return measure(args.level, args.readme)


if __name__ == "__main__":
    sys.exit(main())
