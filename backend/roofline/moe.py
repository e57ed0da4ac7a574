"""Mixture-of-experts pricing: how many of a layer's experts a step reads, and what a token multiplies by.

A dense layer reads every weight once per step. An MoE layer reads its shared matrices (attention,
router, DeepSeek's shared experts) and only the routed experts some token of the step was sent to:
one token reads k of the E experts, a large prefill all E. Between the two, under uniform routing
(each token's k experts a uniformly random k-subset, tokens independent), an expert is missed by
one token with probability 1 - k/E and by all B tokens with (1 - k/E)^B, so the step reads in
expectation

    E * (1 - (1 - k/E)^B)

experts per layer. Real routers are not uniform (some experts are popular), which makes the
true union smaller; the step records' `experts_touched` is the measured count to hold it against.
The FLOPs do not depend on the union: every token multiplies by exactly k experts (and every
shared expert). The per-layer functions here are per MoE layer: a model whose first layers are
dense (DeepSeek's first_k_dense_replace) has moe_layers(shape) of them.
"""
from __future__ import annotations

from backend.shape import expert_params, moe_layers

__all__ = ["expected_experts", "expert_params", "moe_layers", "unread_expert_params", "unused_expert_params"]


def expected_experts(num_experts: int, experts_per_token: int, tokens: float) -> float:
    """Expected distinct experts per layer that `tokens` tokens touch under uniform routing:
    experts_per_token for one token, approaching num_experts as the step grows."""
    if num_experts <= 0 or tokens <= 0:
        return 0.0
    return num_experts * (1.0 - (1.0 - experts_per_token / num_experts) ** tokens)


def unused_expert_params(shape) -> int:
    """Per MoE layer, the routed expert weights a token does not multiply by (0 for a dense shape)."""
    return (getattr(shape, "num_experts", 0) - getattr(shape, "experts_per_token", 0)) * expert_params(shape)


def unread_expert_params(shape, tokens: float) -> float:
    """Per MoE layer, the routed expert weights a step of `tokens` tokens is expected not to read (0 for a dense shape)."""
    experts = getattr(shape, "num_experts", 0)
    return (experts - expected_experts(experts, getattr(shape, "experts_per_token", 0), tokens)) * expert_params(shape)
