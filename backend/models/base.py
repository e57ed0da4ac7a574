"""The contract between the runner and the decoder models.

A step is a flat list of N tokens from several requests. Linear layers run once on the
(N, hidden) matrix -- one weight read for every token in the step -- and attention runs
per request, against that request's slot of the preallocated KV cache:

  * prefill segments: a run of consecutive prompt tokens of one request (a whole prompt,
    or one chunk of it under chunked prefill), causal within the segment and attending to
    the `start` tokens already in the slot;
  * decode tokens: one token per decoding request, batched together into one attention
    call over the slots' cached tokens.

Flat token order is: every prefill segment in list order, then the decode tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


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


@dataclass(slots=True)
class Segment:
    """Prompt tokens of one request in this step."""

    slot: int      # the request's KV cache slot
    start: int     # position of the segment's first token = tokens already cached in the slot
    length: int    # tokens in this segment


@dataclass(slots=True)
class StepBatch:
    """One step's input, already on the model's device."""

    input_ids: torch.Tensor        # (N,) long: prefill segments' tokens, then one token per decode request
    positions: torch.Tensor        # (N,) long: each token's position in its sequence
    prefill: list[Segment]
    decode_slots: torch.Tensor     # (D,) long: slot of each decode request, in flat order
    decode_positions: torch.Tensor # (D,) long: position of each decode token (= tokens cached before it)
    decode_slot_range: tuple[int, int] | None  # (first, last+1) when decode_slots are consecutive and ascending, else None
    logit_rows: torch.Tensor       # (M,) long: flat indices whose next-token logits are wanted

    @property
    def num_decode(self) -> int:
        return int(self.decode_slots.shape[0])


class KVCache:
    """Preallocated keys and values, one slot per running request, written in place.

    k[layer] and v[layer] have shape (num_slots, num_kv_heads, max_len, head_dim).
    """

    def __init__(self, shape: ModelShape, num_slots: int, max_len: int, device, dtype):
        self.num_slots = num_slots
        self.max_len = max_len
        size = (num_slots, shape.num_kv_heads, max_len, shape.head_dim)
        self.k = [torch.zeros(size, device=device, dtype=dtype) for _ in range(shape.num_layers)]
        self.v = [torch.zeros(size, device=device, dtype=dtype) for _ in range(shape.num_layers)]
        self.pointers: torch.Tensor | None = None   # the tensors' addresses, for the C decode layers (llama.py)
