"""Attention against the paged KV cache, shared by the Llama and GPT-2 blocks.

`AttentionPlan.build` does once per step what every layer shares (flat offsets, masks, the
decode key length, where each token's key goes in the block pool); `attend` runs per layer: it
writes the step's keys and values into their blocks in place and attends each query to its own
request's keys, found through the cache's block table (base.KVCache).

The C kernels read the blocks in place through the table, and the C path writes a prefill
segment's keys with a memcpy per token (ops.kv_write; torch's index_put took 0.3 ms to several ms
a layer for 512 tokens here). The torch path (CUDA, bfloat16, no C compiler) writes with one
index_put per layer and reads a request's keys with one gather through the table (_gather): SDPA
takes a dense (kv, keys, hd) tensor, and a token-major view of paged storage does not exist. With
the old slot layout a decode batch of consecutive slots was a view; now it is that gather, on the
torch path only.

On the CPU in float32 the decode tokens' attention (and their cache writes) is one call per
layer into the project's C kernel (backend/kernels/attention.c) where it is built: torch's SDPA
costs about 100 us a layer there for a few microseconds of arithmetic. A prefill segment's
attention is a C kernel there too (prefill_attention.c, blocked as flash attention, taking the
start, the window, the scale and the soft cap itself, so it needs no mask): 2-3x faster than
SDPA's CPU kernel for the bundled model's 128- to 512-token prompts.

With `static_len` the plan is for a padded decode batch of fixed size (the CUDA graph path):
every row attends over the first `static_len` keys of its slot, masked by its position, so no
shape and no host value depends on the positions and a captured graph stays valid as they
advance. The caller picks static_len from a few length buckets by the batch's longest context
(backend/engine/cuda_graphs.py), so a step reads the keys its contexts need, not the cache's
whole max_len.

With a sliding `window` W (Mistral's config.sliding_window), the query at position i sees the
keys at positions i - W + 1 .. i, as transformers masks them; the cache still holds every key.
The C decode kernel takes the window too, but the fused decode layer (layer.c, LlamaModel's
decode-only steps) attends from key 0, so by default a step where some decode position is past
the window runs on SDPA with the window's mask instead; a model that runs its layers one at a
time asks for `kernel_window` and keeps the kernel there. A model whose layers have different
windows (Gemma's sliding and global layers) builds one plan per distinct window.

`attend` also takes the model's score scale (Gemma's query_pre_attn_scalar ** -0.5; None is
SDPA's 1 / sqrt(head_dim)) and Gemma 2's soft cap c, which turns each score s into c * tanh(s / c)
before the mask and the softmax. SDPA cannot cap, so capped attention outside the C kernel runs
as transformers' eager attention does: scores, cap, mask, a float32 softmax, values.

On CUDA each prefill segment runs the kernel `attention_kernels.choose_kernel` picks for it (flash
or memory-efficient for first chunks, later chunks and windows, GQA expanded where that is what it
takes, capped scores in blocks of rows), never SDPA's math kernel over the whole score matrix.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from backend.kernels import ops
from backend.models.attention_kernels import (additive as _additive, choose_kernel, run_kernel,
                                              scores_attention as _scores_attention, visible as _visible,
                                              window_mask)
from backend.models.base import KVCache, Segment, StepBatch


@dataclass(slots=True)
class AttentionPlan:
    # (flat offset, segment, mask; None = plain causal, (block, offset) of each of its tokens; None where
    # the C kernel writes them, ops.kv_write). On CUDA
    # the mask is WINDOW_MASK's, over the keys from the window's first (attention_kernels.window_mask),
    # and None where no window cuts.
    segments: list[tuple[int, Segment, torch.Tensor | None, tuple[torch.Tensor, torch.Tensor] | None]]
    num_prefill_tokens: int
    decode_slots: torch.Tensor
    decode_positions: torch.Tensor
    table: torch.Tensor              # the cache's block table (rows, max_blocks) int32, read in place
    decode_len: int                  # keys the longest decode request sees (0: no decode tokens; -1: not computed)
    decode_mask: torch.Tensor | None # (D, 1, 1, decode_len) additive; None when every request sees every key
    decode_kernel: bool = False      # decode tokens go to the C kernel (which needs no key length or mask)
    window: int | None = None        # the sliding window, for the C kernel (the masks above already hold it)
    prefill_kernel: bool = False     # prefill segments go to the C kernel (the segments' masks are then None)
    capability: tuple[int, int] | None = None   # CUDA: the GPU's compute capability, for choose_kernel; None elsewhere
    # the torch decode path: (block, offset) of each decode token, and the blocks of each decode row
    # that hold keys 0..decode_len-1, (D, ceil(decode_len / block_size)) long
    decode_where: tuple[torch.Tensor, torch.Tensor] | None = None
    decode_blocks: torch.Tensor | None = None

    @property
    def rotates_in_kernel(self) -> bool:
        """A decode-only step on the C kernel: it applies the rotary embedding itself, in the same pass."""
        return self.decode_kernel and not self.segments

    @classmethod
    def build(cls, batch: StepBatch, cache: KVCache, dtype: torch.dtype, static_len: int | None = None,
              window: int | None = None, kernel_window: bool = False) -> AttentionPlan:
        """static_len: a decode-only batch of fixed size (the CUDA graph path) whose rows attend over
        the first static_len keys of their slots (more than any row's position), masked by position:
        built from tensors alone, no host read.
        window: a sliding window of keys (None: every earlier key). kernel_window: the caller's
        layers pass the window to the C kernel themselves (through `attend`), never the fused
        decode layer, so the kernel serves decode tokens past the window too."""
        device = batch.input_ids.device
        segments = []
        offset = 0
        static_decode = static_len is not None
        if static_decode and not 0 < static_len <= cache.max_len:
            raise ValueError(f"static key length {static_len} outside this cache's 1..{cache.max_len}")
        prefill_kernel = bool(batch.prefill) and not static_decode and ops.usable(device, dtype)
        capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
        for seg in batch.prefill:
            mask = None
            if capability is not None:   # choose_kernel's kernels need a mask only where a window cuts
                if window is not None and seg.start + seg.length > window:
                    mask = window_mask(seg.start, seg.length, window, dtype, device)   # (L, keys from the window's first)
            elif not prefill_kernel and (seg.start > 0 or (window is not None and seg.length > window)):
                # A later chunk: query i (at position start+i) sees keys 0..start+i. SDPA's is_causal
                # aligns the triangle top-left, which is wrong once there are more keys than queries.
                keys = torch.arange(seg.start + seg.length, device=device)
                queries = torch.arange(seg.start, seg.start + seg.length, device=device)
                mask = _additive(_visible(keys[None, :], queries[:, None], window), dtype)  # (L, start+L)
            where = None if prefill_kernel else cache.locate(torch.full((seg.length,), seg.slot, device=device),
                                                             torch.arange(seg.start, seg.start + seg.length,
                                                                          device=device))
            segments.append((offset, seg, mask, where))
            offset += seg.length
        decode_len, decode_mask = 0, None
        use_kernel = batch.num_decode > 0 and not static_decode and ops.usable(device, dtype)
        if use_kernel and window is not None and not kernel_window:
            # one host read: past the window the kernel, which attends from key 0, would see too much
            use_kernel = int(batch.decode_positions.max()) < window
        if use_kernel:
            decode_len = -1   # not known without a host read, and not needed
        elif batch.num_decode:
            if static_decode:
                decode_len, masked = static_len, True
            else:
                # One host read per step (not per layer): the key length must be a Python int to slice the cache.
                lo, hi = (int(x) for x in batch.decode_positions.aminmax())
                decode_len, masked = hi + 1, lo != hi or (window is not None and hi >= window)
            if masked:  # hide each request's keys past its own position (and before its window)
                keys = torch.arange(decode_len, device=device)[None, :]
                visible = _visible(keys, batch.decode_positions[:, None], window)
                decode_mask = _additive(visible, dtype)[:, None, None, :]  # (D, 1, 1, T)
        decode_where = decode_blocks = None
        if decode_len > 0:   # the torch path: the table looked up once for every layer
            decode_where = cache.locate(batch.decode_slots, batch.decode_positions)
            nb = -(-decode_len // cache.block_size)
            decode_blocks = cache.block_table[batch.decode_slots, :nb].long()   # (D, nb)
        return cls(segments, offset, batch.decode_slots, batch.decode_positions, cache.block_table, decode_len,
                   decode_mask, use_kernel, window, prefill_kernel, capability, decode_where, decode_blocks)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan,
           cache_k: torch.Tensor, cache_v: torch.Tensor,
           rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
           scale: float | None = None, softcap: float | None = None) -> torch.Tensor:
    """q (N, heads, hd), k and v (N, kv_heads, hd) for the step's flat tokens -> (N, heads * hd).

    cache_k, cache_v: this layer's block pools, (kv_heads, num_blocks, block_size, hd), read through
    plan.table. rotary: (cos, sin) per token for the C kernel to rotate q and k with, only for a
    decode-only step on the kernel (plan.rotates_in_kernel); otherwise q and k come rotated. scale:
    the scores' factor (None: 1 / sqrt(hd)); softcap: Gemma 2's cap on the scores (None: none).
    """
    n, heads, hd = q.shape
    kv_heads = k.shape[1]
    outs = []
    for off, seg, mask, where in plan.segments:
        end, stop = off + seg.length, seg.start + seg.length
        if plan.prefill_kernel:
            ops.kv_write(k[off:end], v[off:end], cache_k, cache_v, plan.table[seg.slot], seg.start)
            outs.append(ops.prefill_attention(q[off:end], cache_k, cache_v, plan.table[seg.slot], seg.start, scale,
                                              softcap, plan.window))
            continue
        blocks, offsets = where
        cache_k[:, blocks, offsets] = k[off:end].transpose(0, 1)  # (kv, L, hd) into each token's block and offset
        cache_v[:, blocks, offsets] = v[off:end].transpose(0, 1)
        qs = q[off:end].transpose(0, 1).unsqueeze(0)   # (1, heads, L, hd)
        row = plan.table[seg.slot:seg.slot + 1]
        ks = _row_keys(cache_k, row, stop)             # (1, kv, start+L, hd): gathered through the table
        vs = _row_keys(cache_v, row, stop)
        if plan.capability is not None:
            choice = choose_kernel("cuda", q.dtype, seg.length, seg.start, plan.window, heads, kv_heads, softcap,
                                   plan.capability)
            o = run_kernel(choice, qs, ks, vs, seg.start, plan.window, scale, softcap, mask)
        else:
            o = _scores_attention(qs, ks, vs, mask, mask is None, scale, softcap)  # (1, heads, L, hd)
        outs.append(o[0].transpose(0, 1).reshape(seg.length, heads * hd))
    if plan.decode_kernel:
        p = plan.num_prefill_tokens
        outs.append(ops.decode_attention(q[p:], k[p:], v[p:], cache_k, cache_v, plan.table, plan.decode_slots,
                                         plan.decode_positions, rotary, scale, softcap, plan.window))
    elif plan.decode_len:
        p = plan.num_prefill_tokens
        d = n - p
        blocks, offsets = plan.decode_where
        cache_k[:, blocks, offsets] = k[p:].transpose(0, 1)  # (kv, D, hd) into each request's next position
        cache_v[:, blocks, offsets] = v[p:].transpose(0, 1)
        t = plan.decode_len
        ks, vs = _gather(cache_k, plan.decode_blocks, t), _gather(cache_v, plan.decode_blocks, t)  # (D, kv, T, hd)
        # GQA without expanding the cache: the query heads that share a kv head become that head's
        # "query rows" (HF order: query head i uses kv head i // group), all at the same position.
        qd = q[p:].reshape(d, kv_heads, heads // kv_heads, hd)  # (D, kv, group, hd)
        o = _scores_attention(qd, ks, vs, plan.decode_mask, False, scale, softcap)  # (D, kv, group, hd)
        outs.append(o.reshape(d, heads * hd))
    return outs[0] if len(outs) == 1 else torch.cat(outs)


def _row_keys(pool: torch.Tensor, row: torch.Tensor, num_keys: int) -> torch.Tensor:
    """Keys 0..num_keys-1 of one table row (1, max_blocks) -> (1, kv, num_keys, hd)."""
    nb = -(-num_keys // pool.shape[2])
    return _gather(pool, row[:, :nb].long(), num_keys)


def _gather(pool: torch.Tensor, blocks: torch.Tensor, num_keys: int) -> torch.Tensor:
    """The blocks (R, nb) of R rows, from the pool (kv, num_blocks, bs, hd), as each row's first
    num_keys keys: (R, kv, num_keys, hd). One copy (torch indexing cannot view through a table)."""
    r, nb = blocks.shape
    kv, _, bs, hd = pool.shape
    rows = pool[:, blocks]   # (kv, R, nb, bs, hd)
    return rows.transpose(0, 1).reshape(r, kv, nb * bs, hd)[:, :, :num_keys]
