"""The cheap first stage: an analytic estimate of each candidate's TTFT, TPOT and load from a few
roofline prices (no simulation), used only to choose which candidates the simulator runs.

Per engine (a replica, or a disaggregated pool's group) at arrival rate lam:
  prefill: one prompt's price p; the engine spends rho_p = lam * p of each second prefilling
  decode:  n requests decode at once (at most max_batch, or the sequences the KV left after the
           weights holds), each for O steps: n = lam * O * tpot (Little's law), and
           tpot = d(n) / (1 - rho_p) where d(n) is a decode step of n requests (colocated: the
           prefills interleave with the decode steps; disaggregated: rho_p is 0 on a decode group)
  ttft:    p plus an M/D/1 queue's wait rho_p / (2 (1 - rho_p)) * p, plus one decode step (colocated)
A tp-way split divides a step's roofline time by tp (its all-reduces ignored: a screen, not a price;
a disaggregated candidate's prefill by its prefill pool's tp, its decode by its decode pool's; expert
parallelism is left to the simulator);
a pp-way split keeps a step's latency and multiplies the engine's throughput by pp.
"""
from __future__ import annotations

import math
from functools import lru_cache

from backend.planner.candidates import Candidate
from backend.results.spec_figures import expected_length

INFEASIBLE = math.inf


@lru_cache(maxsize=4096)
def _prices(gpu: str, precision: str, kv_dtype: str, model: str, prompt: int, context: int,
            batch: int, engine: str = "vllm", rows: int = 1) -> tuple[float, float]:
    """(one prompt's prefill seconds, one decode step of `batch` requests at `context` tokens) on one device;
    rows: tokens each request's step carries (a verification of K guesses: K + 1)."""
    from backend.planner.evaluate import _profile, _shape
    from backend.sim.step_time import CostModel
    from backend.sim.model import resolve_precision
    profile, shape = _profile(gpu), _shape(model)
    prec = resolve_precision(precision, profile, kv_dtype)
    cost = CostModel.for_profile(profile, prec, engine)
    prefill = cost.step_seconds(shape, prec, profile, [prompt], [prompt], 1)
    decode = cost.step_seconds(shape, prec, profile, [rows] * batch, [context] * batch, batch)
    return prefill, decode


def _slots(c: Candidate, problem, sequence: int) -> int:
    """Requests one engine runs at once: max_batch, or fewer where the KV left after the weights
    holds fewer mean-length sequences."""
    from backend.planner.candidates import kv_tokens_that_fit
    from backend.planner.evaluate import _profile, _shape
    kv = kv_tokens_that_fit(c, _shape(problem.model), _profile(c.gpu), problem.max_len())
    return max(1, min(c.max_batch, kv // max(1, sequence)))


def _split(seconds: float, tp: int) -> float:
    return seconds if tp == 1 else seconds / tp * 1.1   # 10% for the all-reduces the screen does not price


def estimate(candidate: Candidate, problem) -> dict[str, float]:
    """{'ttft_ms', 'tpot_ms', 'load'} estimated; 'load' >= 1 (or inf figures) means it cannot keep up."""
    rate, mean_prompt, mean_output = problem.traffic()
    prompt, output = max(1, round(mean_prompt)), max(1, round(mean_output))
    context = prompt + output // 2
    c = candidate
    disaggregated = c.policy == "disaggregated"
    engines_p = c.prefill_workers if disaggregated else c.dp
    engines_d = c.decode_workers if disaggregated else c.dp
    lam_p, lam_d = rate / engines_p, rate / engines_d
    slots = _slots(c, problem, prompt + output)
    prefill_tp, decode_tp = c.pool_tps
    prefill, _ = _prices(c.gpu, c.precision, c.kv_dtype, problem.model, prompt, context, 1, problem.engine)
    prefill = _split(prefill, prefill_tp) / c.pp   # seconds of an engine's time per prompt (pp: stages overlap)
    rho_p = lam_p * prefill
    busy_d = 0.0 if disaggregated else rho_p
    if rho_p >= 1 or busy_d >= 1:
        return {"ttft_ms": INFEASIBLE, "tpot_ms": INFEASIBLE, "load": max(rho_p, busy_d)}
    n, tpot = 1.0, 0.0
    # speculation: a step verifies K + 1 rows a request and emits the expected accepted length of them
    per_step = expected_length(problem.spec_alpha(), c.spec_tokens) if c.spec_tokens else 1.0
    for _ in range(30):   # fixed point of n = lam * O * tpot(n)
        batch = max(1, min(slots, math.ceil(n / c.pp)))
        _, step = _prices(c.gpu, c.precision, c.kv_dtype, problem.model, prompt, context, batch, problem.engine,
                          1 + c.spec_tokens)
        tpot = _split(step, decode_tp) / (1 - busy_d) / per_step
        new_n = lam_d * output * tpot
        if abs(new_n - n) < 0.01 * max(n, 1):
            n = new_n
            break
        n = new_n
    decode_load = n / (slots * c.pp)
    load = max(rho_p, decode_load)
    wait = rho_p / (2 * (1 - rho_p)) * prefill * c.pp
    ttft = prefill * c.pp + wait + (0.0 if disaggregated else tpot)
    return {"ttft_ms": ttft * 1000, "tpot_ms": tpot * 1000, "load": load}


def score(estimate_: dict[str, float], problem) -> float:
    """How far over its objectives a candidate is expected to be: 0 when estimated within both SLOs
    and below saturation, else the largest ratio over 1 (smaller is closer to feasible)."""
    over = max(estimate_["ttft_ms"] / problem.slo_ttft_ms, estimate_["tpot_ms"] / problem.slo_tpot_ms,
               estimate_["load"] / 0.95)
    return 0.0 if over <= 1 else over - 1

