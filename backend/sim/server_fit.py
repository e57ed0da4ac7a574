"""Fit a server's profile from remote runs against it: `calibrate --from RUN ...`.

A remote run has no engine steps, only each request's arrival, lengths, TTFT and TPOT as the client
saw them. So the fit is by simulation: the same requests (their arrival times and lengths) replayed
through the simulator's scheduler and step pricing on the named device's profile, and the cost
model's terms searched until the simulated TTFT p50 and TPOT p50 of every run match the measured
ones (the squared log ratio, summed over runs), and the median service time to the first token
(service_p50: the prefill with the queue taken out). What is searched is what a server's host and kernels
decide and a datasheet does not: the matmuls' fraction of the peak (prefill), the bandwidth's
(decode), and a fixed cost per step; attention keeps its ratio to the matmuls, and
the device's other terms (a shipped GPU's layer and link costs) stay as its profile has them.

The band is the fit's own, cross-validated: each run left out of a fit on the others and predicted,
and the largest relative miss per metric (with three to four runs; the 80% quantile of the misses
with five or more) kept in the profile ([simulation] band_ttft_p50, band_tpot_p50) beside the terms.

No torch, no network: the caller (backend/cli/fit_from.py) reads the run folders.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from backend.errors import InputError
from backend.precision import Precision
from backend.sim.step_time import CostModel

MIN_RUNS = 3
TERMS = ("mfu", "mbu", "step_ms")   # searched, in log space
FLOOR_MS = 0.01                     # the smallest p50 a ratio is taken of
ROUNDS = 6                          # coordinate-search passes, the step shrinking each pass


@dataclass(slots=True, frozen=True)
class ServedRequest:
    arrival_ms: float
    prompt_tokens: int
    output_tokens: int


@dataclass(slots=True)
class ServerRun:
    """One remote run's finished requests and its measured medians."""

    name: str
    requests: list[ServedRequest]
    ttft_p50_ms: float
    tpot_p50_ms: float
    service_p50_ms: float = 0.0   # first token after the server was free for it (service_p50); 0: not used


@dataclass(slots=True)
class Pricing:
    """What a simulated replay prices on: the model's shape, its precision, the device, the server's batch limit."""

    shape: object
    prec: Precision
    profile: object
    max_batch: int
    policy: str = "continuous"


def server_run(name: str, records) -> ServerRun:
    """A ServerRun from a run's RequestRecords (the finished ones); one line when none finished."""
    done = [r for r in records if r.ttft_ms is not None and r.output_tokens > 0]
    tpots = [r.tpot_ms for r in done if r.tpot_ms is not None and r.output_tokens > 1]
    if not done or not tpots:
        raise InputError(f"{name}: no request finished with two or more tokens: nothing to fit on")
    t0 = min(r.arrival_ms for r in done)
    requests = [ServedRequest(r.arrival_ms - t0, max(1, r.prompt_tokens), r.output_tokens) for r in done]
    # floored: a server (or a client reading in bursts) may show 0 ms, which no log ratio takes
    return ServerRun(name, requests, max(FLOOR_MS, statistics.median(r.ttft_ms for r in done)),
                     max(FLOOR_MS, statistics.median(tpots)), max(0.0, service_p50(done)))


def service_p50(records) -> float:
    """The median time from when a request could first be served (its arrival, or the end of the requests
    that came before it, whichever is later) to its first token: the prefill with the queue taken out,
    computed alike on the measured and the replayed records. Under a backlog the TTFT is mostly queue,
    which multiplies any noise in the service times; this keeps the prefill's own signal in the fit."""
    free, found = -math.inf, []
    for r in sorted(records, key=lambda r: r.arrival_ms):
        if r.first_token_ms is None or r.finish_ms is None:
            continue
        found.append(r.first_token_ms - max(r.arrival_ms, free))
        free = max(free, r.finish_ms)
    return statistics.median(found) if found else 0.0


