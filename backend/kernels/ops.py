"""Torch tensors in, the C kernels' results out: the only place that passes tensors' memory to C.

Every function takes float32 CPU tensors and returns a new tensor (or updates one in place);
callers check `usable(device, dtype)` first and keep a torch path for everything else. The kernels' pool
follows torch's thread count, as torch's own kernels do.
"""
from __future__ import annotations

import torch

from backend import kernels
from backend.precision import precision

_pool_threads = 0


def usable(device: torch.device, dtype: torch.dtype) -> bool:
    """The kernels are built for this machine and take this device and dtype (CPU, float32)."""
    return device.type == "cpu" and dtype == torch.float32 and kernels.load() is not None


def _lib():
    global _pool_threads
    lib = kernels.load()
    threads = torch.get_num_threads()
    if threads != _pool_threads:   # the pool may get fewer (it stops at 64): remember what was asked
        lib.psk_set_threads(threads)
        _pool_threads = threads
    return lib


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def linear(x: torch.Tensor, panels: torch.Tensor, out_features: int, bias: torch.Tensor | None = None,
           residual: torch.Tensor | None = None) -> torch.Tensor:
    """x (..., in) @ W^T (+ bias) (+ residual (..., out)), W packed as (num_panels, in, width)."""
    return _product(x, panels, "float32", out_features, bias, residual)


def _product(x: torch.Tensor, weights: torch.Tensor, fmt: str, out_features: int, bias: torch.Tensor | None,
             residual: torch.Tensor | None) -> torch.Tensor:
    """Either product (float32 panels or quantized ones) through the kernels' one entry, psk_matmul."""
    x = x.contiguous()
    inp = x.shape[-1]
    n = x.numel() // inp if inp else 0
    y = torch.empty(*x.shape[:-1], out_features, dtype=x.dtype)
    if residual is not None:
        residual = residual.contiguous()
    failed = n and _lib().psk_matmul(KINDS[fmt], weights.data_ptr(), x.data_ptr(), _ptr(bias), _ptr(residual),
                                     y.data_ptr(), n, out_features, inp)
    if failed == -3:
        raise ValueError(f"matrix product: its row segments do not add up to {out_features} rows")
    if failed:
        raise MemoryError("matrix product: no memory for its scratch")
    return y


# The kernels' codes for the matrix formats (quant.h): float32 panels, then the GGUF formats, then
# "segments" (a matrix whose row segments each have their own format: see segments()).
KINDS = {"float32": 0, "q8_0": 1, "q4_0": 2, "q4_1": 3, "q5_0": 4, "q5_1": 5, "q4_k": 6, "q5_k": 7, "q6_k": 8,
         "f16": 9, "bf16w": 10, "segments": 64}


