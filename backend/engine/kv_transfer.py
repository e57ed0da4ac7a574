"""Moving one request's KV cache entries from a prefill engine process to a decode engine process.

What moves is the blocks the prefill filled: for every layer, the ceil(n / block_size) cache blocks
that hold the request's first `n` positions (found through its row of the block table), packed as
one (num_layers, 2, num_kv_heads, num_blocks, block_size, head_dim) hand-off, a whole-block copy on
each side (index_select into the buffer, index_copy_ out of it) rather than a token-by-token
gather; the last block's positions past n travel too and are never read. With prefix caching the
row's first blocks may be shared with other requests (a cached prefix): they are read in place like
the rest, while the request still holds them (the prefill worker packs before its scheduler gives the
blocks back), so the hand-off carries the whole prompt's KV. The decode side writes them into the
blocks its own table gives the request's row, whatever they are. Two transports,
chosen by `--kv-transport`:

- shm: the prefill process packs the block straight into a shared-memory arena (a memfd that
  the coordinator created and gave to both processes), and sends only a small header on the
  link socket; the decode process copies from the arena into its cache slot and sends the
  buffer back as free. One copy on each side, no bytes through the kernel's socket buffers, and
  the prefill process never waits for the decode process to read (until every buffer is taken).
- pipe: the header and then the packed bytes through the link socket; the decode process reads
  them at its next step boundary (the prefill process blocks once the socket buffer is full).

auto is shm wherever memfd exists (Linux), pipe elsewhere: bench/disaggregation.py measures both
between two processes of this machine, and bench/README.md has the figures.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

import torch

TRANSPORTS = ("auto", "shm", "pipe")
NUM_BUFFERS = 4   # arena buffers per prefill process: hand-offs in flight before the prefill process waits


def resolve_transport(name: str) -> str:
    from backend.errors import InputError
    if name not in TRANSPORTS:
        raise InputError(f"--kv-transport: unknown transport {name!r} (choose {', '.join(TRANSPORTS)})")
    if name == "auto":
        return "shm" if hasattr(os, "memfd_create") else "pipe"
    if name == "shm" and not hasattr(os, "memfd_create"):
        raise InputError("--kv-transport shm needs memfd (Linux); use pipe here")
    return name


def kv_bytes_per_token(shape, itemsize: int) -> int:
    """Keys and values of one token over every layer."""
    return 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * itemsize


@dataclass(slots=True)
class KVBlock:
    """The header of one hand-off: its shape and dtype (its bytes travel beside it)."""

    num_layers: int
    num_kv_heads: int
    num_tokens: int
    head_dim: int
    dtype: str          # torch dtype name, e.g. "float32"
    block_size: int = 16

    @property
    def num_blocks(self) -> int:
        return -(-self.num_tokens // self.block_size)

    @property
    def shape(self) -> tuple[int, int, int, int, int, int]:
        return (self.num_layers, 2, self.num_kv_heads, self.num_blocks, self.block_size, self.head_dim)

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * torch.empty((), dtype=self.torch_dtype).element_size()


def block_of(cache, num_tokens: int) -> KVBlock:
    k = cache.k[0]   # (num_kv_heads, num_blocks, block_size, head_dim)
    return KVBlock(len(cache.k), k.shape[0], num_tokens, k.shape[3], str(k.dtype).removeprefix("torch."),
                   cache.block_size)


def bytes_per_row(cache) -> int:
    """The largest hand-off of this cache: a whole row of blocks."""
    return block_of(cache, cache.max_blocks_per_row * cache.block_size).nbytes


def view_of(block: KVBlock, buffer, offset: int = 0) -> torch.Tensor:
    """The block as a tensor over `buffer` (an mmap or a bytearray), without a copy."""
    if block.nbytes == 0:
        return torch.empty(block.shape, dtype=block.torch_dtype)
    flat = torch.frombuffer(buffer, dtype=torch.uint8, count=block.nbytes, offset=offset)
    return flat.view(block.torch_dtype).view(block.shape)   # (L, 2, n_kv_heads, blocks, block_size, head_dim)


def pack(cache, slot: int, block: KVBlock, dest: torch.Tensor) -> None:
    """Copy the blocks holding slot's first block.num_tokens positions, every layer, into dest (block.shape)."""
    blocks = cache.block_table[slot, :block.num_blocks].long()
    for layer, (k, v) in enumerate(zip(cache.k, cache.v)):
        torch.index_select(k, 1, blocks, out=dest[layer, 0])   # (n_kv_heads, blocks, block_size, head_dim)
        torch.index_select(v, 1, blocks, out=dest[layer, 1])


def unpack(cache, slot: int, src: torch.Tensor) -> None:
    """Write a packed hand-off into the blocks of slot's row, every layer."""
    if src.shape[4] != cache.block_size:
        raise ValueError(f"a hand-off in blocks of {src.shape[4]} tokens for a cache of blocks of {cache.block_size}")
    blocks = cache.block_table[slot, :src.shape[3]].long()
    for layer, (k, v) in enumerate(zip(cache.k, cache.v)):
        k.index_copy_(1, blocks, src[layer, 0])
        v.index_copy_(1, blocks, src[layer, 1])


class Arena:
    """A prefill process's shared-memory buffers: NUM_BUFFERS of `buffer_bytes`, in one memfd.

    The prefill side sizes the file (`create`); a decode side maps the same fd once the first
    header arrives (`open`), so the size is known by then."""

    def __init__(self, fd: int, buffer_bytes: int, num_buffers: int = NUM_BUFFERS, create: bool = False):
        self.fd = fd
        self.buffer_bytes = max(1, buffer_bytes)
        self.num_buffers = num_buffers
        size = self.buffer_bytes * num_buffers
        if create:
            os.ftruncate(fd, size)
        self.map = mmap.mmap(fd, size)
        self.free = list(range(num_buffers))

    @classmethod
    def open(cls, fd: int, num_buffers: int = NUM_BUFFERS) -> Arena:
        """The decode side: the arena a prefill process sized (its size read from the file)."""
        return cls(fd, os.fstat(fd).st_size // num_buffers, num_buffers)

    def offset(self, index: int) -> int:
        return index * self.buffer_bytes

    def close(self) -> None:
        try:
            self.map.close()
        except BufferError:
            pass   # a tensor still views it; the process is ending and the memory goes with it
        try:
            os.close(self.fd)
        except OSError:
            pass


def new_memfd(name: str) -> int:
    """An anonymous shared-memory file for an arena (inheritable, so pass_fds can hand it on)."""
    fd = os.memfd_create(name, 0)
    os.set_inheritable(fd, True)
    return fd
