"""Attention against the preallocated KV cache, shared by the Llama and GPT-2 blocks.

`AttentionPlan.build` does once per step what every layer shares (flat offsets, masks, the
decode key length); `attend` runs per layer: it writes the step's keys and values into the
cache in place and attends each query to its own slot.

`AttentionPlan.static_decode` is the plan for a padded decode batch of fixed size (the CUDA
graph path): every row attends over its slot's whole `max_len` keys, masked by its position,
so no shape and no host value depends on the positions and a captured graph stays valid as
they advance.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from backend.models.base import Segment, StepBatch


@dataclass(slots=True)
class AttentionPlan:
    segments: list[tuple[int, Segment, torch.Tensor | None]]  # (flat offset, segment, mask; None = plain causal)
    num_prefill_tokens: int
    decode_slots: torch.Tensor
    decode_positions: torch.Tensor
    decode_range: tuple[int, int] | None
    decode_len: int                  # keys the longest decode request sees (0: no decode tokens)
    decode_mask: torch.Tensor | None # (D, 1, 1, decode_len) additive; None when every request sees every key

    @classmethod
    def build(cls, batch: StepBatch, dtype: torch.dtype) -> AttentionPlan:
        device = batch.input_ids.device
        segments = []
        offset = 0
        for seg in batch.prefill:
            mask = None
            if seg.start > 0:
                # A later chunk: query i (at position start+i) sees keys 0..start+i. SDPA's is_causal
                # aligns the triangle top-left, which is wrong once there are more keys than queries.
                keys = torch.arange(seg.start + seg.length, device=device)
                queries = torch.arange(seg.start, seg.start + seg.length, device=device)
                mask = _additive(keys[None, :] <= queries[:, None], dtype)  # (L, start+L)
            segments.append((offset, seg, mask))
            offset += seg.length
        decode_len = 0
        decode_mask = None
        if batch.num_decode:
            # One host read per step (not per layer): the key length must be a Python int to slice the cache.
            lo, hi = batch.decode_positions.aminmax()
            lo, hi = int(lo), int(hi)
            decode_len = hi + 1
            if lo != hi:  # requests of different lengths: hide each one's keys past its own position
                visible = torch.arange(decode_len, device=device)[None, :] <= batch.decode_positions[:, None]
                decode_mask = _additive(visible, dtype)[:, None, None, :]  # (D, 1, 1, T)
        return cls(segments, offset, batch.decode_slots, batch.decode_positions, batch.decode_slot_range,
                   decode_len, decode_mask)

    @classmethod
    def static_decode(cls, batch: StepBatch, max_len: int, dtype: torch.dtype) -> AttentionPlan:
        """Decode only, keys over each slot's whole max_len: built from tensors alone (no host read)."""
        keys = torch.arange(max_len, device=batch.input_ids.device)
        visible = keys[None, :] <= batch.decode_positions[:, None]   # (D, max_len)
        return cls([], 0, batch.decode_slots, batch.decode_positions, None, max_len,
                   _additive(visible, dtype)[:, None, None, :])


def _additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where visible, -inf elsewhere: built once per step in the model dtype, so SDPA needs no conversion."""
    return torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill_(~visible, float("-inf"))


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan,
           cache_k: torch.Tensor, cache_v: torch.Tensor) -> torch.Tensor:
    """q (N, heads, hd), k and v (N, kv_heads, hd) for the step's flat tokens -> (N, heads * hd).

    cache_k, cache_v: this layer's cache, (slots, kv_heads, max_len, hd).
    """
    n, heads, hd = q.shape
    kv_heads = k.shape[1]
    outs = []
    for off, seg, mask in plan.segments:
        end, stop = off + seg.length, seg.start + seg.length
        cache_k[seg.slot, :, seg.start:stop] = k[off:end].transpose(0, 1)  # (kv, L, hd)
        cache_v[seg.slot, :, seg.start:stop] = v[off:end].transpose(0, 1)
        qs = q[off:end].transpose(0, 1).unsqueeze(0)   # (1, heads, L, hd)
        ks = cache_k[seg.slot, :, :stop].unsqueeze(0)  # (1, kv, start+L, hd): a view of the slot
        vs = cache_v[seg.slot, :, :stop].unsqueeze(0)
        o = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, is_causal=mask is None,
                                           enable_gqa=kv_heads != heads)  # (1, heads, L, hd)
        outs.append(o[0].transpose(0, 1).reshape(seg.length, heads * hd))
    if plan.decode_len:
        p = plan.num_prefill_tokens
        d = n - p
        cache_k[plan.decode_slots, :, plan.decode_positions] = k[p:]  # (D, kv, hd) into each slot's next position
        cache_v[plan.decode_slots, :, plan.decode_positions] = v[p:]
        t = plan.decode_len
        if plan.decode_range is not None:
            first, last = plan.decode_range
            ks, vs = cache_k[first:last, :, :t], cache_v[first:last, :, :t]  # (D, kv, T, hd) views, no copy
        else:
            ks, vs = cache_k[plan.decode_slots, :, :t], cache_v[plan.decode_slots, :, :t]  # gathered copies
        # GQA without expanding the cache: the query heads that share a kv head become that head's
        # "query rows" (HF order: query head i uses kv head i // group), all at the same position.
        qd = q[p:].reshape(d, kv_heads, heads // kv_heads, hd)  # (D, kv, group, hd)
        outs.append(_decode_attention(qd, ks, vs, plan.decode_mask).reshape(d, heads * hd))
    return outs[0] if len(outs) == 1 else torch.cat(outs)


MATMUL_DECODE_MIN_BATCH = 8


def _decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """q (D, kv, group, hd) against k, v (D, kv, T, hd) -> (D, kv, group, hd).

    On the CPU from batch 8 up, two batched matmuls around a softmax beat SDPA's flash kernel
    by a quarter (its many tiny tiles cost more than the work); below that, and on GPUs, SDPA.
    """
    if not q.is_cpu or q.shape[0] < MATMUL_DECODE_MIN_BATCH:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    scores = torch.matmul(q, k.transpose(-1, -2)).mul_(q.shape[-1] ** -0.5)  # (D, kv, group, T)
    if mask is not None:
        scores += mask
    return torch.matmul(torch.softmax(scores, dim=-1), v)
