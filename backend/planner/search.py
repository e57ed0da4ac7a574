"""The search: enumerate the space, prune what cannot fit, screen the rest analytically, simulate
the `budget` most promising in parallel processes, and pick the cheapest that meet the SLOs.

Which candidates are simulated: each is ranked by its price per hour times (1 + its screen's
estimated overshoot of the SLOs), so the cheap ones the screen expects to meet them go first, then
cheap near misses (the screen is rough) before dear ones and far misses; every candidate beyond
the budget is reported as screened out, never as judged.
"""
from __future__ import annotations

import math
import multiprocessing
import os
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Callable

from backend.errors import InputError
from backend.planner import screen
from backend.planner.candidates import SearchSpace, enumerate_candidates, find_profiles, prune
from backend.planner.evaluate import Outcome, Problem, evaluate
from backend.planner.pareto import cheapest, outcome_front

DEFAULT_BUDGET = 220   # candidates simulated: 200+ and still a search of 2 minutes or less on 2 cores


@dataclass(slots=True)
class PlanResult:
    problem: Problem
    outcomes: list[Outcome]                   # simulated, in the order they were chosen
    num_enumerated: int = 0
    pruned: dict[str, int] = field(default_factory=dict)   # reason -> candidates dropped before simulating
    num_screened_out: int = 0                 # could run, beyond the budget
    front: list[int] = field(default_factory=list)          # indices into outcomes, increasing cost
    best: list[Outcome] = field(default_factory=list)       # cheapest that meet the SLOs, best first
    wall_s: float = 0.0
    workers: int = 1
    stopped: bool = False


def validate(problem: Problem, budget: int, workers: int) -> None:
    for name, value in (("--slo-ttft-ms", problem.slo_ttft_ms), ("--slo-tpot-ms", problem.slo_tpot_ms),
                        ("--rate", problem.rate)):
        if value is None or not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise InputError(f"{name} must be a positive number, got {value!r}")
    if problem.confidence is not None and not (isinstance(problem.confidence, (int, float))
                                               and 0 < problem.confidence < 1):
        raise InputError(f"--confidence must lie between 0 and 1 (0.8: an 80% band), got {problem.confidence!r}")
    if not 0 < problem.attainment <= 1:
        raise InputError(f"--attainment must be in (0, 1], got {problem.attainment!r}")
    if problem.num_requests < 1:
        raise InputError(f"--requests must be at least 1, got {problem.num_requests}")
    if budget < 1:
        raise InputError(f"--budget must be at least 1, got {budget}")
    if workers < 1:
        raise InputError(f"--workers must be at least 1, got {workers}")


def choose(problem: Problem, space: SearchSpace, budget: int):
    """(candidates to simulate with their screen estimates, enumerated count, pruned reasons, screened out)."""
    from backend.planner.evaluate import _shape
    profiles = find_profiles(space.gpus)
    shape = _shape(problem.model)
    every = enumerate_candidates(space, profiles, shape)
    kept, pruned = prune(every, shape, profiles, problem.max_len())
    if not kept:
        reasons = "; ".join(f"{n} {why}" for why, n in pruned.items()) or "the space is empty"
        raise InputError(f"no candidate fits {problem.model} ({len(every)} tried: {reasons})")
    ranked = []
    for c in kept:
        est = screen.estimate(c, problem)
        over = screen.score(est, problem)
        ranked.append((profiles[c.gpu].price_per_hour * c.devices * (1 + min(over, 1e6)), c, est))
    ranked.sort(key=lambda r: (r[0], r[1].devices, r[1].label))
    chosen = [(c, est) for _, c, est in ranked[:budget]]
    return chosen, len(every), pruned, max(0, len(kept) - budget)


def search(problem: Problem, space: SearchSpace, workers: int | None = None, budget: int = DEFAULT_BUDGET,
           on_outcome: Callable[[Outcome, int, int], None] | None = None,
           should_stop: Callable[[], bool] = lambda: False, mp_context: str | None = None) -> PlanResult:
    """Simulate up to `budget` candidates on `workers` processes (default: the cores; 1 runs them in
    this process). on_outcome(outcome, done, total) is called here as each one finishes."""
    workers = workers or os.cpu_count() or 1
    validate(problem, budget, workers)
    start = time.perf_counter()
    chosen, enumerated, pruned, screened_out = choose(problem, space, budget)
    result = PlanResult(problem, [], enumerated, pruned, screened_out, workers=workers)
    total = len(chosen)

    def finished(outcome: Outcome, est: dict) -> None:
        outcome.screen = est
        result.outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome, len(result.outcomes), total)

    if workers == 1:
        for c, est in chosen:
            if should_stop():
                result.stopped = True
                break
            finished(evaluate(c, problem), est)
    else:
        context = multiprocessing.get_context(mp_context) if mp_context else None
        with ProcessPoolExecutor(max_workers=min(workers, total), mp_context=context) as pool:
            pending = {pool.submit(evaluate, c, problem): est for c, est in chosen}
            while pending:
                done, _ = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                for future in done:
                    finished(future.result(), pending.pop(future))
                if should_stop():
                    result.stopped = True
                    for future in pending:
                        future.cancel()
                    break
    order = {c: i for i, (c, _) in enumerate(chosen)}
    result.outcomes.sort(key=lambda o: order[o.candidate])
    result.front = outcome_front(result.outcomes)
    result.best = cheapest(result.outcomes, at_edge=problem.confidence is not None)
    result.wall_s = time.perf_counter() - start
    return result
