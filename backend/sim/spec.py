"""Speculative decoding on the simulator: the engine's own Speculator and scheduler, with guesses that
are priced instead of computed.

The simulator reads no tokens, so it cannot look a guess up or check it. What decides the gain is two
numbers: how many guesses a verification keeps, and what guessing costs. Guesses are kept independently
with a per-guess rate alpha (Leviathan et al. 2023), so a verification of k guesses keeps j of them with
the truncated geometric law P(j) = alpha^j (1 - alpha) for j < k and alpha^k for j = k, drawn from a seeded
generator (a run is reproducible), and emits j + 1 tokens. A verification step is priced by the cost
model as what it is: each verifying request's k + 1 rows of math and attention against the same one read
of the weights. The guessing itself advances the virtual clock before the step (the engine times it as
the draft's own): a draft pass costs `draft_cost` of a target decode step of the same batch, k passes a
proposal; the n-gram lookup costs nothing; a draft model is priced by the same cost model on its shape.

alpha and the draft cost are given (--spec-acceptance, --spec-draft-cost) or taken from a run folder that
speculated (--spec-from: its summary's spec_alpha, and its draft time per verifying step over its plain
decode step's time, per guess).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from backend.config import SpecConfig
from backend.errors import InputError

DEFAULT_ALPHA = 0.7   # a typical n-gram / small-draft per-guess rate on input-grounded tasks


@dataclass(frozen=True, slots=True)
class SimSpec:
    alpha: float               # per-guess acceptance rate
    draft_cost: float | None   # a draft pass over a target decode step; None: price the draft model's shape
    seed: int = 0


def draw_kept(rng: random.Random, alpha: float, k: int) -> int:
    """Guesses kept out of k, each kept with probability alpha until the first miss (truncated geometric)."""
    kept = 0
    while kept < k and rng.random() < alpha:
        kept += 1
    return kept


def sim_spec_of(spec: SpecConfig, seed: int) -> SimSpec:
    """The simulator's alpha and draft cost: the flags', else --spec-from's measured ones, else defaults."""
    alpha, cost = spec.acceptance, spec.draft_cost
    if spec.spec_from:
        measured_alpha, measured_cost = measured(spec.spec_from)
        alpha = measured_alpha if alpha is None else alpha
        cost = measured_cost if cost is None else cost
    if alpha is None:
        alpha = DEFAULT_ALPHA
    if cost is None and spec.method == "ngram":
        cost = 0.0   # a lookup in the request's own tokens: nothing beside the step
    return SimSpec(min(alpha, 0.999999), cost, seed)


def measured(folder: str) -> tuple[float, float]:
    """(spec_alpha, draft cost per guess as a fraction of a plain decode step) of a run that speculated."""
    from backend.records import Phase
    from backend.results.export import read_run
    run = read_run(folder)
    alpha = run.summary.spec_alpha
    if alpha is None or not math.isfinite(alpha):
        raise InputError(f"--spec-from {folder}: that run did not speculate (its summary has no spec_alpha)")
    verifying = [s for s in run.steps if s.num_proposed_tokens > 0]
    plain = [s.duration_ms for s in run.steps if s.phase is Phase.DECODE and s.num_proposed_tokens == 0]
    if not verifying or not plain:   # no plain decode step to measure against: the draft's share of the time
        share = run.summary.spec_draft_share
        return alpha, (share / (1.0 - share) if share is not None and math.isfinite(share) and share < 1 else 0.0)
    plain_ms = sum(plain) / len(plain)
    # a proposal of k guesses is k draft passes; k per request, the step's guesses over its decodes
    passes = sum(s.num_proposed_tokens / max(1, s.num_decode_requests) for s in verifying)
    draft_ms = sum(s.draft_ms for s in verifying)
    return alpha, (draft_ms / passes / plain_ms if passes and plain_ms > 0 else 0.0)


class SimProposer:
    """The proposer's contract (`guesses(requests, ks)`) on the virtual clock: k guesses of the one simulated
    token per request, their time added to the clock (the engine records it as the draft's)."""

    def __init__(self, runner, draft_cost: float | None, draft_pricer=None):
        self.runner, self.draft_cost, self.draft_pricer = runner, draft_cost, draft_pricer

    def guesses(self, requests, ks) -> list[list[int]]:
        passes = max(ks) if ks else 0
        if passes and (self.draft_cost or self.draft_pricer is not None):
            contexts = [r.num_computed + 1 for r in requests]
            ones = [1] * len(requests)
            pricer = self.draft_pricer if self.draft_cost is None else self.runner.pricer
            step = pricer.seconds(ones, contexts, [True] * len(requests))
            self.runner.clock.advance(passes * step * (1.0 if self.draft_cost is None else self.draft_cost))
        return [[self.runner.token] * k for k in ks]


def describe(spec: SpecConfig, sim: SimSpec) -> str:
    """'speculation ngram K=4: guesses kept at alpha 0.70, a draft pass 0 of a decode step' (run.json's source)."""
    cost = ("a draft pass priced on the draft model's shape" if sim.draft_cost is None
            else f"a draft pass {sim.draft_cost:.3g} of a decode step")
    origin = f" (measured in {spec.spec_from})" if spec.spec_from else ""
    return f"speculation {spec.describe()}: guesses kept at alpha {sim.alpha:.2f}, {cost}{origin}"


def build_sim_speculator(config, sim: SimSpec, runner, shape, profile, cost_model, layout, math_rule):
    """The engine's Speculator over a SimProposer, and the runner told how guesses are kept."""
    from backend.engine.spec.speculator import Speculator
    from backend.sim.model import resolve_model, resolve_precision
    from backend.sim.parallel import StepPricer
    spec = config.spec
    spec.validate()
    if spec.num_tokens >= shape.max_position:
        raise InputError(f"--spec-tokens {spec.num_tokens}: beyond {config.model.name}'s context of "
                         f"{shape.max_position} tokens")
    draft_pricer = None
    if sim.draft_cost is None:   # a draft model: its own shape, priced as the target is
        draft_shape = resolve_model(spec.draft_model)
        if draft_shape.vocab_size != shape.vocab_size:
            raise InputError(f"--spec draft:{spec.draft_model}: its vocabulary has {draft_shape.vocab_size:,} "
                             f"tokens, {config.model.name}'s {shape.vocab_size:,}: a draft must share the "
                             "target's tokenizer")
        prec = resolve_precision(spec.draft_dtype, profile, config.deployment.kv_dtype)
        draft_pricer = StepPricer(draft_shape, prec, profile, cost_model, layout, math_rule)
    runner.speculate(sim)
    return Speculator(SimProposer(runner, sim.draft_cost, draft_pricer), spec.num_tokens)
