"""Attention against the preallocated KV cache, shared by the Llama and GPT-2 blocks.

`AttentionPlan.build` does once per step what every layer shares (flat offsets, masks, the
decode key length); `attend` runs per layer: it writes the step's keys and values into the
cache in place and attends each query to its own slot.

On the CPU in float32 the decode tokens' attention (and their cache writes) is one call per
layer into the project's C kernel (backend/kernels/attention.c) where it is built: torch's SDPA
costs about 100 us a layer there for a few microseconds of arithmetic.

With `static_decode` the plan is for a padded decode batch of fixed size (the CUDA graph
path): every row attends over its slot's whole `max_len` keys, masked by its position, so no
shape and no host value depends on the positions and a captured graph stays valid as they
advance.

With a sliding `window` W (Mistral's config.sliding_window), the query at position i sees the
keys at positions i - W + 1 .. i, as transformers masks them; the cache still holds every key.
The C decode kernel attends from key 0, so a step where some decode position is past the window
runs on SDPA with the window's mask instead.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from backend.kernels import ops
from backend.models.base import KVCache, Segment, StepBatch


@dataclass(slots=True)
class AttentionPlan:
    segments: list[tuple[int, Segment, torch.Tensor | None]]  # (flat offset, segment, mask; None = plain causal)
    num_prefill_tokens: int
    decode_slots: torch.Tensor
    decode_positions: torch.Tensor
    decode_range: tuple[int, int] | None
    decode_len: int                  # keys the longest decode request sees (0: no decode tokens; -1: not computed)
    decode_mask: torch.Tensor | None # (D, 1, 1, decode_len) additive; None when every request sees every key
    decode_kernel: bool = False      # decode tokens go to the C kernel (which needs no key length or mask)

    @property
    def rotates_in_kernel(self) -> bool:
        """A decode-only step on the C kernel: it applies the rotary embedding itself, in the same pass."""
        return self.decode_kernel and not self.segments

    @classmethod
    def build(cls, batch: StepBatch, cache: KVCache, dtype: torch.dtype, static_decode: bool = False,
              window: int | None = None) -> AttentionPlan:
        """static_decode: a decode-only batch of fixed size (the CUDA graph path) whose rows attend
        over their slots' whole max_len keys, masked by position: built from tensors alone, no host read.
        window: a sliding window of keys (None: every earlier key)."""
        device = batch.input_ids.device
        segments = []
        offset = 0
        for seg in batch.prefill:
            mask = None
            if seg.start > 0 or (window is not None and seg.length > window):
                # A later chunk: query i (at position start+i) sees keys 0..start+i. SDPA's is_causal
                # aligns the triangle top-left, which is wrong once there are more keys than queries.
                keys = torch.arange(seg.start + seg.length, device=device)
                queries = torch.arange(seg.start, seg.start + seg.length, device=device)
                mask = _additive(_visible(keys[None, :], queries[:, None], window), dtype)  # (L, start+L)
            segments.append((offset, seg, mask))
            offset += seg.length
        decode_len, decode_mask = 0, None
        use_kernel = batch.num_decode > 0 and not static_decode and ops.usable(device, dtype)
        if use_kernel and window is not None:
            # one host read: past the window the kernel, which attends from key 0, would see too much
            use_kernel = int(batch.decode_positions.max()) < window
        if use_kernel:
            decode_len = -1   # not known without a host read, and not needed
        elif batch.num_decode:
            if static_decode:
                decode_len, masked = cache.max_len, True
            else:
                # One host read per step (not per layer): the key length must be a Python int to slice the cache.
                lo, hi = (int(x) for x in batch.decode_positions.aminmax())
                decode_len, masked = hi + 1, lo != hi or (window is not None and hi >= window)
            if masked:  # hide each request's keys past its own position (and before its window)
                keys = torch.arange(decode_len, device=device)[None, :]
                visible = _visible(keys, batch.decode_positions[:, None], window)
                decode_mask = _additive(visible, dtype)[:, None, None, :]  # (D, 1, 1, T)
        return cls(segments, offset, batch.decode_slots, batch.decode_positions,
                   None if static_decode else batch.decode_slot_range, decode_len, decode_mask, use_kernel)


def _visible(keys: torch.Tensor, queries: torch.Tensor, window: int | None) -> torch.Tensor:
    """Which key positions each query position sees: the earlier ones, or the last `window` of them."""
    visible = keys <= queries
    return visible if window is None else visible & (keys > queries - window)


def _additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where visible, -inf elsewhere: built once per step in the model dtype, so SDPA needs no conversion."""
    return torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill_(~visible, float("-inf"))


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan,
           cache_k: torch.Tensor, cache_v: torch.Tensor,
           rotary: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """q (N, heads, hd), k and v (N, kv_heads, hd) for the step's flat tokens -> (N, heads * hd).

    cache_k, cache_v: this layer's cache, (slots, kv_heads, max_len, hd). rotary: (cos, sin) per
    token for the C kernel to rotate q and k with, only for a decode-only step on the kernel
    (plan.rotates_in_kernel); otherwise q and k come rotated.
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
    if plan.decode_kernel:
        p = plan.num_prefill_tokens
        outs.append(ops.decode_attention(q[p:], k[p:], v[p:], cache_k, cache_v, plan.decode_slots,
                                         plan.decode_positions, rotary))
    elif plan.decode_len:
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
        o = F.scaled_dot_product_attention(qd, ks, vs, attn_mask=plan.decode_mask)  # (D, kv, group, hd)
        outs.append(o.reshape(d, heads * hd))
    return outs[0] if len(outs) == 1 else torch.cat(outs)
