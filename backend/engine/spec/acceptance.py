"""Which proposed tokens a verification step keeps: the rule that leaves the target's output unchanged.

Both proposers here draft greedily, so the draft distribution q is one-hot on the proposed token x.
Greedy (temperature 0): keep x while it is the target's argmax; the first disagreement is replaced by
that argmax. Sampling: the rejection rule of Leviathan et al. 2023 and Chen et al. 2023, keep x with
probability min(1, p(x) / q(x)) = p(x), else draw from norm(max(p - q, 0)), which for a one-hot q is
p with x removed and renormalised. Either way every emitted token is distributed exactly as the target's
own sampling would draw it (tests/engine/test_spec_acceptance.py counts it over many draws). After K
accepted guesses the last position's distribution gives a bonus token, so a step emits 1 to K+1 tokens.

The randomness is keyed, not streamed: the token at a request's output position i is the inverse CDF of p at
one uniform drawn from (seed, request id, i) alone (`keyed_uniform`), and a verification keeps guess x at
position i exactly when that token is x, else emits that token. For a one-hot q this is the rule above: x is
kept with probability p(x), and a token t != x comes out with probability p(t), that is p with x removed and
renormalised, times the chance 1 - p(x) of a rejection. It also makes the emitted token at every position
the one plain sampling with the same seed would draw there, whether or not the step that reached it
guessed: a run's tokens depend on its seed and its logits, not on which steps the backoff let guess (which
it decides from measured step times), nor on what else shared the batch.
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


_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finaliser: 64 well-mixed bits from any 64."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def keyed_uniform(seed: int, request_id: int, position: int) -> float:
    """A uniform in [0, 1) that depends on the run's seed, the request and its output position only."""
    return (_mix(_mix(_mix(seed & _MASK) ^ (request_id & _MASK)) ^ (position & _MASK)) >> 11) * 2.0 ** -53


def inverse_cdf(probs: torch.Tensor, uniforms: Sequence[float]) -> list[int]:
    """The token of each row of (R, vocab) probabilities at its uniform: the first whose cumulative mass
    passes u times the row's total (in float64, so a token of zero probability is never chosen)."""
    cdf = probs.double().cumsum(dim=-1)                                        # (R, vocab)
    targets = torch.tensor(uniforms, dtype=torch.float64, device=probs.device).unsqueeze(-1) * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, targets, right=True).squeeze(-1)          # (R,)
    return tokens.clamp_(max=probs.shape[-1] - 1).tolist()


def accept_sampled(probs: torch.Tensor, drafts: Sequence[int], uniforms: Sequence[float]) -> tuple[int, int]:
    """(drafts kept, the next token) against the target's (len(drafts) + 1, vocab) probabilities, for a draft
    that proposed each token with certainty: `uniforms` holds each position's keyed draw (module docstring)."""
    tokens = inverse_cdf(probs, uniforms[:len(drafts) + 1])
    for i, guess in enumerate(drafts):
        if tokens[i] != guess:
            return i, tokens[i]
    return len(drafts), tokens[len(drafts)]
