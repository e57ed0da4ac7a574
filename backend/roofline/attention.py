"""Attention's share of the roofline: FLOPs per (query, key) pair, sliding windows, KV sharding.

A step's attention work is its (query, key) pairs summed over the layers, and its KV traffic the
tokens each layer reads; a layer with a sliding window (Mistral every layer, Gemma and gpt-oss
every other) caps both at the window. step_cost (backend/roofline/cost.py) has each request's
lengths and caps exactly; a step or phase known only by its totals is capped by totals_sums'
approximation. Multi-head latent attention (kv_lora_rank > 0) is priced in the absorbed form.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from backend.shape import is_mla

if TYPE_CHECKING:
    from backend.shape import ModelShape


def kv_heads_for_sharding(shape: ModelShape) -> int:
    """The KV heads tensor parallelism can split the cache over: num_kv_heads, or 1 for MLA, whose one
    latent per token is replicated on every tensor-parallel rank."""
    return 1 if is_mla(shape) else shape.num_kv_heads


def attention_flops_per_pair(shape: ModelShape) -> int:
    """FLOPs of one (query, key) pair in one layer, over all heads.

    Standard: 2 x head_dim for the score and as many for the weighted value, per head. MLA in the
    absorbed form decode kernels run (FlashMLA, FlashInfer's MLA): each head's query is taken into
    the latent space, so a score costs 2 x (kv_lora_rank + qk_rope_head_dim) and a value 2 x kv_lora_rank
    (the projections in and out of the latent are counted with the matrices, per token)."""
    if is_mla(shape):
        return 2 * shape.num_heads * (2 * shape.kv_lora_rank + shape.qk_rope_head_dim)
    return 4 * shape.num_heads * shape.head_dim


def windowed_layers(shape: ModelShape) -> tuple[int, int | None]:
    """(how many layers have a sliding window, its width): (0, None) when none has one."""
    window = getattr(shape, "sliding_window", None)
    if not window:
        return 0, None
    return shape.num_layers - len(set(getattr(shape, "global_layers", ())) & set(range(shape.num_layers))), window


def capped_sum(low: int, high: int, cap: int) -> int:
    """sum(min(x, cap) for x in range(low, high + 1)), in closed form."""
    if high < low:
        return 0
    top = min(high, cap)
    below = (top - low + 1) * (low + top) // 2 if top >= low else 0
    return below + max(0, high - max(low - 1, cap)) * cap


def layer_sums(shape: ModelShape, pairs: float, context: float, window_pairs: float,
                window_context: float) -> tuple[float, float]:
    """(attention pairs, KV tokens read) summed over the layers: the full layers' own, the sliding ones' capped."""
    sliding, _ = windowed_layers(shape)
    full = shape.num_layers - sliding
    return full * pairs + sliding * window_pairs, full * context + sliding * window_context


def totals_sums(shape: ModelShape, tokens: float, pairs: float, context_tokens: float,
                 requests: float) -> tuple[float, float]:
    """layer_sums for a step (or phase) known only by its totals; `requests` are its logit rows (one per
    request per step). The sliding layers' pairs are capped at window per token and their KV reads at
    window - 1 per request plus the new tokens: exact for decode steps whose contexts all reach the
    window, an overestimate where some are shorter (each term is also capped at the full layers' own)."""
    _, window = windowed_layers(shape)
    if not window:
        return layer_sums(shape, pairs, context_tokens, 0, 0)
    window_pairs = min(pairs, tokens * window)
    window_context = min(context_tokens, requests * (window - 1) + tokens)
    return layer_sums(shape, pairs, context_tokens, window_pairs, window_context)
