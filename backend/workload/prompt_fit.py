"""Prompts of a given token length: synthetic ids, or the shipped texts fitted to the length.

Every request source builds its prompts here, so a trace's lengths become prompts exactly the way
a drawn workload's do. Text prompts are fitted to the length: a shipped prompt is tokenized and cut
to it, or followed by further shipped prompts until it is long enough, so the lengths are exact
while the tokens stay real text; the text returned holds the prompts used in full (even where the
tokens were cut).

Synthetic prompts with Mooncake block ids (512 tokens a block) are built block by block, each
block's ids drawn from that block's id alone, so requests the trace says share a prefix share it
here too.
"""
from __future__ import annotations

import random
from typing import Callable

from backend.errors import InputError
from backend.workload.prompts import PROMPTS

from backend.workload.trace import HASH_BLOCK_TOKENS as BLOCK_TOKENS   # Mooncake's hash_ids: one id per 512 tokens


class PromptMaker:
    def __init__(self, prompt_source: str, tokenize: Callable[[str], list[int]] | None, vocab_size: int, seed: int):
        if prompt_source == "text" and tokenize is None:
            raise InputError("prompt_source 'text' needs a tokenizer, and this model has none; use 'synthetic'")
        if vocab_size < 1:
            raise InputError(f"vocab_size must be at least 1, got {vocab_size}")
        self.prompt_source = prompt_source
        self._tokenize = tokenize
        self._vocab_size = vocab_size
        self._seed = seed
        self._tokenized: dict[int, list[int]] = {}
        self._blocks: dict[int, tuple[list[int], str]] = {}

    def make(self, rng: random.Random, n: int, hash_ids: tuple[int, ...] = ()) -> tuple[list[int], str]:
        """(prompt ids of length n, the text they came from: "" for synthetic ids); draws from rng."""
        if self.prompt_source == "text" and not hash_ids:
            return self._fit_text(rng, n)
        ids: list[int] = []
        texts: list[str] = []
        for block in hash_ids:
            if len(ids) >= n:
                break
            block_ids, block_text = self._block(block)
            ids.extend(block_ids)
            texts.append(block_text)
        ids = ids[:n]
        if self.prompt_source == "text":   # a trace's blocks as real text, then more text to the length
            rest, text = self._fit_text(rng, n - len(ids)) if len(ids) < n else ([], "")
            return ids + rest, "".join(texts) + text
        if self._vocab_size == 1:   # one id to draw from (the simulator, which reads only the lengths): no draws
            ids.extend([0] * (n - len(ids)))
        else:
            ids.extend(rng.choices(range(self._vocab_size), k=n - len(ids)))
        return ids, ""

    def _block(self, block: int) -> tuple[list[int], str]:
        """A hash id's 512 tokens, drawn from the id (and the workload seed) alone: equal ids, equal blocks.
        Text prompts fill the block with the shipped texts' tokens (the text returned is theirs, in full)."""
        if block not in self._blocks:
            rng = random.Random(f"{self._seed}:block:{block}")
            if self.prompt_source == "text":
                self._blocks[block] = self._fit_text(rng, BLOCK_TOKENS)
            elif self._vocab_size == 1:
                self._blocks[block] = [0] * BLOCK_TOKENS, ""
            else:
                self._blocks[block] = rng.choices(range(self._vocab_size), k=BLOCK_TOKENS), ""
        return self._blocks[block]

    def _fit_text(self, rng: random.Random, n: int) -> tuple[list[int], str]:
        ids: list[int] = []
        texts: list[str] = []
        while len(ids) < n:
            k = rng.randrange(len(PROMPTS))
            if k not in self._tokenized:
                self._tokenized[k] = list(self._tokenize(PROMPTS[k]))
                if not self._tokenized[k]:
                    raise InputError("the tokenizer turned a shipped prompt into no tokens")
            texts.append(PROMPTS[k])
            ids.extend(self._tokenized[k])
        return ids[:n], "\n\n".join(texts)
