"""The C prefill attention (backend/kernels/prefill_attention.c) against the float64 softmax it computes."""
from __future__ import annotations

import pytest
import torch

from backend import kernels
from backend.kernels import ops

pytestmark = pytest.mark.skipif(kernels.load() is None, reason=f"C kernels not built here: {kernels.reason()}")


def reference(q, k, v, start, scale, softcap, window):
    """q (L, heads, hd) at positions start.., k and v (kv, S, hd) -> (L, heads * hd), in float64."""
    length, heads, hd = q.shape
    group = heads // k.shape[0]
    pos = torch.arange(start, start + length)[:, None]
    key = torch.arange(start + length)[None, :]
    visible = (key <= pos) & (key > pos - window if window else True)
    out = []
    for h in range(heads):
        s = q[:, h].double() @ k[h // group, :start + length].double().T * scale
        if softcap:
            s = torch.tanh(s / softcap) * softcap
        out.append(torch.softmax(s.masked_fill(~visible, float("-inf")), -1) @ v[h // group, :start + length].double())
    return torch.cat(out, dim=1)


def paged(k, v, block_size, scrambled, seed):
    """Dense (kv, S, hd) keys and values as block pools (kv, num_blocks, block_size, hd) and the int32
    table row that reads them back: the identity, or blocks at permuted places in a larger pool."""
    kv, length, hd = k.shape
    nb = -(-length // block_size)
    total = 3 * nb + 2 if scrambled else nb
    order = torch.randperm(total, generator=torch.Generator().manual_seed(seed))[:nb] if scrambled else torch.arange(nb)
    pools = []
    for x in (k, v):
        padded = torch.zeros(kv, nb * block_size, hd)
        padded[:, :length] = x
        pool = torch.randn(kv, total, block_size, hd)   # blocks no row owns hold noise: never read
        pool[:, order] = padded.view(kv, nb, block_size, hd)
        pools.append(pool)
    return (*pools, order.to(torch.int32))


@pytest.mark.parametrize("table, block_size", [("identity", 16), ("scrambled", 16), ("scrambled", 1),
                                               ("scrambled", 64)])
@pytest.mark.parametrize("length, start, heads, kv, hd, window, softcap", [
    (1, 0, 2, 1, 64, None, None),        # one token
    (37, 0, 4, 4, 64, None, None),       # no GQA, a partial unit and key block
    (512, 0, 9, 3, 64, None, None),      # the bundled model's shape
    (20, 45, 8, 2, 128, None, None),     # a later chunk: keys before the segment
    (70, 100, 4, 2, 64, 16, None),       # a sliding window shorter than the segment, after a chunk
    (200, 0, 16, 2, 80, 64, None),       # a head size that is not a multiple of 32
    (33, 0, 4, 1, 256, None, 50.0),      # Gemma 2: a wide head and capped scores
    (5, 3, 2, 1, 40, None, None),
])
def test_prefill_attention_matches_the_softmax(length, start, heads, kv, hd, window, softcap, table, block_size):
    gen = torch.Generator().manual_seed(length + start)
    k, v = torch.randn(kv, start + length + 7, hd, generator=gen), torch.randn(kv, start + length + 7, hd, generator=gen)
    wide = torch.randn(length, heads * hd + 24, generator=gen)          # q as a strided view of wider rows
    q = wide[:, :heads * hd].view(length, heads, hd)
    scale = 0.7 * hd ** -0.5
    pool_k, pool_v, row = paged(k, v, block_size, table == "scrambled", seed=length + hd)
    got = ops.prefill_attention(q, pool_k, pool_v, row, start, scale, softcap, window)
    assert got.shape == (length, heads * hd)
    assert (got.double() - reference(q, k, v, start, scale, softcap, window)).abs().max() < 1e-5


def test_uneven_heads_are_one_clear_error():
    q, k = torch.randn(4, 3, 64), torch.randn(2, 1, 8, 64)
    with pytest.raises(ValueError, match="do not share 2 kv heads evenly"):
        ops.prefill_attention(q, k, k, torch.zeros(1, dtype=torch.int32), 0)


@pytest.mark.parametrize("start, length", [(0, 1), (5, 40), (16, 16), (30, 3)])
def test_kv_write_puts_each_token_in_its_block(start, length):
    """A segment at positions start.. written through a scrambled table: each token's key and value
    land at offset p % 8 of block table[p // 8], and nothing else changes."""
    gen = torch.Generator().manual_seed(start + length)
    pool_k, pool_v, row = paged(torch.zeros(2, 48, 16), torch.zeros(2, 48, 16), 8, True, seed=start)
    before_k, before_v = pool_k.clone(), pool_v.clone()
    wide = torch.randn(length, 3, 2, 16, generator=gen)          # k and v as strided views of a fused projection
    k, v = wide[:, 1], wide[:, 2]
    ops.kv_write(k, v, pool_k, pool_v, row, start)
    positions = torch.arange(start, start + length)
    blocks, offsets = row[positions // 8].long(), positions % 8
    assert torch.equal(pool_k[:, blocks, offsets], k.transpose(0, 1))
    assert torch.equal(pool_v[:, blocks, offsets], v.transpose(0, 1))
    pool_k[:, blocks, offsets], pool_v[:, blocks, offsets] = before_k[:, blocks, offsets], before_v[:, blocks, offsets]
    assert torch.equal(pool_k, before_k) and torch.equal(pool_v, before_v)
