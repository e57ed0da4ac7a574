"""What the engine loop asks before each step: guesses for every decoding request, with a backoff.

The speculator caps each request's guesses at K and at what it may still emit (a verification emits up
to guesses + 1 tokens), asks its proposer (ngram.py, draft.py) and sets `Request.spec_ids`; every other
running request gets none. A verification that keeps nothing costs a step of K+1 tokens for one token,
so a request whose last verification kept nothing sits out the next 1, 2, 4, ... steps (doubling while it
keeps failing, at most MAX_PAUSE; a kept guess resets it): open chat, where lookups rarely hit, falls
back to plain decodes instead of paying for guesses that miss.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from backend.records import RequestStatus

MAX_PAUSE = 16   # steps a failing request sits out at most before guessing again

_DECODING = RequestStatus.DECODING


@dataclass(slots=True)
class _Backoff:
    seen: int = 0        # verifications of the request already looked at
    pause: int = 0       # steps sat out after the last failure
    left: int = 0        # steps still to sit out


class Speculator:
    def __init__(self, proposer, num_tokens: int, backoff: bool = True):
        self.proposer = proposer
        self.num_tokens = num_tokens
        self.backoff = backoff
        self._state: dict[int, _Backoff] = {}

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
            state.seen = len(done)
            if done[-1] == 0:
                state.pause = min(MAX_PAUSE, max(1, 2 * state.pause))
                state.left = state.pause
            else:
                state.pause = state.left = 0
        if state.left > 0:
            state.left -= 1
            return True
        return False
