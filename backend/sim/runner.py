"""The simulator's runner: the engine's runner contract without a model, on a virtual clock.

The engine loop, the scheduler and the replicas drive it as they drive the real runner; it prices
each step (a StepPricer over the replica's layout) and moves the clock by the price instead of
running a forward pass, and samples one fixed token wherever the real runner would sample.
"""
from __future__ import annotations

import random

from backend.precision import Precision
from backend.roofline.profiles import GpuProfile
from backend.sim.parallel import Layout, StepPricer
from backend.sim.step_time import CostModel

SIM_TOKEN = 0   # every sampled token: never a stop id (the simulated requests have none)


def sim_vocab(shape, prefix_caching: bool) -> int:
    """The ids a simulated prompt is drawn from: one id (no draws, the fastest) when nothing reads them,
    the model's vocabulary when prefix caching compares them (one id would make every prompt a hit)."""
    return max(2, shape.vocab_size) if prefix_caching else 1


class VirtualClock:
    """Seconds since the run's start, moved only by `advance` (the engine's sleep, the runner's steps)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def now(self) -> float:
        return self.seconds

    def advance(self, seconds: float) -> None:
        self.seconds += max(0.0, seconds)


class SimRunner:
    """The runner's contract (`run(out) -> {request_id: token}`) without a model: prices the step,
    advances the clock by the price, and samples SIM_TOKEN wherever the real runner would sample."""

    token = SIM_TOKEN   # what it samples, for the simulated proposer's guesses (backend/sim/spec.py sits below it)

    def __init__(self, shape, prec: Precision, profile: GpuProfile, cost_model: CostModel, clock: VirtualClock,
                 layout: Layout | None = None, math=None):
        self.shape, self.precision, self.profile = shape, prec, profile
        self.cost_model, self.clock = cost_model, clock
        # math: a CPU's matrix-unit rule (a fitted profile's, backend/sim/fitted.py); None: one roof
        self.pricer = StepPricer(shape, prec, profile, cost_model, layout, math)
        self.spec = None   # speculation (backend/sim/spec.py): how many of a request's guesses are kept
        self._rng: random.Random | None = None

    def speculate(self, spec) -> None:
        """Keep verified guesses by spec's per-guess rate, drawn from a generator seeded with spec.seed."""
        self.spec, self._rng = spec, random.Random(spec.seed)

    def price(self, out) -> float:
        """Seconds the scheduler output `out` takes on the replica (before update() moves it on)."""
        if not out.prefill and not out.num_draft_tokens:   # a decode step, most of a run's: one token a request
            decode = out.decode
            return self.pricer.seconds([1] * len(decode), [r.num_computed + 1 for r in decode], [True] * len(decode))
        # a verification: its last token and its guesses, k + 1 rows against the same one read of the weights
        new_tokens = [c.num_tokens for c in out.prefill] + [1 + len(r.spec_ids) for r in out.decode]
        contexts = [c.request.num_computed + c.num_tokens for c in out.prefill]
        contexts += [r.num_computed + 1 + len(r.spec_ids) for r in out.decode]
        logits = [c.samples for c in out.prefill] + [True] * len(out.decode)   # an intermediate chunk needs none
        return self.pricer.seconds(new_tokens, contexts, logits)

    def sample(self, out) -> dict[int, int]:
        samplers = [c.request.request_id for c in out.prefill if c.samples] + [r.request_id for r in out.decode]
        if out.num_draft_tokens and self.spec is not None:
            from backend.sim.spec import draw_kept
            rng, alpha = self._rng, self.spec.alpha
            for r in out.decode:
                if r.spec_ids:
                    out.accepted[r.request_id] = draw_kept(rng, alpha, len(r.spec_ids))
        return dict.fromkeys(samplers, SIM_TOKEN)

    def run(self, out) -> dict[int, int]:
        seconds = self.price(out)
        self.clock.advance(seconds)
        return self.sample(out)

    def warmup(self) -> None:
        """Nothing to warm: kept so the runner's contract is whole."""
