"""Which attention kernel a prefill segment runs on CUDA, and running it.

SDPA picks its kernel from what it is given, and the wrong arguments send it to the math kernel,
which materialises every head's (queries x keys) score matrix in float32: on a GPU a later chunk
then runs slower than the first and a long prompt can run out of memory. What rules the fast
kernels out (PyTorch 2.5-2.13):
  * any attn_mask rules out flash attention; the memory-efficient kernel takes a mask;
  * enable_gqa (fewer kv heads than query heads) rules out the memory-efficient kernel; flash
    takes it, but flash runs only half precision on compute capability 8.0 or later;
  * a causal segment with keys before it (a later chunk) needs the triangle aligned to the bottom
    right, which is_causal does not do (it aligns top left); torch's `causal_lower_right` bias
    does, without a mask tensor, on flash or the memory-efficient kernel;
  * a sliding window has no SDPA form: it is a mask, over the keys the window spans only;
  * Gemma 2's soft cap has none either: its scores are computed eagerly, in blocks of query rows
    so no block's score matrix passes BLOCK_BYTES.

`choose_kernel` is the pure rule (tests call it with "cuda" on any machine); `run_kernel` runs a
choice, and runs on the CPU too, where the tests hold each choice against the reference: the
eager scores with the full mask.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch
import torch.nn.functional as F

BLOCK_BYTES = 64 << 20   # one block's float32 scores under the soft cap (heads x rows x keys x 4)
HALF = (torch.float16, torch.bfloat16)


class Kernel(Enum):
    CAUSAL = "causal"                   # SDPA is_causal, no mask: flash or memory-efficient
    CAUSAL_OFFSET = "causal offset"     # a later chunk: causal_lower_right, flash or memory-efficient
    WINDOW_MASK = "window mask"         # keys cut to the window's span, an additive mask: memory-efficient
    BLOCKED_SCORES = "blocked scores"   # the soft cap: eager scores, a block of query rows at a time
    REFERENCE = "reference"             # off CUDA: SDPA with the full mask, or the eager scores for a cap


@dataclass(frozen=True, slots=True)
class KernelChoice:
    kernel: Kernel
    expand_kv: bool   # repeat each kv head over its query group first (the memory-efficient kernel has no GQA)


def choose_kernel(device_type: str, dtype: torch.dtype, num_queries: int, start: int, window: int | None,
                  heads: int, kv_heads: int, softcap: float | None,
                  capability: tuple[int, int] | None = None) -> KernelChoice:
    """The kernel for a prefill segment of num_queries tokens at positions start.. (keys 0..start+L-1
    before the window). capability: the GPU's compute capability (None: unknown, so flash is not
    counted on for GQA)."""
    if device_type != "cuda":
        return KernelChoice(Kernel.REFERENCE, False)
    if softcap is not None:
        return KernelChoice(Kernel.BLOCKED_SCORES, False)   # groups the query heads itself
    # the window matters once the last query sees fewer keys than all before it
    windowed = window is not None and start + num_queries > window
    kernel = Kernel.WINDOW_MASK if windowed else Kernel.CAUSAL_OFFSET if start > 0 else Kernel.CAUSAL
    flash = kernel is not Kernel.WINDOW_MASK and dtype in HALF and capability is not None and capability >= (8, 0)
    return KernelChoice(kernel, heads != kv_heads and not flash)


def run_kernel(choice: KernelChoice, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int,
               window: int | None, scale: float | None, softcap: float | None,
               mask: torch.Tensor | None = None) -> torch.Tensor:
    """q (1, heads, L, hd) at positions start..start+L-1; k and v (1, kv, start+L, hd), the slot's keys
    from position 0 -> (1, heads, L, hd). mask: WINDOW_MASK's (L, keys from the window's first) when
    the caller built it once for every layer (window_mask), else built here."""
    heads, kv_heads, length = q.shape[1], k.shape[1], q.shape[2]
    if choice.kernel is Kernel.BLOCKED_SCORES:
        return blocked_scores(q, k, v, start, window, scale, softcap)
    if choice.kernel is Kernel.REFERENCE:
        full = None if start == 0 and (window is None or length <= window) else \
            additive(visible(torch.arange(start + length, device=q.device)[None, :],
                             torch.arange(start, start + length, device=q.device)[:, None], window), q.dtype)
        return scores_attention(q, k, v, full, full is None, scale, softcap)
    first = window_start(start, window) if choice.kernel is Kernel.WINDOW_MASK else 0
    k, v = k[:, :, first:], v[:, :, first:]   # (1, kv, S, hd): the keys some query of the segment sees
    if choice.expand_kv and heads != kv_heads:   # query head i uses kv head i // group
        k, v = k.repeat_interleave(heads // kv_heads, dim=1), v.repeat_interleave(heads // kv_heads, dim=1)
    gqa = k.shape[1] != heads
    if choice.kernel is Kernel.CAUSAL:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
    if choice.kernel is Kernel.CAUSAL_OFFSET:
        from torch.nn.attention.bias import causal_lower_right   # here: it imports torch._dynamo (1.5 s)
        bias = causal_lower_right(length, k.shape[2])
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scale, enable_gqa=gqa)
    if mask is None:
        mask = window_mask(start, length, window, q.dtype, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)


def window_start(start: int, window: int | None) -> int:
    """The first key the segment's first query sees."""
    return 0 if window is None else max(0, start - window + 1)