def quantize_rows(w: torch.Tensor, fmt: str) -> torch.Tensor:
    """A float32 (rows, in) matrix as rows of GGUF blocks, uint8 (rows, in / block * block bytes)."""
    w = w.detach().to(torch.float32).contiguous()
    rows, inp = w.shape
    p = precision(fmt)
    _check_block(fmt, inp)
    out = torch.empty(rows, inp // p.block * p.block_bytes, dtype=torch.uint8)
    if w.numel():
        _lib().psk_quantize_rows(KINDS[fmt], w.data_ptr(), rows, inp, out.data_ptr())
    return out


def _check_block(fmt: str, inp: int) -> None:
    if inp % precision(fmt).block:
        raise ValueError(f"{fmt} takes rows of whole blocks of {precision(fmt).block} weights, not {inp}")


def dequantize_rows(blocks: torch.Tensor, fmt: str, inp: int) -> torch.Tensor:
    """Rows of GGUF blocks back to float32 (rows, in): the exact values the products multiply by."""
    blocks = blocks.contiguous()
    _check_block(fmt, inp)
    w = torch.empty(blocks.shape[0], inp, dtype=torch.float32)
    if w.numel():
        _lib().psk_dequantize_rows(KINDS[fmt], blocks.data_ptr(), blocks.shape[0], inp, w.data_ptr())
    return w


def quant_pack(blocks: torch.Tensor, fmt: str, inp: int) -> torch.Tensor:
    """Rows of GGUF blocks (out, in / block * block bytes) -> the quantized products' panels (quant.h)."""
    blocks = blocks.contiguous()
    out = blocks.shape[0]
    _check_block(fmt, inp)
    if blocks.shape[1] != inp // precision(fmt).block * precision(fmt).block_bytes:
        raise ValueError(f"{fmt}: rows of {blocks.shape[1]} bytes are not {inp} weights' blocks")
    packed = torch.empty(_lib().psk_quant_packed_bytes(KINDS[fmt], out, inp), dtype=torch.uint8)
    _lib().psk_quant_pack(KINDS[fmt], blocks.data_ptr(), out, inp, packed.data_ptr())
    return packed


def segments(parts: list[tuple[str, int, torch.Tensor]]) -> torch.Tensor:
    """The kernels' list of row segments, (format, rows, packed data) each in row order: int64
    [count, then kind, rows, pointer per segment]. The packed tensors must outlive it."""
    return torch.tensor([len(parts), *(v for fmt, rows, data in parts for v in (KINDS[fmt], rows, data.data_ptr()))],
                        dtype=torch.int64)


def qlinear(x: torch.Tensor, packed: torch.Tensor, fmt: str, out_features: int,
            bias: torch.Tensor | None = None, residual: torch.Tensor | None = None) -> torch.Tensor:
    """x (..., in) @ W^T (+ bias) (+ residual) for W packed by quant_pack (in a multiple of the
    format's block), or fmt "segments" and the list segments() made."""
    return _product(x, packed, fmt, out_features, bias, residual)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty_like(x)
    d = x.shape[-1]
    if x.numel():
        _lib().psk_rms_norm(x.data_ptr(), weight.data_ptr(), out.data_ptr(), x.numel() // d, d, eps)
    return out


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """(..., 2 ff) rows of [gate | up] -> silu(gate) * up, (..., ff)."""
    gate_up = gate_up.contiguous()
    ff = gate_up.shape[-1] // 2
    out = torch.empty(*gate_up.shape[:-1], ff, dtype=gate_up.dtype)
    if gate_up.numel():
        _lib().psk_silu_mul(gate_up.data_ptr(), out.data_ptr(), gate_up.numel() // (2 * ff), ff)
    return out


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (N, heads, hd), rows possibly strided, rotated by cos and sin (N, 1, hd) -> (N, heads, hd)."""
    if x.stride(2) != 1 or x.stride(1) != x.shape[2]:
        x = x.contiguous()
    n, heads, hd = x.shape
    cos, sin = cos.reshape(n, hd).contiguous(), sin.reshape(n, hd).contiguous()
    out = torch.empty(n, heads, hd, dtype=x.dtype)
    if x.numel():
        _lib().psk_rotary(x.data_ptr(), x.stride(0), cos.data_ptr(), sin.data_ptr(), out.data_ptr(), n, heads, hd)
    return out


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache_k: torch.Tensor,
                     cache_v: torch.Tensor, table: torch.Tensor, slots: torch.Tensor, positions: torch.Tensor,
                     rotary: tuple[torch.Tensor, torch.Tensor] | None = None, scale: float | None = None,
                     softcap: float | None = None, window: int | None = None) -> torch.Tensor:
    """One token per row: q (D, heads, hd), k and v (D, kv_heads, hd) -> (D, heads * hd).

    cache_k and cache_v are block pools, (kv_heads, num_blocks, block_size, hd), and table the
    int32 block table (rows, max_blocks): row slots[i]'s position p is at offset p % block_size of
    block table[slots[i], p // block_size]. Writes each row's key and value at its position, then
    attends to that row's keys 0..position, read in place through the table. With
    rotary = (cos, sin), each (D, ..., hd), q and k are rotated here first (not yet rotated).
    scale: the scores' factor (None: 1 / sqrt(hd)); softcap: c to cap each score at c * tanh(s / c);
    window: each row sees only its last `window` keys (None: keys 0..position).
    """
    # rows may be strided (views into the fused projection); heads and dims must not be
    q, k, v = (t if t.stride(2) == 1 and t.stride(1) == t.shape[2] else t.contiguous() for t in (q, k, v))
    d, heads, hd = q.shape
    kv_heads = k.shape[1]
    out = torch.empty(d, heads * hd, dtype=q.dtype)
    slots, positions = slots.contiguous(), positions.contiguous()
    cos, sin = (None, None) if rotary is None else (t.contiguous() for t in rotary)
    failed = _lib().psk_decode_attention_scaled(
        q.data_ptr(), q.stride(0), k.data_ptr(), k.stride(0), v.data_ptr(), v.stride(0),
        cache_k.data_ptr(), cache_v.data_ptr(), *_table_args(table, cache_k), slots.data_ptr(), positions.data_ptr(),
        _ptr(cos), _ptr(sin), out.data_ptr(), d, heads, kv_heads, hd, window or 0,
        hd ** -0.5 if scale is None else scale, softcap or 0.0)
    if failed:
        raise ValueError(f"decode attention: {heads} query heads do not share {kv_heads} kv heads evenly "
                         f"(or the head dimension {hd} is odd)")
    return out


def _table_args(table: torch.Tensor, cache_k: torch.Tensor) -> tuple[int, int, int, int]:
    """The kernels' view of a block table and its pools: the table's pointer, the pool's blocks, the
    table's row length and log2 of the block size."""
    if table.dtype != torch.int32 or not table.is_contiguous():
        raise ValueError("the block table must be a contiguous int32 tensor")
    if not cache_k.is_contiguous():
        raise ValueError("the KV block pool must be contiguous")
    block_size = cache_k.shape[2]
    return table.data_ptr(), cache_k.shape[1], table.shape[-1], block_size.bit_length() - 1


def kv_write(k: torch.Tensor, v: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor,
             table_row: torch.Tensor, start: int) -> None:
    """k and v (L, kv_heads, hd) of one request's positions start..start+L-1 into their blocks of the
    pools cache_k and cache_v ((kv_heads, num_blocks, block_size, hd)), found through table_row."""
    k, v = (t if t.stride(2) == 1 and t.stride(1) == t.shape[2] else t.contiguous() for t in (k, v))
    length, kv_heads, hd = k.shape
    table, num_blocks, _, shift = _table_args(table_row, cache_k)
    if length:
        _lib().psk_kv_write(k.data_ptr(), k.stride(0), v.data_ptr(), v.stride(0), cache_k.data_ptr(),
                            cache_v.data_ptr(), table, num_blocks, shift, start, length, kv_heads, hd)


def prefill_attention(q: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor, table_row: torch.Tensor,
                      start: int, scale: float | None = None, softcap: float | None = None,
                      window: int | None = None) -> torch.Tensor:
    """A prefill segment's causal attention (prefill_attention.c): q (L, heads, hd) at positions
    start..start+L-1 against its keys in the block pools cache_k and cache_v ((kv_heads, num_blocks,
    block_size, hd)), read through table_row (the request's int32 row of the block table), whose
    keys 0..start+L-1 are written -> (L, heads * hd). scale, softcap, window: as decode_attention."""
    if q.stride(2) != 1 or q.stride(1) != q.shape[2]:
        q = q.contiguous()
    length, heads, hd = q.shape
    kv_heads = cache_k.shape[0]
    out = torch.empty(length, heads * hd, dtype=q.dtype)
    table, num_blocks, _, shift = _table_args(table_row, cache_k)
    failed = _lib().psk_prefill_attention(q.data_ptr(), q.stride(0), cache_k.data_ptr(), cache_v.data_ptr(), table,
                                          out.data_ptr(), start, length, heads, kv_heads, num_blocks, shift, hd,
                                          window or 0,
                                          hd ** -0.5 if scale is None else scale, softcap or 0.0)
    if failed == -2:
        raise MemoryError("prefill attention: no memory for its scratch")
    if failed:
        raise ValueError(f"prefill attention: {heads} query heads do not share {kv_heads} kv heads evenly")
    return out


def read(x: torch.Tensor) -> float:
    """Sum of a float32 tensor by a plain streaming read on the pool's threads (a bandwidth probe)."""
    x = x.contiguous()
    return _lib().psk_read(x.data_ptr(), x.numel())


def llama_decode_layers(x: torch.Tensor, weights: torch.Tensor, kinds: torch.Tensor, cache_ptrs: torch.Tensor,
                        table: torch.Tensor, num_blocks: int, block_size: int, step: tuple, scratch: torch.Tensor,
                        heads: int, kv_heads: int, hd: int, ff: int, eps: float) -> None:
    """Every layer of a decode step in one call (layer.c): x (D, hidden) updated in place.

    weights: int64 (layers, 7) of llama_decode_layer's weight pointers (0 for no bias); kinds:
    int64 (layers, 4) of KINDS codes; cache_ptrs: int64 (2, layers), the block pools' k then v
    pointers ((kv_heads, num_blocks, block_size, hd) each); table: the int32 block table every
    layer reads them through."""
    d, hidden = x.shape
    layers = weights.shape[0]
    if table.dtype != torch.int32 or not table.is_contiguous():
        raise ValueError("the block table must be a contiguous int32 tensor")
    failed = _lib().psk_llama_decode_layers(layers, x.data_ptr(), d, weights.data_ptr(), kinds.data_ptr(),
                                            cache_ptrs[0].data_ptr(), cache_ptrs[1].data_ptr(), table.data_ptr(),
                                            num_blocks, table.shape[1], block_size.bit_length() - 1, *step,
                                            scratch.data_ptr(), hidden, heads, kv_heads, hd, ff, eps)
    if failed == -2:
        raise MemoryError("decode layer: no memory for a product's scratch")
    if failed:
        raise ValueError(f"decode layer: {heads} query heads do not share {kv_heads} kv heads evenly")


def decode_scratch_size(d: int, hidden: int, heads: int, kv_heads: int, hd: int, ff: int) -> int:
    """Floats of scratch llama_decode_layer needs for d tokens."""
    return d * (hidden + (heads + 2 * kv_heads) * hd + heads * hd + 3 * ff)


def moe(x: torch.Tensor, residual: torch.Tensor, router: torch.Tensor, router_kind: int, experts: torch.Tensor,
        top_k: int, ff: int, norm_topk: bool, chosen: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
    """residual + the mixture of experts on x (N, d) (moe.c), and the distinct experts it touched.

    router: the packed (E, d) router matrix of KINDS code router_kind; experts: int64 (E, 4) rows
    of [gate_up pointer, down pointer, gate_up kind, down kind] of packed matrices; chosen, an
    int64 (N, top_k) tensor, receives each row's experts."""
    x, residual = x.contiguous(), residual.contiguous()
    n, d = x.shape
    y = torch.empty_like(residual)
    if n == 0:
        return y, 0
    touched = _lib().psk_moe(x.data_ptr(), residual.data_ptr(), y.data_ptr(), n, d, router.data_ptr(), router_kind,
                             experts.data_ptr(), experts.shape[0], top_k, ff, int(norm_topk), _ptr(chosen))
    if touched < 0:
        raise MemoryError("mixture of experts: no memory for its scratch")
    return y, touched
