"""The candidate rules that turn the fitted set's residuals (profiles/bands.csv) into a band, and the choice among them.

A rule says four things:
  - grouping: whose residuals make a figure's band. WIDEST: each of its regimes' own band, the widest edge on each
    side (the first rule, 2026-12-05: every regime a figure belongs to widens it); MEAN: the same bands, their
    edges averaged; PHASE: its phase regime's alone (prefill, batch-1 decode, batched decode, saturation); CELL:
    the residuals of exactly its combination of regimes (a TP > 1 fp8 prefill's are the TP > 1 fp8 prefills').
  - pooling, for a group with few residuals: THRESHOLD n: a group with fewer than n takes its parent's band
    (a cell's parent is its phase, a phase's or a regime's is every residual); SHRINK k: a group of n residuals
    takes n / (n + k) of its own edges and the rest of its parent's (shrinkage: a small group moves its band
    only as far as its residuals justify).
  - quantile: CONFORMAL, the finite-sample order statistics ((n + 1)(1 -+ L)/2: wider when n is small), or
    EMPIRICAL, the residuals' interpolated (1 - L)/2 and (1 + L)/2 quantiles.
  - shape: asymmetric (the log ratio's two quantiles: the simulator's bias shifts the band) or symmetric (plus or
    minus the L quantile of |log ratio| around the simulated figure).

`select` chooses among CANDIDATES by leave-one-out on the residuals it is given (bench/sim_bands.py gives it the
fitted set's, never a held-out figure): the rule whose coverage of its left-out residuals is closest to L, the
narrowest (median width) among equally close ones. `nested` checks that choice itself: the selection is run inside
each of five outer folds and the chosen rule's band is scored on the fold it did not see (choosing among many rules
by one noisy coverage flatters the winner; the outer folds say by how much). A looser criterion (any rule within
one binomial standard error of L, the narrowest of them) was tried too: on the fitted set its nested coverage was
74% against 76% for this one (2026-12-05), so this one stays. No torch and no simulator here.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from enum import Enum

from backend.sim.band_regimes import PHASES, RATE_METRICS, Regime, Residual


class Grouping(Enum):
    WIDEST = "widest"
    MEAN = "mean"
    PHASE = "phase"
    CELL = "cell"


class Pooling(Enum):
    THRESHOLD = "threshold"
    SHRINK = "shrink"


class Quantile(Enum):
    CONFORMAL = "conformal"
    EMPIRICAL = "empirical"


@dataclass(slots=True, frozen=True)
class Rule:
    grouping: Grouping
    pooling: Pooling
    n: int                     # THRESHOLD: the fewest residuals a group needs; SHRINK: k in n / (n + k)
    quantile: Quantile
    symmetric: bool = False

    @property
    def text(self) -> str:
        """One line, as profiles/bands.csv keeps it: 'widest threshold=9 conformal asymmetric'."""
        return (f"{self.grouping.value} {self.pooling.value}={self.n} {self.quantile.value} "
                f"{'symmetric' if self.symmetric else 'asymmetric'}")

    @classmethod
    def parse(cls, text: str) -> Rule:
        """The inverse of `text` (ValueError: not a rule)."""
        grouping, pooling, quantile, shape = text.split()
        kind, n = pooling.split("=")
        if shape not in ("symmetric", "asymmetric"):
            raise ValueError(f"not a band's shape: {shape!r}")
        return cls(Grouping(grouping), Pooling(kind), int(n), Quantile(quantile), shape == "symmetric")


# the first rule (2026-12-05): each regime's split-conformal band, the widest edge over a figure's regimes, a regime
# too small for both order statistics (fewer than 9 residuals at 80%) left out; a table without a rule line has it
FIRST = Rule(Grouping.WIDEST, Pooling.THRESHOLD, 1, Quantile.CONFORMAL)

CANDIDATES = tuple(Rule(g, p, n, q, s) for g in Grouping for p, ns in ((Pooling.THRESHOLD, (10, 20, 30)),
                                                                      (Pooling.SHRINK, (5, 10, 20)))
                   for n in ns for q in Quantile for s in (False, True)) + (FIRST,)


def _quantile(ordered: list[float], p: float) -> float:
    """The interpolated p quantile of sorted values (numpy's 'linear')."""
    x = p * (len(ordered) - 1)
    i = math.floor(x)
    return ordered[i] if i + 1 >= len(ordered) else ordered[i] + (x - i) * (ordered[i + 1] - ordered[i])


def own_edges(values: list[float], level: float, quantile: Quantile, symmetric: bool) -> tuple[float, float] | None:
    """One group's band from its residuals alone (None: too few for it)."""
    n = len(values)
    if symmetric:
        ordered = sorted(abs(v) for v in values)
        if quantile is Quantile.CONFORMAL:
            k = math.ceil(round((n + 1) * level, 9))
            return None if k > n else (-ordered[k - 1], ordered[k - 1])
        return None if n < 2 else (-_quantile(ordered, level), _quantile(ordered, level))
    ordered = sorted(values)
    if quantile is Quantile.CONFORMAL:
        # rounded before floor and ceil: (1 - 0.8) / 2 x 20 is 1.9999999999999996 in floating point, not 2
        lower, upper = math.floor(round((n + 1) * (1 - level) / 2, 9)), math.ceil(round((n + 1) * (1 + level) / 2, 9))
        return None if lower < 1 or upper > n else (ordered[lower - 1], ordered[upper - 1])
    return None if n < 2 else (_quantile(ordered, (1 - level) / 2), _quantile(ordered, (1 + level) / 2))


def _group(residuals: list[Residual], regimes: tuple[Regime, ...]) -> list[float]:
    """The residuals of every row that has all of `regimes` (none: every row)."""
    return [r.residual for r in residuals if all(x in r.regimes for x in regimes)]


def _cell(residuals: list[Residual], regimes: tuple[Regime, ...]) -> list[float]:
    """The residuals of the rows whose regimes are exactly `regimes`."""
    return [r.residual for r in residuals if set(r.regimes) == set(regimes)]


def _pooled(rule: Rule, own: list[float], parent: tuple[float, float], level: float):
    """A group's edges under the rule's pooling, given its parent's, and whether its own residuals had a say."""
    edges = own_edges(own, level, rule.quantile, rule.symmetric)
    if edges is None or (rule.pooling is Pooling.THRESHOLD and len(own) < rule.n):
        return parent, False
    if rule.pooling is Pooling.THRESHOLD:
        return edges, True
    w = len(own) / (len(own) + rule.n)
    return (w * edges[0] + (1 - w) * parent[0], w * edges[1] + (1 - w) * parent[1]), True


def edges_of(rule: Rule, residuals: list[Residual], regimes: tuple[Regime, ...],
             level: float) -> tuple[float, float, tuple[Regime, ...]] | None:
    """A figure of `regimes` under `rule`, from `residuals`: (low, high, the regimes whose residuals had a say:
    (ALL,) for the pooled band), or None when even every residual together is too few."""
    root = own_edges(_group(residuals, ()), level, rule.quantile, rule.symmetric)
    if root is None:
        return None
    regimes = tuple(r for r in regimes if r is not Regime.ALL)
    phase = tuple(r for r in regimes if r in PHASES)[:1]
    if rule.grouping in (Grouping.PHASE, Grouping.CELL):
        edges, said = root, (Regime.ALL,)
        if phase:
            edges, own = _pooled(rule, _group(residuals, phase), root, level)
            said = phase if own else said
        if rule.grouping is Grouping.CELL and len(regimes) > len(phase):
            edges, own = _pooled(rule, _cell(residuals, regimes), edges, level)
            said = regimes if own else said
        return (*edges, said)
    found = []
    for r in regimes:
        edges, own = _pooled(rule, _group(residuals, (r,)), root, level)
        if own:
            found.append((r, edges))
    if not found:
        return (*root, (Regime.ALL,))
    lows, highs = [e[0] for _, e in found], [e[1] for _, e in found]
    if rule.grouping is Grouping.MEAN:
        return statistics.fmean(lows), statistics.fmean(highs), tuple(r for r, _ in found)
    return min(lows), max(highs), tuple(r for r, _ in found)


def width(residual: Residual, low: float, high: float) -> float:
    """The band's width as a fraction of the simulated figure (a rate's band is its time's inverted)."""
    return math.exp(-low) - math.exp(-high) if residual.metric in RATE_METRICS else math.exp(high) - math.exp(low)


@dataclass(slots=True, frozen=True)
class Score:
    inside: int
    n: int
    median_width: float        # a fraction of the simulated figure

    @property
    def coverage(self) -> float:
        return self.inside / self.n if self.n else math.nan


def score(rule: Rule, train: list[Residual], test: list[Residual], level: float) -> tuple[int, list[float]]:
    """How many of `test` fall inside the band `train` makes under `rule`, and each one's band width."""
    inside, widths = 0, []
    for r in test:
        edges = edges_of(rule, train, r.regimes, level)
        if edges is None:
            continue
        inside += edges[0] <= r.residual <= edges[1]
        widths.append(width(r, edges[0], edges[1]))
    return inside, widths


def leave_one_out(rule: Rule, residuals: list[Residual], level: float) -> Score:
    inside, widths = 0, []
    for i, r in enumerate(residuals):
        got, w = score(rule, residuals[:i] + residuals[i + 1:], [r], level)
        inside, widths = inside + got, widths + w
    return Score(inside, len(widths), statistics.median(widths) if widths else math.nan)


def select(residuals: list[Residual], level: float, candidates=CANDIDATES) -> tuple[Rule, dict[Rule, Score]]:
    """The candidate whose leave-one-out coverage is closest to `level`, the narrowest (median width) among equally
    close ones, with every candidate's score."""
    scores = {rule: leave_one_out(rule, residuals, level) for rule in candidates}
    return min(candidates, key=lambda rule: (abs(scores[rule].coverage - level), scores[rule].median_width)), scores


OUTER = 5


def nested(residuals: list[Residual], level: float, candidates=CANDIDATES) -> tuple[Score, list[Rule]]:
    """The selection scored on what it did not see: residual i in outer fold i mod OUTER; in each fold `select` runs
    on the others, and its rule's band (made from the others) is checked on the fold. The outer coverage and
    median width, and the rule each fold chose."""
    inside, widths, chosen = 0, [], []
    for fold in range(OUTER):
        train = [r for i, r in enumerate(residuals) if i % OUTER != fold]
        test = [r for i, r in enumerate(residuals) if i % OUTER == fold]
        rule, _ = select(train, level, candidates)
        got, w = score(rule, train, test, level)
        inside, widths = inside + got, widths + w
        chosen.append(rule)
    return Score(inside, len(widths), statistics.median(widths)), chosen
