"""What the Speculation view draws, computed from the run store: how many guesses each verification kept, the
acceptance at each guess position, and the measured time of decode and verification steps against the tokens
they computed, beside the roofline's price of one request's step of that many tokens. No Qt.

Acceptance comes from the requests' records (each verification's proposed and kept guesses) once any request
that speculated has finished: exact, the figures the summary gives. Before that, while the run goes, it comes
from the held steps that verified one request's guesses alone (a step sums its requests' guesses, so a step of
several speculating requests cannot be split): at batch 1, every verification.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from backend.records import Phase
from backend.roofline.cost import Bound, predict, step_cost

from gui.state.run_store import PHASE_CODE, RunStore

MAX_TOKENS = 1024  # the prediction's x range: one request's step of 1 .. MAX_TOKENS tokens (a GPU's crossover is in the hundreds)


@dataclass(slots=True)
class Acceptance:
    """Verifications as (guesses proposed, guesses kept), and what the plots draw of them."""

    pairs: list[tuple[int, int]]
    source: str                                                      # "requests" (exact) or "steps" (live)
    histogram: np.ndarray = field(default_factory=lambda: np.zeros(0))     # verifications by guesses kept, 0..K
    by_position: np.ndarray = field(default_factory=lambda: np.zeros(0))   # kept at guess i of those reaching it
    reached: np.ndarray = field(default_factory=lambda: np.zeros(0))       # verifications with an i-th guess

    @property
    def num_verifications(self) -> int:
        return len(self.pairs)

    @property
    def mean_length(self) -> float:
        """Tokens a verification emitted: its kept guesses and the model's own next token."""
        return sum(kept + 1 for _, kept in self.pairs) / len(self.pairs) if self.pairs else math.nan


def acceptance(pairs: list[tuple[int, int]], source: str) -> Acceptance:
    longest = max((k for k, _ in pairs), default=0)
    proposed = np.array([k for k, _ in pairs], dtype=np.int64)
    kept = np.array([a for _, a in pairs], dtype=np.int64)
    positions = np.arange(longest)
    reached = (proposed[:, None] > positions).sum(axis=0) if pairs else np.zeros(0)
    passed = (kept[:, None] > positions).sum(axis=0) if pairs else np.zeros(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(reached > 0, passed / np.maximum(reached, 1), np.nan)
    histogram = np.bincount(kept, minlength=longest + 1) if pairs else np.zeros(0)
    return Acceptance(pairs, source, histogram.astype(float), rate, reached.astype(float))


def store_acceptance(store: RunStore) -> Acceptance:
    """The run's verifications: from finished requests' records, else from the held steps of one request."""
    pairs = [pair for r in store.records.values() if r.spec_proposed for pair in r.acceptance_lengths]
    if pairs:
        return acceptance(pairs, "requests")
    steps = store.steps
    proposed = steps.column("num_proposed_tokens")
    alone = (proposed > 0) & (steps.column("num_decode_requests") == 1)
    kept = steps.column("num_accepted_tokens")[alone]
    return acceptance([(int(k), int(a)) for k, a in zip(proposed[alone], kept)], "steps")


@dataclass(slots=True)
class StepTimes:
    """Held steps that computed no prompt tokens: plain decode steps and verification steps."""

    decode_tokens: np.ndarray
    decode_ms: np.ndarray
    verify_tokens: np.ndarray
    verify_ms: np.ndarray
    verify_proposed: np.ndarray
    context: int            # median context a decoding request attended to (the prediction's)
    single: bool            # every one of them had one request: the batch-1 prediction applies as is

    @property
    def num_steps(self) -> int:
        return len(self.decode_ms) + len(self.verify_ms)


def store_step_times(store: RunStore) -> StepTimes:
    s = store.steps
    decoding = (s.column("phase") == PHASE_CODE[Phase.DECODE]) & (s.column("num_prefill_tokens") == 0) \
        & (s.column("num_decode_requests") > 0)
    tokens, ms, proposed = s.column("num_tokens"), s.column("duration_ms"), s.column("num_proposed_tokens")
    verify, plain = decoding & (proposed > 0), decoding & (proposed == 0)
    requests = s.column("num_decode_requests")[decoding]
    per_request = s.column("context_tokens")[decoding] / np.maximum(requests, 1)
    context = int(np.median(per_request)) if len(per_request) else 0
    return StepTimes(tokens[plain].copy(), ms[plain].copy(), tokens[verify].copy(), ms[verify].copy(),
                     proposed[verify].copy(), context, bool(len(requests)) and bool((requests == 1).all()))


@dataclass(slots=True)
class PredictedSteps:
    """One request's step of n tokens at a context, priced by the roofline on a profile."""

    tokens: np.ndarray
    ms: np.ndarray
    crossover: int | None   # the fewest tokens whose step is compute-bound (None: none up to MAX_TOKENS)


def predicted_steps(shape, nbytes, profile, dtype, math_, context: int, hi: int = MAX_TOKENS) -> PredictedSteps:
    """Step time against the tokens one request computes in it (a verification of n - 1 guesses), `context`
    tokens already cached: the weights are read once whatever n, the arithmetic grows with n."""
    tokens = np.unique(np.round(2.0 ** np.arange(0, math.log2(hi) + 0.01, 0.125))).astype(int)
    times, crossover = [], None
    for n in tokens:
        p = predict(step_cost(shape, nbytes, [int(n)], [int(context + n)]), profile, dtype, math_)
        times.append(p.time_s * 1000.0)
        if crossover is None and p.bound is Bound.COMPUTE:
            crossover = int(n)
    if crossover is not None:   # the exact first n between the sampled ones
        low = int(tokens[max(0, int(np.searchsorted(tokens, crossover)) - 1)])
        for n in range(low, crossover + 1):
            if predict(step_cost(shape, nbytes, [n], [context + n]), profile, dtype, math_).bound is Bound.COMPUTE:
                crossover = n
                break
    return PredictedSteps(tokens.astype(float), np.array(times), crossover)


def predicted_at(pred: PredictedSteps, n: float) -> float:
    return float(np.interp(n, pred.tokens, pred.ms))
