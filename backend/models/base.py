"""The contract between the runner and the decoder models.

A step is a flat list of N tokens from several requests. Linear layers run once on the
(N, hidden) matrix -- one weight read for every token in the step -- and attention runs
per request, against that request's keys in the preallocated, paged KV cache (a pool of
blocks; the request's `slot` is its row of the block table, KVCache below):

  * prefill segments: a run of consecutive prompt tokens of one request (a whole prompt,
    or one chunk of it under chunked prefill), causal within the segment and attending to
    the `start` tokens already cached for it;
  * decode tokens: one token per decoding request, batched together into one attention
    call over each request's cached tokens.

Flat token order is: every prefill segment in list order, then the decode tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from backend.shape import KV_BLOCK_SIZE, ModelShape


@dataclass(slots=True)
class Segment:
    """Prompt tokens of one request in this step."""

    slot: int      # the request's row of the KV cache's block table
    start: int     # position of the segment's first token = tokens already cached for it
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
    """Preallocated keys and values in a pool of fixed-size blocks, read through a block table.

    k[layer] and v[layer] have shape (num_kv_heads, num_blocks, block_size, head_dim): one pool of
    blocks per kv head, block b of every head holding the same block_size positions. A work item of
    the C kernels is one kv head (a decode token's, a prefill unit's), so it reads one head's pool
    only: a block is block_size * head_dim contiguous values, and with the identity table a row's
    blocks lie end to end in each head's pool, exactly as the slot layout had them. Measured on
    the decode kernel (batch 32, 300 keys), (num_blocks, kv_heads, block_size, head_dim), which
    puts the other heads' blocks between one head's, read 1.2-1.3x slower than the slot layout even
    with an identity table; this one 1.0-1.1x (kernel-only runs on a shared 2-core machine).

    block_table (num_rows, max_blocks_per_row) int32, on the cache's device: row r is the table of
    the request whose `slot` is r, and token (r, pos) lives in block block_table[r, pos // block_size]
    at offset pos % block_size. The default table is the identity: row r owns blocks
    r * B .. r * B + B - 1 (B = max_blocks_per_row), the old slot layout. A paged allocator hands a
    row other blocks with `set_row`; the table is written in place, so a captured CUDA graph that
    reads it stays valid.
    """

    def __init__(self, shape: ModelShape, num_slots: int, max_len: int, device, dtype, block_size: int = KV_BLOCK_SIZE,
                 num_blocks: int | None = None):
        if block_size < 1 or block_size & (block_size - 1):
            raise ValueError(f"the KV block size must be a power of two, got {block_size}")
        self.num_slots = num_slots            # rows of the block table (the scheduler's slots)
        self.max_len = max_len
        self.block_size = block_size
        self.max_blocks_per_row = -(-max_len // block_size)
        self.num_blocks = num_slots * self.max_blocks_per_row if num_blocks is None else num_blocks
        size = (shape.num_kv_heads, self.num_blocks, block_size, shape.head_dim)
        self.k = [torch.zeros(size, device=device, dtype=dtype) for _ in range(shape.num_layers)]
        self.v = [torch.zeros(size, device=device, dtype=dtype) for _ in range(shape.num_layers)]
        # the identity table (where there are blocks enough: a smaller pool starts with every row empty, -1)
        table = torch.arange(num_slots * self.max_blocks_per_row, dtype=torch.int32).view(num_slots, -1)
        self.block_table = table.masked_fill(table >= self.num_blocks, -1).to(device)
        self.pointers: torch.Tensor | None = None   # the tensors' addresses, for the C decode layers (llama.py)

    def set_row(self, row: int, block_ids) -> None:
        """Give table row `row` these blocks, in position order (the rest of the row becomes -1)."""
        ids = torch.as_tensor(block_ids, dtype=torch.int32).flatten()
        if ids.numel() > self.max_blocks_per_row:
            raise ValueError(f"{ids.numel()} blocks for a row of at most {self.max_blocks_per_row}")
        if ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < self.num_blocks):
            raise ValueError(f"block ids outside this pool's 0..{self.num_blocks - 1}")
        row_table = self.block_table[row]
        row_table.fill_(-1)
        row_table[:ids.numel()].copy_(ids)   # in place: graphs and kernels hold this tensor

    def locate(self, rows: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(block, offset) of each token (rows[i], positions[i]): long tensors of positions' shape."""
        blocks = self.block_table[rows, positions // self.block_size].long()
        return blocks, positions % self.block_size
