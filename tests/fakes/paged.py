"""Block tables for the paged KV cache's tests: a scrambled assignment, and a request's keys read back."""
from __future__ import annotations

import torch

from backend.models.base import KVCache


def scramble(cache: KVCache, seed: int = 0) -> KVCache:
    """Give every table row a full row of blocks drawn from a random permutation of the pool: rows own
    non-contiguous blocks, out of order, none shared. The result must not change a single token."""
    perm = torch.randperm(cache.num_blocks, generator=torch.Generator().manual_seed(seed))
    per_row = cache.max_blocks_per_row
    if cache.num_blocks < cache.num_slots * per_row:
        raise ValueError("scramble needs the identity's pool (a full row of blocks each)")
    for row in range(cache.num_slots):
        cache.set_row(row, perm[row * per_row:(row + 1) * per_row])
    return cache


def row_keys(pool: torch.Tensor, cache: KVCache, row: int, num_keys: int | None = None) -> torch.Tensor:
    """One row's first num_keys positions (all of them: None) of a layer's pool, token-major:
    (kv_heads, num_keys, head_dim), a copy."""
    num_keys = cache.max_blocks_per_row * cache.block_size if num_keys is None else num_keys
    nb = -(-num_keys // cache.block_size)
    blocks = pool[:, cache.block_table[row, :nb].long()]   # (kv, nb, bs, hd)
    return blocks.reshape(pool.shape[0], nb * cache.block_size, pool.shape[3])[:, :num_keys]


def dense(pool: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """The whole layer as the old slot layout: (rows, kv_heads, max_blocks * block_size, head_dim)."""
    return torch.stack([row_keys(pool, cache, r) for r in range(cache.num_slots)])


def to_pools(keys: torch.Tensor, values: torch.Tensor, block_size: int = 16,
             seed: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Dense slot-layout keys and values (rows, kv, L, hd) as block pools (kv, num_blocks, block_size, hd)
    and the int32 table (rows, ceil(L / block_size)) that reads them back: the identity, or (a seed)
    the blocks at permuted places in a pool twice as large, the blocks no row owns full of noise."""
    rows, kv, length, hd = keys.shape
    nb = -(-length // block_size)
    total = rows * nb * (1 if seed is None else 2)
    order = (torch.arange(total) if seed is None else
             torch.randperm(total, generator=torch.Generator().manual_seed(seed)))[:rows * nb]
    pools = []
    for x in (keys, values):
        padded = torch.zeros(rows, kv, nb * block_size, hd)
        padded[:, :, :length] = x
        pool = torch.randn(kv, total, block_size, hd)
        blocks = padded.view(rows, kv, nb, block_size, hd).transpose(0, 1)   # (kv, rows, nb, bs, hd)
        pool[:, order] = blocks.reshape(kv, rows * nb, block_size, hd)
        pools.append(pool)
    return (*pools, order.view(rows, nb).to(torch.int32))