def replay(run: ServerRun, model: CostModel, pricing: Pricing) -> tuple[float, float, float]:
    """(TTFT p50, TPOT p50, service p50) in ms of the run's requests simulated with `model`."""
    from backend.engine.loop import Engine
    from backend.engine.scheduler import Scheduler, SchedulerConfig
    from backend.sim.runner import SIM_TOKEN, SimRunner, VirtualClock
    from backend.workload.arrivals import FixedSource, RequestSpec
    specs = [RequestSpec(i, r.arrival_ms, [SIM_TOKEN] * r.prompt_tokens, "", r.output_tokens)
             for i, r in enumerate(sorted(run.requests, key=lambda r: r.arrival_ms))]
    max_len = max(r.prompt_tokens + r.output_tokens for r in run.requests)
    scheduler = Scheduler(SchedulerConfig(policy=pricing.policy, max_batch=pricing.max_batch,
                                          kv_capacity=pricing.max_batch * max_len, max_len=max_len))
    clock = VirtualClock()
    runner = SimRunner(pricing.shape, pricing.prec, pricing.profile, model, clock)
    finished = []

    def emit(event) -> None:
        finished.extend(getattr(event, "requests", None) or [])
    engine = Engine(scheduler, runner, "fit", ignore_eos=True, clock=clock.now, sleep=clock.advance)
    result = engine.run(FixedSource(specs), emit, lambda: False)
    if result.error:
        raise InputError(f"replaying {run.name}: {result.error}")
    ttft = [r.ttft_ms for r in finished if r.ttft_ms is not None]
    tpot = [r.tpot_ms for r in finished if r.tpot_ms is not None and r.output_tokens > 1]
    return (max(FLOOR_MS, statistics.median(ttft)), max(FLOOR_MS, statistics.median(tpot)),
            max(0.0, service_p50(finished)))


def _loss(runs: list[ServerRun], model: CostModel, pricing: Pricing) -> float:
    total = 0.0
    for run in runs:
        ttft, tpot, service = replay(run, model, pricing)
        total += math.log(ttft / run.ttft_p50_ms) ** 2 + math.log(tpot / run.tpot_p50_ms) ** 2
        if run.service_p50_ms > 0 and service > 0:
            total += math.log(service / run.service_p50_ms) ** 2
    return total


def _with(model: CostModel, name: str, value: float) -> CostModel:
    changed = {name: value}
    if name == "mfu":   # attention keeps its ratio to the matmuls
        changed["afu"] = value * model.afu / model.mfu
    return replace(model, **changed)


def fit_server(runs: list[ServerRun], pricing: Pricing, start: CostModel) -> CostModel:
    """The terms that best reproduce every run's TTFT and TPOT p50: a coordinate search in log space,
    each term in turn moved up or down by a factor that shrinks each pass."""
    from backend.roofline.profiles import MAX_EFFICIENCY
    model = replace(start, step_ms=max(start.step_ms, 0.05))   # the other terms (layers, links) kept as they are
    best = _loss(runs, model, pricing)
    factor = 4.0
    for _ in range(ROUNDS):
        for name in TERMS:
            improved = True
            while improved:
                improved = False
                for move in (factor, 1 / factor):
                    value = getattr(model, name) * move
                    if name != "step_ms" and not 1e-4 <= value <= MAX_EFFICIENCY:
                        continue
                    if name == "mfu" and value * model.afu / model.mfu > MAX_EFFICIENCY:
                        continue
                    trial = _with(model, name, value)
                    loss = _loss(runs, trial, pricing)
                    if loss < best - 1e-9:
                        model, best, improved = trial, loss, True
                        break
        factor = math.sqrt(factor)
    return model


@dataclass(slots=True)
class HeldOut:
    """One run predicted by a fit on the others."""

    name: str
    ttft_error: float     # signed, fraction (+0.1: the simulation 10% slower)
    tpot_error: float


def cross_validate(runs: list[ServerRun], pricing: Pricing, start: CostModel) -> list[HeldOut]:
    """Each run left out of a fit on the others, and predicted."""
    found = []
    for i, run in enumerate(runs):
        model = fit_server(runs[:i] + runs[i + 1:], pricing, start)
        ttft, tpot, _ = replay(run, model, pricing)
        found.append(HeldOut(run.name, ttft / run.ttft_p50_ms - 1, tpot / run.tpot_p50_ms - 1))
    return found


def band(errors: list[float], coverage: float = 0.8) -> float:
    """The half-width (a fraction) of the band: the largest miss with fewer than five, else the
    `coverage` quantile of the absolute misses."""
    misses = sorted(abs(e) for e in errors)
    if len(misses) < 5:
        return misses[-1]
    k = coverage * (len(misses) - 1)
    lo = int(math.floor(k))
    return misses[lo] + (misses[min(lo + 1, len(misses) - 1)] - misses[lo]) * (k - lo)


def check_runs(runs: list[ServerRun]) -> None:
    if len(runs) < MIN_RUNS:
        raise InputError(f"calibrate --from needs at least {MIN_RUNS} runs against the server (several loads or "
                         f"lengths), got {len(runs)}: each is left out in turn for the band")
