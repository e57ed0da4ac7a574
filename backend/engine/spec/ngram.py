"""Prompt lookup: guess that the text goes on as it did after the last place its latest n tokens occurred.

Input-grounded tasks (summarise, edit, answer from a given text) copy spans of the prompt, so the tokens
after an earlier occurrence of the current suffix are often the next ones. No second model: a search
over the request's prompt and output, longest n first (from ngram_max down to ngram_min), the most
recent earlier occurrence winning, as vLLM's `ngram` proposer and transformers' prompt_lookup_num_tokens do.
"""
from __future__ import annotations

from collections.abc import Sequence


def lookup(ids: Sequence[int], k: int, ngram_min: int, ngram_max: int) -> list[int]:
    """Up to k tokens that followed the most recent earlier occurrence of ids' last n tokens, for the
    largest n in [ngram_min, ngram_max] that occurs; [] when none does."""
    size = len(ids)
    last = ids[-1]
    # the earlier positions holding the last token, newest first: every match ends at one of them
    ends = [j for j in range(size - 2, -1, -1) if ids[j] == last]
    if not ends:
        return []
    for n in range(min(ngram_max, size - 1), ngram_min - 1, -1):
        suffix = ids[size - n:]
        for j in ends:
            start = j - n + 1
            if start >= 0 and ids[start:j + 1] == suffix:
                return list(ids[j + 1:j + 1 + k])
    return []


class NgramProposer:
    """Guesses by prompt lookup, for every request the speculator asks about."""

    def __init__(self, ngram_min: int, ngram_max: int):
        self.ngram_min = ngram_min
        self.ngram_max = ngram_max

    def guesses(self, requests: Sequence, ks: Sequence[int]) -> list[list[int]]:
        return [lookup(r.all_ids, k, self.ngram_min, self.ngram_max) for r, k in zip(requests, ks)]
