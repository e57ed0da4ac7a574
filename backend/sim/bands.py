"""How far to trust a simulated figure: an interval from the simulator's cross-validated errors on published figures.

profiles/bands.csv holds one row per figure of the *fitted* published set (backend/sim/published_figures.py;
the held-out set never enters it): the figure's value predicted by a fit that did not see it (5-fold
cross-validation, the shipped structure, each fold's terms run through the full simulator), and the residual
log(measured time / predicted time) -- a rate (tokens/s) enters as its inverse, so every residual says
"the real step took e^r times the simulated one". `python -m bench.sim_bands --write` regenerates it.

Each residual belongs to its figure's regimes (Regime, in band_regimes): one by what the figure measures (prefill,
batch-1 decode, batched decode, throughput at saturation) and any of MoE, TP > 1 and FP8/FP4 that
describe its setup. How a figure's band is made of the residuals is the table's rule (its `# rule:` line,
backend/sim/band_rules.py), chosen on the fitted residuals alone by `python -m bench.sim_bands --select`
(2026-12-05: the residuals of exactly the figure's combination of regimes, shrunk toward its phase's and
those toward every residual's, plus or minus the empirical 80% quantile of |log ratio|). A table without a
rule line takes the first rule: each regime's split-conformal band, the widest edge over the figure's regimes.

No torch and no simulator here: the table, the regimes and the arithmetic.
"""
from __future__ import annotations

import csv
import math
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from backend.summary import Band, Summary
# the regimes and the residual row live in band_regimes, which band_rules shares; they are this module's names too
from backend.sim.band_regimes import PHASES, RATE_METRICS, Regime, Residual  # noqa: F401
from backend.sim.band_rules import FIRST, Rule, edges_of
from profiles import HERE as PROFILES

TABLE = PROFILES / "bands.csv"
DEFAULT_LEVEL = 0.8
COLUMNS = ("figure", "metric", "regimes", "measured", "predicted", "residual")


# the level a simulated run's bands are made at: 80%, except inside `at_level` (the planner's --confidence reaches
# the runs it makes, in its worker processes too, without a run setting a user's own runs would never change)
_LEVEL: ContextVar[float] = ContextVar("band_level", default=DEFAULT_LEVEL)


@contextmanager
def at_level(level: float):
    token = _LEVEL.set(level)
    try:
        yield
    finally:
        _LEVEL.reset(token)


def current_level() -> float:
    return _LEVEL.get()


@dataclass(slots=True, frozen=True)
class Edges:
    """A time ratio's interval: the real time lies in [centre x e^low, centre x e^high] at the table's level."""

    low: float
    high: float
    regimes: tuple[Regime, ...]           # the regimes whose bands made it (ALL: the pooled fallback)

    def of_time(self, value: float) -> Band:
        return Band(value * math.exp(self.low), value * math.exp(self.high))

    def of_rate(self, value: float) -> Band:
        """A rate (tokens/s) is the inverse of a time: its low edge comes from the time's high one."""
        return Band(value * math.exp(-self.high), value * math.exp(-self.low))


@dataclass(slots=True)
class BandTable:
    residuals: list[Residual]
    provenance: list[str]                 # the table's comment lines: how and when it was made
    rule: Rule | None = None              # how a band is made of the residuals (None: FIRST)

    def of(self, regime: Regime) -> list[float]:
        return [r.residual for r in self.residuals if regime is Regime.ALL or regime in r.regimes]

    def edges(self, regimes: tuple[Regime, ...], level: float = DEFAULT_LEVEL) -> Edges:
        """A figure of `regimes` at `level`, by the table's rule (backend/sim/band_rules.py)."""
        from backend.errors import InputError
        if not 0 < level < 1:
            raise InputError(f"a band's confidence must lie between 0 and 1, not {level}")
        found = edges_of(self.rule or FIRST, self.residuals, regimes, level)
        if found is None:
            raise InputError(f"profiles/bands.csv holds too few residuals for a {level:.0%} band")
        return Edges(*found)


RULE_LINE = "rule: "    # the comment line that names the table's rule: '# rule: cell shrink=10 empirical asymmetric'


