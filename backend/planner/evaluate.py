"""One candidate -> its figures: the project's simulator runs the planner's workload on the candidate's
deployment, and the summary's goodput, latencies and tokens are turned into cost per million tokens.

Cost: a deployment is paid for all the time it serves, idle or not, so the dollars per million
tokens are its devices' price per hour over the tokens it served per hour (input + output). The
input/output split charges each phase its share of that bill: a disaggregated layout's prefill pool
to the input tokens and its decode pool to the output tokens; a colocated one by the share of busy
time its prefill and decode steps took (a mixed step split by its tokens, as backend/results/cost.py).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import lru_cache

from backend.config import RunKind
from backend.errors import InputError, one_line
from backend.loaders.cache import ModelCache
from backend.planner.candidates import Candidate, kv_tokens_that_fit
from backend.results.cost import phase_ms
from backend.session import target_for
from backend.summary import Summary, figure
from backend.workload.spec import LengthDist, WorkloadSpec

NAN = math.nan


@dataclass(slots=True)
class Problem:
    """What the deployment must serve, and the objectives it is held to."""

    model: str                       # a shape key or a config.json path
    slo_ttft_ms: float
    slo_tpot_ms: float
    rate: float                      # Poisson arrivals per second (a trace brings its own)
    num_requests: int = 200          # per candidate's simulation
    prompt_len: LengthDist = field(default_factory=lambda: LengthDist("fixed", 1024))
    output_len: LengthDist = field(default_factory=lambda: LengthDist("fixed", 256))
    trace: str | None = None         # a trace file replayed instead of Poisson arrivals
    attainment: float = 0.9          # share of requests that must meet both SLOs
    seed: int = 0
    engine: str = "vllm"             # the serving engine family every candidate runs (--engine; backend/sim/engines.py)
    # the simulated figures' band (backend.sim.bands): None shows the 80% band's pessimistic edge beside the
    # centre and ranks by the centre; a level (--confidence 0.8) makes the bands at it and ranks by the edge
    confidence: float | None = None
    # speculative decoding (backend/sim/spec.py): the proposer every candidate with spec_tokens > 0 uses, and the
    # simulator's pricing of its guesses (None: its defaults)
    spec_method: str = "ngram"
    spec_draft_model: str = ""
    spec_acceptance: float | None = None
    spec_draft_cost: float | None = None
    spec_from: str = ""

    def spec(self, num_tokens: int):
        """The SpecConfig of a candidate speculating with K = num_tokens (off at 0)."""
        from backend.config import SpecConfig
        if not num_tokens:
            return SpecConfig()
        return SpecConfig(self.spec_method, self.spec_draft_model, num_tokens=num_tokens,
                          acceptance=self.spec_acceptance, draft_cost=self.spec_draft_cost, spec_from=self.spec_from)

    def spec_alpha(self) -> float:
        """The per-guess rate the screen assumes (the simulator's own choice of it, backend/sim/spec.py)."""
        from backend.sim.spec import sim_spec_of
        return sim_spec_of(self.spec(1), self.seed).alpha

    @property
    def band_level(self) -> float:
        from backend.sim.bands import DEFAULT_LEVEL
        return self.confidence or DEFAULT_LEVEL

    def workload(self) -> WorkloadSpec:
        """Poisson arrivals at the rate, or the trace's rows (its times and lengths, its first
        num_requests rows) replayed."""
        spec = WorkloadSpec(name="plan", num_requests=self.num_requests, arrival="poisson", rate=self.rate,
                            prompt_len=self.prompt_len, output_len=self.output_len, seed=self.seed)
        if self.trace is not None:
            from backend.workload.spec import apply_overrides
            spec = apply_overrides(spec, trace=self.trace, num_requests=self.num_requests)
        return spec

    def max_len(self) -> int:
        """The longest prompt + output a request can have (sizes the KV check)."""
        from backend.targets.engine_run import longest_sequence
        return longest_sequence(self.workload())

    def traffic(self) -> tuple[float, float, float]:
        """(arrivals per second, mean prompt tokens, mean output tokens) the screen estimates with."""
        if self.trace is None:
            return self.rate, _mean(self.prompt_len), _mean(self.output_len)
        return _trace_traffic(self.trace, self.num_requests)


@lru_cache(maxsize=4)
def _trace_traffic(trace: str, num_requests: int) -> tuple[float, float, float]:
    from backend.workload.spec import apply_overrides
    from backend.workload.trace import trace_rows
    base = WorkloadSpec(name="plan", num_requests=num_requests, arrival="poisson", rate=1.0)
    spec = apply_overrides(base, trace=trace, num_requests=num_requests)
    rows = trace_rows(spec)
    span_s = (rows[-1].arrival_ms - rows[0].arrival_ms) / 1000 if len(rows) > 1 else 0.0
    rate = (len(rows) - 1) / span_s if span_s > 0 else float(len(rows))
    return rate, sum(r.prompt_len for r in rows) / len(rows), sum(r.output_len for r in rows) / len(rows)


def _mean(dist: LengthDist) -> float:
    if dist.kind == "fixed":
        return dist.value
    if dist.kind == "uniform":
        return (dist.low + dist.high) / 2
    return dist.mean


@dataclass(slots=True)
class Outcome:
    """One simulated candidate (error set when the simulator refused or failed it)."""

    candidate: Candidate
    error: str = ""
    meets: bool = False              # attainment >= the problem's and every request finished
    meets_at_edge: bool = False      # ... with every request's TTFT and TPOT at their band's pessimistic edge
    attainment_low: float = NAN      # the attainment there (the summary's slo_attainment_low)
    goodput_low: float = NAN         # and the goodput
    ttft_p90_high_ms: float = NAN    # the band's pessimistic edges of the p90 latencies
    tpot_p90_high_ms: float = NAN
    usd_per_m_tokens_high: float = NAN   # $/1M tokens were every step that much slower (throughput's low edge)
    goodput: float = NAN             # requests/s that met both SLOs (the summary's goodput_requests_per_s)
    attainment: float = NAN          # share of finished requests that met both SLOs
    throughput: float = NAN          # finished requests/s
    ttft_p90_ms: float = NAN
    tpot_p90_ms: float = NAN
    ttft_p50_ms: float = NAN
    tpot_p50_ms: float = NAN
    usd_per_hour: float = NAN        # all the candidate's devices
    usd_per_m_tokens: float = NAN    # input + output
    usd_per_m_input: float = NAN
    usd_per_m_output: float = NAN
    num_finished: int = 0
    wall_s: float = 0.0              # this machine's seconds to simulate it
    screen: dict = field(default_factory=dict)   # the analytic screen's estimates (backend.planner.screen)


def cost_per_million(usd_per_hour: float, tokens_per_s: float) -> float:
    """Dollars per million tokens at a price per hour and a token rate."""
    if not tokens_per_s > 0:
        return NAN
    return usd_per_hour / (tokens_per_s * 3600.0) * 1e6


def prefill_share(summary: Summary, candidate: Candidate) -> float:
    """The share of the bill charged to the input tokens (see the module's docstring)."""
    if candidate.policy == "disaggregated":
        prefill_devices, decode_devices = candidate.pool_devices
        return prefill_devices / (prefill_devices + decode_devices)
    prefill, decode = phase_ms(summary)
    busy = prefill + decode
    return prefill / busy if busy > 0 else 0.5


def costs(summary: Summary, candidate: Candidate, price_per_hour: float) -> dict[str, float]:
    usd_per_hour = price_per_hour * candidate.devices
    duration = summary.duration_s or 0.0
    inputs, outputs = summary.num_input_tokens or 0, summary.num_output_tokens or 0
    if duration <= 0:
        return {"usd_per_hour": usd_per_hour}
    share = prefill_share(summary, candidate)
    return {"usd_per_hour": usd_per_hour,
            "usd_per_m_tokens": cost_per_million(usd_per_hour, (inputs + outputs) / duration),
            "usd_per_m_input": cost_per_million(usd_per_hour * share, inputs / duration),
            "usd_per_m_output": cost_per_million(usd_per_hour * (1 - share), outputs / duration)}


@lru_cache(maxsize=16)
def _profile(key: str):
    from backend.roofline.profiles import find_profile
    return find_profile(key)


@lru_cache(maxsize=4)
def _shape(model: str):
    from backend.sim.model import resolve_model
    return resolve_model(model)


def run_config(candidate: Candidate, problem: Problem):
    """The simulator's RunConfig for this candidate (KV sized to what fits after the weights)."""
    from backend.config import Deployment, EngineConfig, ModelChoice, RunConfig
    spec = problem.workload()
    max_len = problem.max_len()
    kv_tokens = kv_tokens_that_fit(candidate, _shape(problem.model), _profile(candidate.gpu), max_len)
    disaggregated = candidate.policy == "disaggregated"
    engine = EngineConfig(policy=candidate.policy, max_batch=candidate.max_batch, kv_tokens=kv_tokens or None,
                          max_len=max_len,
                          prefill_workers=candidate.prefill_workers if disaggregated else 1,
                          decode_workers=candidate.decode_workers if disaggregated else 1)
    deployment = Deployment(tp=candidate.tp, pp=candidate.pp, dp=candidate.dp, ep=candidate.ep, router="least-loaded",
                            kv_dtype=candidate.kv_dtype, prefill_tp=candidate.tp if disaggregated else None,
                            decode_tp=candidate.pool_tps[1] if disaggregated else None, engine=problem.engine)
    return RunConfig(mode=RunKind.LOAD, simulate=True, profile=candidate.gpu,
                     model=ModelChoice(name=problem.model, dtype=candidate.precision), workload=spec, engine=engine,
                     deployment=deployment, slo_ttft_ms=problem.slo_ttft_ms, slo_tpot_ms=problem.slo_tpot_ms,
                     spec=problem.spec(candidate.spec_tokens))


def evaluate(candidate: Candidate, problem: Problem) -> Outcome:
    """Simulate one candidate; a refusal or a failure is kept in `error` (plan.csv shows it), never raised."""
    start = time.perf_counter()
    out = Outcome(candidate)
    try:
        config = run_config(candidate, problem)   # a simulated load run, disaggregated or not: session's table
        from backend.sim.bands import at_level
        target = target_for(config, ModelCache(), retain_records=False)
        with at_level(problem.band_level):
            finished = target(config, lambda e: None, lambda: False)
    except InputError as exc:
        out.error = str(exc)
        out.wall_s = time.perf_counter() - start
        return out
    except Exception as exc:   # one candidate's failure is its row's error, not the end of the search
        out.error = one_line(exc, typed=True)
        out.wall_s = time.perf_counter() - start
        return out
    out.wall_s = time.perf_counter() - start
    if finished.error:
        out.error = finished.error
        return out
    s = finished.summary
    out.goodput = figure(s.goodput_requests_per_s)
    out.attainment = figure(s.slo_attainment)
    out.throughput = figure(s.requests_per_s)
    out.num_finished = int(s.num_finished or 0)
    out.ttft_p90_ms, out.tpot_p90_ms = figure(s.ttft_p90_ms), figure(s.tpot_p90_ms)
    out.ttft_p50_ms, out.tpot_p50_ms = figure(s.ttft_p50_ms), figure(s.tpot_p50_ms)
    for name, value in costs(s, candidate, _profile(candidate.gpu).price_per_hour).items():
        setattr(out, name, value)
    all_finished = out.num_finished == (s.num_requests if s.num_requests is not None else -1)
    out.meets = all_finished and out.attainment >= problem.attainment
    edge(out, s, problem, all_finished)
    return out


def edge(out: Outcome, s: Summary, problem: Problem, all_finished: bool) -> None:
    """The outcome at its band's pessimistic edge: the SLO attainment with every request's times at their
    high edge, the p90 latencies' high edges, the cost were the throughput at its low edge."""
    def high(name: str) -> float:
        band = s.bands.get(name)
        return band.high if band is not None else NAN
    def low(name: str) -> float:
        band = s.bands.get(name)
        return band.low if band is not None else NAN
    out.attainment_low, out.goodput_low = low("slo_attainment"), low("goodput_requests_per_s")
    out.ttft_p90_high_ms, out.tpot_p90_high_ms = high("ttft_p90_ms"), high("tpot_p90_ms")
    total = s.bands.get("total_tokens_per_s")
    if total is not None and s.total_tokens_per_s and total.low > 0:
        out.usd_per_m_tokens_high = out.usd_per_m_tokens * s.total_tokens_per_s / total.low
    out.meets_at_edge = all_finished and out.attainment_low >= problem.attainment
