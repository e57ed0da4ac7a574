"""A model's shape: everything about an architecture that sizes its tensors and the roofline's arithmetic.

Plain data with no torch, in the vocabulary layer: the loaders build it, the models are built from
it, the roofline and the simulator price it, and events carry it to the window.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class ModelShape:
    """Everything about an architecture that sizes its tensors (and the roofline's arithmetic)."""

    arch: str                  # "llama" (Llama, Mistral, Qwen2, SmolLM) or "gpt2"
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    max_position: int          # context length the model supports
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    attention_bias: bool = False   # Qwen2 has q/k/v biases
    sliding_window: int | None = None   # Mistral: each query sees only the last this many keys
    qk_norm: bool = False      # Qwen3: q and k each RMS-normalized per head (weights of head_dim) before rotary

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
        mlp = 3 * d * ff
        norms = 2 * d
        return embed + head + self.num_layers * (attn + mlp + norms) + d

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes
