"""What the engine loop asks before each step: guesses for every decoding request, with a backoff.

The speculator caps each request's guesses at K and at what it may still emit (a verification emits up
to guesses + 1 tokens), asks its proposer (ngram.py, draft.py) and sets `Request.spec_ids`; every other
running request gets none.

Guessing pays when a verification emits more tokens than it costs decode steps. Both sides are measured
as the run goes: each request's tokens per verification (a running mean that halves the weight of the
past each time), and the engine's verification step time over its plain decode step time (running means
of the decode-only steps; on this CPU, where a verification runs as decode rows, a 5-token one costs about
1.1x a decode step at float32 and 2.2x at q4_1, whose float32 multiply-adds (one a weight a row, the
weights widened in registers) outweigh its 4-bit read from a few rows up; on a GPU near 1x). A request whose mean falls below that ratio sits out 2, 4, 8, ... steps
(at most MAX_PAUSE) before it guesses again to probe; one that pays guesses every step. Open chat, where the
guesses rarely hold, so falls back to plain decodes instead of paying for guesses that miss.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from backend.records import Phase, RequestStatus

MAX_PAUSE = 64   # steps a request that does not pay sits out at most before it probes again
_DECODING = RequestStatus.DECODING


@dataclass(slots=True)
class _Backoff:
    seen: int = 0                # verifications of the request already looked at
    emitted: float | None = None # running mean of the tokens a verification emitted (kept guesses + 1)
    pause: int = 0               # steps sat out after the last verification that did not pay
    left: int = 0                # steps still to sit out


class Speculator:
    def __init__(self, proposer, num_tokens: int, backoff: bool = True):
        self.proposer = proposer
        self.num_tokens = num_tokens
        self.backoff = backoff
        self._state: dict[int, _Backoff] = {}
        self._plain_ms: float | None = None    # running mean of a decode-only step without guesses
        self._verify_ms: float | None = None   # ... and of one with guesses

    @property
    def cost_ratio(self) -> float:
        """A verification step's time over a plain decode step's, as measured so far (1 until both are)."""
        if self._plain_ms is None or self._verify_ms is None or self._plain_ms <= 0:
            return 1.0
        return max(1.0, self._verify_ms / self._plain_ms)

    def observe(self, step) -> None:
        """A step's record: decode-only steps' times feed the cost ratio."""
        if step.phase is not Phase.DECODE:
            return
        if step.num_proposed_tokens:
            self._verify_ms = _mean(self._verify_ms, step.duration_ms)
        else:
            self._plain_ms = _mean(self._plain_ms, step.duration_ms)

    def propose(self, running: Sequence) -> None:
        """Set spec_ids on every running request: guesses for the decoding ones that take them, else []."""
        asked, ks = [], []
        for r in running:
            r.spec_ids = []
            if r.status is not _DECODING:
                continue
            k = min(self.num_tokens, r.max_new_tokens - len(r.output_ids) - 1)
            if k >= 1 and not self._sits_out(r):
                asked.append(r)
                ks.append(k)
        if asked:
            for r, k, guess in zip(asked, ks, self.proposer.guesses(asked, ks)):
                r.spec_ids = list(guess[:k])
        if len(self._state) > 4 * max(len(running), 8):   # forget finished requests
            alive = {r.request_id for r in running}
            self._state = {rid: s for rid, s in self._state.items() if rid in alive}

    def _sits_out(self, request) -> bool:
        if not self.backoff:
            return False
        state = self._state.setdefault(request.request_id, _Backoff())
        done = request.spec_accepted
        if len(done) > state.seen:
            for kept in done[state.seen:]:
                state.emitted = _mean(state.emitted, kept + 1)
            state.seen = len(done)
            if state.emitted <= self.cost_ratio:   # it did not pay (or only broke even): sit out, longer each time
                state.pause = min(MAX_PAUSE, max(2, 2 * state.pause))
                state.left = state.pause
            else:
                state.pause = state.left = 0
        if state.left > 0:
            state.left -= 1
            return True
        return False


def _mean(old: float | None, new: float) -> float:
    """A running mean that halves the past's weight at each new value."""
    return new if old is None else 0.5 * (old + new)
