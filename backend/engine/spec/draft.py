"""A draft model: a smaller or coarser model of the same vocabulary guesses K tokens greedily.

It has its own runner (a KV cache of the target's rows, slot layout) and keeps, per request, how much of
the sequence its cache holds: before guessing it computes what the target accepted since (one prefill
segment per request: at first the whole prompt), which yields the first guess, then K-1 batched greedy
decode steps yield the rest. Its guesses fed back as inputs stay valid in its cache as far as the target
kept them; past that they are recomputed next time. Its time is the step record's draft_ms.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from backend.engine.runner import kernel_math
from backend.loaders.device import device_scope
from backend.models import make_step_batch


class DraftProposer:
    def __init__(self, runner):
        self.runner = runner
        self._owner: dict[int, int] = {}                    # cache row -> the request whose tokens it holds
        self._fed: dict[int, tuple[int, list[int]]] = {}    # request -> (its length when guessing, guesses fed)

    def _valid(self, request, ids: Sequence[int]) -> int:
        """Tokens of `ids` whose keys and values the draft's row holds (at most all but the last)."""
        rid, row = request.request_id, request.slot
        if self._owner.get(row) != rid:   # a new request in this row, or this one back after a preemption
            self._fed.pop(self._owner.get(row), None)
            self._owner[row] = rid
            self._fed.pop(rid, None)
            return 0
        base, fed = self._fed.get(rid, (0, []))
        kept = 0
        while kept < len(fed) and base + kept < len(ids) and ids[base + kept] == fed[kept]:
            kept += 1
        return min(base + kept, len(ids) - 1)

    def guesses(self, requests: Sequence, ks: Sequence[int]) -> list[list[int]]:
        runner = self.runner
        every = [r.all_ids for r in requests]
        segments = []
        for r, ids in zip(requests, every):
            start = self._valid(r, ids)
            segments.append((r.slot, start, ids[start:]))
        out: list[list[int]] = [[] for _ in requests]
        with device_scope(runner.device), torch.inference_mode(), kernel_math(runner.device, runner.math):
            logits = runner.model(make_step_batch(segments, [], runner.device), runner.cache)   # (R, vocab)
            for guess, token in zip(out, logits.argmax(dim=-1).tolist()):
                guess.append(token)
            for step in range(1, max(ks)):
                active = [i for i, k in enumerate(ks) if k > step]
                decode = [(requests[i].slot, len(every[i]) + step - 1, out[i][-1]) for i in active]
                logits = runner.model(make_step_batch([], decode, runner.device), runner.cache)   # (A, vocab)
                for i, token in zip(active, logits.argmax(dim=-1).tolist()):
                    out[i].append(token)
        for r, ids, guess in zip(requests, every, out):
            self._fed[r.request_id] = (len(ids), guess[:-1])   # the last guess was never an input
        return out