def read_table(path: Path) -> BandTable:
    from backend.errors import InputError
    provenance, rows = [], []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"cannot read the simulator's band table {path}: {exc.strerror or exc}") from None
    provenance = [line[1:].strip() for line in lines if line.startswith("#")]
    reader = csv.DictReader(line for line in lines if line and not line.startswith("#"))
    try:
        rules = [Rule.parse(line[len(RULE_LINE):]) for line in provenance if line.startswith(RULE_LINE)]
        for row in reader:
            rows.append(Residual(row["figure"], row["metric"], tuple(Regime(x) for x in row["regimes"].split(";") if x),
                                 float(row["measured"]), float(row["predicted"]), float(row["residual"])))
    except (KeyError, ValueError) as exc:
        raise InputError(f"{path}: not a band table ({exc})") from None
    return BandTable(rows, [line for line in provenance if not line.startswith(RULE_LINE)], rules[0] if rules else None)


@lru_cache(maxsize=1)
def shipped() -> BandTable:
    return read_table(TABLE)


def write_table(path: Path, residuals: list[Residual], provenance: list[str], rule: Rule | None = None) -> None:
    lines = [f"# {line}" for line in provenance] + ([f"# {RULE_LINE}{rule.text}"] if rule else []) + [",".join(COLUMNS)]
    for r in residuals:
        lines.append(",".join([r.figure, r.metric, ";".join(x.value for x in r.regimes), f"{r.measured:.6g}",
                               f"{r.predicted:.6g}", f"{r.residual:.6f}"]))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


# ---- the published figures' regimes -------------------------------------------------------------------------------



def time_residual(metric: str, measured: float, predicted: float) -> float:
    """log(measured time / predicted time); a rate's is the inverse ratio's."""
    ratio = measured / predicted
    return -math.log(ratio) if metric in RATE_METRICS else math.log(ratio)


def setup_regimes(is_moe: bool, tp: int, weight_bits: float) -> tuple[Regime, ...]:
    """The regimes a deployment's setup adds, whatever the figure."""
    return ((Regime.MOE,) if is_moe else ()) + ((Regime.TP,) if tp > 1 else ()) + \
        ((Regime.LOW_PRECISION,) if weight_bits <= 8 else ())


def published_regimes(fig) -> tuple[Regime, ...]:
    """A published figure's regimes (backend.sim.published_figures.Figure)."""
    from backend.roofline.model_configs import sim_shape
    if fig.metric == "ttft_ms":
        phase = Regime.PREFILL
    elif fig.metric in RATE_METRICS:
        phase = Regime.SATURATION
    else:   # itl_ms, or e2e_ms of a fixed batch (32 or 128 prompt tokens against 128 output: decode's time)
        users = fig.concurrency if fig.kind == "closed" else fig.batch
        phase = Regime.BATCH1_DECODE if users <= 1 else Regime.BATCHED_DECODE
    bits = 8 if fig.precision in ("fp8", "fp4", "nvfp4", "mxfp4") else 16
    return (phase,) + setup_regimes(getattr(sim_shape(fig.model), "num_experts", 0) > 0, fig.tp, bits)


# ---- a simulated run's figures ------------------------------------------------------------------------------------

# which of a summary's figures carry a band, by the phase whose errors they share; rates are the inverse of a time
PREFILL_TIMES = ("ttft_mean_ms", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "cost_prefill_usd", "cost_per_m_input_usd")
PREFILL_RATES = ("prefill_tokens_per_s",)
DECODE_TIMES = ("tpot_mean_ms", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms", "itl_mean_ms", "itl_p50_ms", "itl_p90_ms",
                "itl_p99_ms", "e2e_mean_ms", "e2e_p50_ms", "e2e_p90_ms", "e2e_p99_ms", "cost_decode_usd",
                "cost_per_m_output_usd")
DECODE_RATES = ("decode_tokens_per_s",)
THROUGHPUT_TIMES = ("cost_per_m_output_wall_usd",)
THROUGHPUT_RATES = ("output_tokens_per_s", "total_tokens_per_s", "requests_per_s")
BATCH1 = 1.5    # a run whose decode steps average at most this many requests decodes at batch 1


def decode_regime(summary: Summary) -> Regime:
    steps, tokens = summary.decode_steps or 0, summary.decode_tokens or 0
    return Regime.BATCH1_DECODE if steps and tokens / steps <= BATCH1 else Regime.BATCHED_DECODE


