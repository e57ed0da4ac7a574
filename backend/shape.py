"""A model's shape: everything about an architecture that sizes its tensors and the roofline's arithmetic.

Plain data with no torch, in the vocabulary layer: the loaders build it, the models are built from
it, the roofline and the simulator price it, and events carry it to the window.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class ModelShape:
    """Everything about an architecture that sizes its tensors (and the roofline's arithmetic)."""

    arch: str                  # "llama" (Llama, Mistral, Qwen2, SmolLM, the MoE families), "gemma" or "gpt2"
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int     # the MLP's width (an MoE: each expert's)
    max_position: int          # context length the model supports
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    attention_bias: bool = False   # Qwen2 has q/k/v biases
    sliding_window: int | None = None   # Mistral: each query sees only the last this many keys
    qk_norm: bool = False      # Qwen3: q and k each RMS-normalized per head (weights of head_dim) before rotary
    # Mixture of experts (Mixtral, Qwen3-MoE, OLMoE): each layer's MLP is num_experts SwiGLU experts of
    # intermediate_size each, a token routed to experts_per_token of them; 0 experts: a dense MLP.
    num_experts: int = 0
    experts_per_token: int = 0
    norm_topk_prob: bool = False   # the top-k routing weights renormalized to sum to 1 (Mixtral, most Qwen3-MoE)
    qk_norm_full: bool = False     # OLMoE: qk_norm spans each whole projection (heads * head_dim), not each head
    clip_qkv: float | None = None  # OLMoE: q, k and v clamped to [-clip_qkv, clip_qkv] after the norms
    # Gemma 2 and 3 (arch "gemma"): (1 + w) RMSNorms, post-norms on both sublayers, GeGLU, scaled embeddings.
    global_layers: tuple[int, ...] = ()   # with sliding_window: the layers that see every key (Gemma's full ones)
    query_pre_attn_scalar: float | None = None   # scores scaled by its ** -0.5 (None: head_dim ** -0.5)
    attn_softcap: float | None = None    # Gemma 2: each attention score s becomes c * tanh(s / c)
    final_softcap: float | None = None   # Gemma 2: the same cap on the logits
    rope_local_theta: float | None = None   # Gemma 3: the sliding layers' rotary base (no scaling on them)

    def num_params(self) -> int:
        """Parameters, counting tied embeddings once."""
        d, h, kv, hd, ff = self.hidden_size, self.num_heads, self.num_kv_heads, self.head_dim, self.intermediate_size
        embed = self.vocab_size * d
        head = 0 if self.tie_embeddings else self.vocab_size * d
        if self.arch == "gpt2":
            attn = d * 3 * d + 3 * d + d * d + d
            mlp = d * ff + ff + ff * d + d
            norms = 4 * d
            return embed + head + self.max_position * d + self.num_layers * (attn + mlp + norms) + 2 * d
        attn = d * (h + 2 * kv) * hd + h * hd * d
        if self.attention_bias:
            attn += (h + 2 * kv) * hd
        mlp = 3 * d * ff if not self.num_experts else self.num_experts * (3 * d * ff + d)   # experts and router
        qk_norms = ((h + kv) * hd if self.qk_norm_full else 2 * hd) if self.qk_norm else 0   # OLMoE's span q and k
        norms = (4 if self.arch == "gemma" else 2) * d + qk_norms
        return embed + head + self.num_layers * (attn + mlp + norms) + d

    def num_active_params(self) -> int:
        """Parameters a token's forward pass touches: all of a dense model's; an MoE's without the
        experts it is not routed to (its router and its experts_per_token experts kept)."""
        unrouted = self.num_experts - self.experts_per_token
        return self.num_params() - self.num_layers * unrouted * 3 * self.hidden_size * self.intermediate_size

    def window(self, layer: int) -> int | None:
        """The keys this layer's queries see: the last sliding_window of them, or None for every one."""
        return None if layer in self.global_layers else self.sliding_window

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes
