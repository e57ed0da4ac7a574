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

from backend.shape import ModelShape


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