def phase_edges(summary: Summary, setup: tuple[Regime, ...], level: float | None = None,
                table: BandTable | None = None) -> dict[str, Edges]:
    """The time ratios' edges of a run's prefill, decode and throughput figures (setup: setup_regimes)."""
    table, level = table or shipped(), level or current_level()
    decode = decode_regime(summary)
    throughput = Regime.SATURATION if decode is Regime.BATCHED_DECODE else Regime.BATCH1_DECODE
    return {label: table.edges((phase, *setup), level)
            for label, phase in (("prefill", Regime.PREFILL), ("decode", decode), ("throughput", throughput))}


FAMILIES = {"prefill": (PREFILL_TIMES, PREFILL_RATES), "decode": (DECODE_TIMES, DECODE_RATES),
            "throughput": (THROUGHPUT_TIMES, THROUGHPUT_RATES)}


def summary_bands(summary: Summary, setup: tuple[Regime, ...], level: float | None = None,
                  table: BandTable | None = None, requests=None) -> dict:
    """The flat figures that give `summary` its bands (merge them in: Summary.merged): every banded figure's
    {name}_low and {name}_high, band_level and band_regimes. `setup`: setup_regimes of the deployment.
    With the run's request records and SLOs, the SLO attainment and goodput get theirs (attainment_band)."""
    level = level or current_level()
    edges = phase_edges(summary, setup, level, table)
    out: dict = {}
    for label, (times, rates) in FAMILIES.items():
        for names, of in ((times, edges[label].of_time), (rates, edges[label].of_rate)):
            for name in names:
                value = getattr(summary, name)
                if value is None or not math.isfinite(value):
                    continue
                band = of(value)
                out[f"{name}_low"], out[f"{name}_high"] = band.low, band.high
    if requests is not None and summary.slo_attainment is not None:
        out.update(attainment_band(requests, summary, edges["prefill"], edges["decode"]))
    out["band_level"] = level
    out["band_regimes"] = "; ".join(f"{label}: {', '.join(r.value for r in e.regimes)}" for label, e in edges.items())
    return out


def attainment_band(requests, summary: Summary, prefill: Edges, decode: Edges) -> dict:
    """The SLO attainment and goodput were every request's TTFT and TPOT at their band's edges: the low edge
    (pessimistic) with each time at its high ratio, the high edge at its low one. First order: each request's
    times scaled as they are, the queueing a slower step would add on top not simulated again."""
    from backend.records import RequestStatus
    from backend.results.summary import _meets
    finished = [r for r in requests if r.status is RequestStatus.FINISHED]
    duration = summary.duration_s or 0.0
    if not finished or duration <= 0:
        return {}
    ttft, tpot = summary.slo_ttft_ms, summary.slo_tpot_ms
    ttft = None if ttft is None or math.isnan(ttft) else ttft
    tpot = None if tpot is None or math.isnan(tpot) else tpot
    out = {}
    for edge, t_ratio, d_ratio in (("low", prefill.high, decode.high), ("high", prefill.low, decode.low)):
        # a request meets the SLO at a time ratio e^x when its simulated time is within the SLO over e^x
        good = sum(_meets(r, None if ttft is None else ttft * math.exp(-t_ratio),
                          None if tpot is None else tpot * math.exp(-d_ratio)) for r in finished)
        out[f"slo_attainment_{edge}"] = good / len(finished)
        out[f"goodput_requests_per_s_{edge}"] = good / duration
    return out


def info_setup(info, shape=None) -> tuple[Regime, ...]:
    """setup_regimes of a recorded run (run.json's info, backend.run_info.RunInfo) and its model's shape."""
    tp = info.replicas.tp if info.replicas is not None else 1
    return setup_regimes(getattr(shape, "num_experts", 0) > 0, tp, info.weight_bits or 16)


def step_edges(is_batch_sweep: bool, x: int, setup: tuple[Regime, ...], level: float | None = None) -> Edges:
    """A simulated batch (decode steps of x requests) or prompt (a prefill of x tokens) sweep point's edges."""
    phase = (Regime.BATCH1_DECODE if x <= 1 else Regime.BATCHED_DECODE) if is_batch_sweep else Regime.PREFILL
    return shipped().edges((phase, *setup), level or current_level())
