"""Which proposed tokens a verification step keeps: the rule that leaves the target's output unchanged.

Both proposers here draft greedily, so the draft distribution q is one-hot on the proposed token x.
Greedy (temperature 0): keep x while it is the target's argmax; the first disagreement is replaced by
that argmax. Sampling: the rejection rule of Leviathan et al. 2023 and Chen et al. 2023, keep x with
probability min(1, p(x) / q(x)) = p(x), else draw from norm(max(p - q, 0)), which for a one-hot q is
p with x removed and renormalised. Either way every emitted token is distributed exactly as the target's
own sampling would draw it (tests/engine/test_spec_acceptance.py counts it over many draws). After K
accepted guesses the last position's distribution gives a bonus token, so a step emits 1 to K+1 tokens.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


def target_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """(R, vocab) float32 probabilities the runner's sample() draws from: softmax of logits / T, and with
    top_p < 1 only the nucleus (the same rule: drop a token once the mass before it reaches top_p)."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        drop = sorted_probs.cumsum(dim=-1) - sorted_probs > top_p
        probs = probs.scatter(-1, order, sorted_probs.masked_fill(drop, 0.0))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def accept_greedy(best: Sequence[int], drafts: Sequence[int]) -> tuple[int, int]:
    """(drafts kept, the target's own next token) from the argmax at each of the len(drafts) + 1 positions."""
    kept = 0
    while kept < len(drafts) and best[kept] == drafts[kept]:
        kept += 1
    return kept, int(best[kept])


def accept_sampled(probs: torch.Tensor, drafts: Sequence[int], generator: torch.Generator | None) -> tuple[int, int]:
    """(drafts kept, the next token) by rejection sampling against the target's (len(drafts) + 1, vocab)
    probabilities, for a draft that proposed each token with certainty."""
    k = len(drafts)
    if k:
        draws = torch.rand(k, generator=generator, device=probs.device).tolist()
        ids = torch.tensor(drafts, device=probs.device)
        chances = probs[torch.arange(k, device=probs.device), ids].tolist()   # p_i(x_i)
        for i, (u, chance) in enumerate(zip(draws, chances)):
            if u < chance:
                continue
            residual = probs[i].clone()
            residual[drafts[i]] = 0.0   # p with x removed; multinomial renormalises
            if not residual.sum() > 0:   # x held all the mass (up to rounding): it is kept
                continue
            return i, int(torch.multinomial(residual, 1, generator=generator))
    return k, int(torch.multinomial(probs[k], 1, generator=generator))
