"""backend/sim/band_rules.py: a rule's text, pooling a small group into its parent (threshold and shrinkage), the
symmetric band, the choice by leave-one-out, and that the choice bench.sim_bands makes sees the fitted figures only."""
from __future__ import annotations

import pytest

from backend.sim import band_rules, bands
from backend.sim.band_rules import Grouping, Pooling, Quantile, Rule
from backend.sim.bands import Regime, Residual
from backend.sim.published_figures import FIGURES, is_held_out

PREFILL_FP8 = (Regime.PREFILL, Regime.LOW_PRECISION)


def rows(regimes: tuple[Regime, ...], values: list[float], tag: str = "") -> list[Residual]:
    return [Residual(f"X{tag}{i}", "ttft_ms", regimes, 1.0, 1.0, v) for i, v in enumerate(values)]


def spread(n: int, scale: float, shift: float = 0.0) -> list[float]:
    return [shift + scale * (2 * i / (n - 1) - 1) for i in range(n)]


def test_a_rule_reads_back_from_its_text_and_the_table_keeps_it(tmp_path):
    rule = Rule(Grouping.CELL, Pooling.SHRINK, 10, Quantile.EMPIRICAL, symmetric=True)
    assert Rule.parse(rule.text) == rule and Rule.parse(band_rules.FIRST.text) == band_rules.FIRST
    with pytest.raises(ValueError):
        Rule.parse("cell shrink=10 empirical lopsided")
    path = tmp_path / "bands.csv"
    bands.write_table(path, rows((Regime.PREFILL,), [0.1, -0.1]), ["made here"], rule)
    back = bands.read_table(path)
    assert back.rule == rule and back.provenance == ["made here"] and len(back.residuals) == 2
    bands.write_table(path, rows((Regime.PREFILL,), [0.1, -0.1]), ["made here"])
    assert bands.read_table(path).rule is None   # no rule line: the first rule (band_rules.FIRST)


def test_a_cell_with_too_few_residuals_takes_its_phases_band():
    # 40 plain prefills within +-0.1, 3 fp8 prefills far out: a threshold of 10 ignores the 3
    table = rows((Regime.PREFILL,), spread(40, 0.1)) + rows(PREFILL_FP8, [0.8, 0.9, 1.0], "f")
    rule = Rule(Grouping.CELL, Pooling.THRESHOLD, 10, Quantile.EMPIRICAL)
    low, high, said = band_rules.edges_of(rule, table, PREFILL_FP8, 0.8)
    phase = band_rules.edges_of(rule, table, (Regime.PREFILL,), 0.8)
    assert said == (Regime.PREFILL,) and (low, high) == phase[:2]
    # with 3 residuals allowed the cell's own band is used, and it sits where they are
    own = band_rules.edges_of(Rule(Grouping.CELL, Pooling.THRESHOLD, 3, Quantile.EMPIRICAL), table, PREFILL_FP8, 0.8)
    assert own[2] == PREFILL_FP8 and own[0] > 0.7


def test_shrinkage_moves_a_small_cell_toward_its_parent_by_its_share():
    table = rows((Regime.PREFILL,), spread(40, 0.1)) + rows(PREFILL_FP8, [0.8, 0.9, 1.0], "f")
    k = 10
    rule = Rule(Grouping.CELL, Pooling.SHRINK, k, Quantile.EMPIRICAL)
    low, high, said = band_rules.edges_of(rule, table, PREFILL_FP8, 0.8)
    parent = band_rules.edges_of(rule, table, (Regime.PREFILL,), 0.8)
    own = band_rules.own_edges([0.8, 0.9, 1.0], 0.8, Quantile.EMPIRICAL, False)
    w = 3 / (3 + k)
    assert said == PREFILL_FP8
    assert low == pytest.approx(w * own[0] + (1 - w) * parent[0])
    assert high == pytest.approx(w * own[1] + (1 - w) * parent[1])
    assert parent[1] < high < own[1]   # pulled most of the way back to the phase's band


def test_a_symmetric_band_is_plus_or_minus_the_quantile_of_the_absolute_residual():
    values = [-0.3, -0.1, 0.05, 0.1, 0.2, 0.4, 0.5, 0.6, 0.7, 0.9]
    low, high = band_rules.own_edges(values, 0.8, Quantile.EMPIRICAL, symmetric=True)
    # |values| sorted, at 0.8 x 9 = 7.2: a fifth of the way from the 8th (0.6) to the 9th (0.7)
    assert low == -high and high == pytest.approx(0.6 + 0.2 * (0.7 - 0.6))
    low, high = band_rules.own_edges(values, 0.8, Quantile.EMPIRICAL, symmetric=False)
    assert high > -low   # the asymmetric band follows the simulator's bias


def test_select_takes_the_rule_closest_to_the_level_by_leave_one_out():
    table = rows((Regime.SATURATION,), spread(60, 0.3))
    wide, tight = band_rules.FIRST, Rule(Grouping.PHASE, Pooling.THRESHOLD, 10, Quantile.EMPIRICAL)
    chosen, scores = band_rules.select(table, 0.8, (wide, tight))
    assert set(scores) == {wide, tight}
    assert chosen == min(scores, key=lambda r: abs(scores[r].coverage - 0.8))
    outer, folds = band_rules.nested(table, 0.8, (wide, tight))
    assert len(folds) == band_rules.OUTER and outer.n == len(table)


def test_the_rule_is_chosen_on_the_fitted_figures_alone(monkeypatch):
    """bench.sim_bands --select: every residual the choice and its nested check look at, to make a band or to score
    one, is a fitted figure's; no held-out figure's name reaches them."""
    from bench import sim_bands
    seen: set[str] = set()
    score = band_rules.score

    def spying(rule, train, test, level):
        seen.update(r.figure for r in train + test)
        return score(rule, train, test, level)
    monkeypatch.setattr(band_rules, "score", spying)
    written = []
    monkeypatch.setattr(bands, "write_table", lambda *args: written.append(args))
    assert sim_bands.select(0.8) == 0
    held_out = {f.id for f in FIGURES if is_held_out(f)}
    assert seen and not seen & held_out and seen == {r.figure for r in bands.shipped().residuals}
    assert written and written[0][3] == band_rules.Rule.parse(written[0][3].text)


def test_the_shipped_rule_is_what_select_chooses_on_the_shipped_residuals_and_it_is_calibrated_there():
    table = bands.shipped()
    chosen, scores = band_rules.select(table.residuals, bands.DEFAULT_LEVEL)
    assert table.rule == chosen   # `python -m bench.sim_bands --select` after the residuals last changed
    assert 0.7 <= scores[chosen].coverage <= 0.9
    assert scores[chosen].median_width < scores[band_rules.FIRST].median_width   # narrower than the first rule's