def window_mask(start: int, length: int, window: int | None, dtype: torch.dtype, device) -> torch.Tensor:
    """(L, keys from window_start) additive mask of a segment at positions start..start+L-1."""
    first = window_start(start, window)
    keys = torch.arange(first, start + length, device=device)[None, :]
    return additive(visible(keys, torch.arange(start, start + length, device=device)[:, None], window), dtype)


def blocked_scores(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int, window: int | None,
                   scale: float | None, softcap: float | None) -> torch.Tensor:
    """The eager scores (capped, masked, a float32 softmax) a block of query rows at a time, each
    block over the keys it sees: no block's scores pass BLOCK_BYTES."""
    heads, length = q.shape[1], q.shape[2]
    rows = max(1, BLOCK_BYTES // (4 * heads * (start + length)))
    out = []
    for r0 in range(0, length, rows):
        r1 = min(length, r0 + rows)
        first, stop = window_start(start + r0, window), start + r1
        keys = torch.arange(first, stop, device=q.device)[None, :]
        queries = torch.arange(start + r0, stop, device=q.device)[:, None]
        mask = additive(visible(keys, queries, window), q.dtype)   # (rows, keys)
        out.append(scores_attention(q[:, :, r0:r1], k[:, :, first:stop], v[:, :, first:stop], mask, False,
                                    scale, softcap))
    return out[0] if len(out) == 1 else torch.cat(out, dim=2)


def visible(keys: torch.Tensor, queries: torch.Tensor, window: int | None) -> torch.Tensor:
    """Which key positions each query position sees: the earlier ones, or the last `window` of them."""
    seen = keys <= queries
    return seen if window is None else seen & (keys > queries - window)


def additive(seen: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where seen, -inf elsewhere, in the model dtype (so SDPA needs no conversion). Its rows are
    laid out 16 apart: the memory-efficient kernel wants an aligned mask and would copy one that is not."""
    *lead, n = seen.shape
    storage = torch.zeros(*lead, -(-n // 16) * 16, dtype=dtype, device=seen.device)
    return storage[..., :n].masked_fill_(~seen, float("-inf"))


def scores_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                     is_causal: bool, scale: float | None, softcap: float | None) -> torch.Tensor:
    """SDPA's arguments and result, q (B, heads, L, hd), k and v (B, kv, S, hd); with a soft cap,
    the scores are capped before the mask (transformers' eager attention, in its order)."""
    heads, kv_heads = q.shape[1], k.shape[1]
    if softcap is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale,
                                              enable_gqa=kv_heads != heads)
    b, _, n, hd = q.shape
    qg = q.reshape(b, kv_heads, heads // kv_heads, n, hd)       # query head i uses kv head i // group
    scores = qg @ k.unsqueeze(2).transpose(-1, -2) * (hd ** -0.5 if scale is None else scale)  # (B, kv, group, L, S)
    scores = torch.tanh(scores / softcap) * softcap
    if is_causal:
        mask = additive(torch.ones(n, k.shape[2], dtype=torch.bool, device=q.device).tril_(), q.dtype)
    if mask is not None:
        scores = scores + (mask if mask.ndim < 4 else mask.unsqueeze(2))   # (L, S) or (B, 1, L, S) per request
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return (weights @ v.unsqueeze(2)).view(b, heads, n, hd)     # (B, heads, L, hd)
