"""Decode with static shapes: the batch padded to a bucket, the keys cut to a length bucket, fixed
input buffers, and on CUDA one captured graph per (batch bucket, length bucket).

A decode step on a GPU is short and memory-bound (a few ms for a 1B model); launched op by op
from Python, its hundreds of kernel launches cost about as much as the work. A CUDA graph
replays the whole step with one launch, but only with the shapes and addresses it captured:

  * the decode batch is padded up to a bucket size (1, 2, 4, ..., max_batch), one graph per
    bucket and length bucket (below); padding rows decode token 0 at position 0 of a scratch slot of the KV cache that
    no request owns, and their logits are dropped;
  * token ids, positions and slots are copied into fixed buffers before each replay;
  * the KV cache is a block pool read through its block table (models/base.py): the graph
    captures the table tensor itself (static shape (rows, max_blocks)), and each replay looks up
    the rows' blocks in it on the device, so a row handed new blocks (KVCache.set_row, in place)
    needs no recapture. The scratch row must own its first block, which padding rows write;
  * attention runs over the first L keys of each slot, masked on the device by position
    (AttentionPlan.build with static_len), so no shape depends on exactly how far the requests
    have got and a graph stays valid as positions advance. L is a length bucket (powers of two
    from 256, then the cache's max_len) chosen on the host by the batch's longest context, which
    the host knows without a sync: a step reads at most twice the keys its longest context needs
    (or 256), never the cache's whole max_len. With max_len 4,096 and contexts of 300 a step
    gathers and reads 512 keys a slot, not 4,096. Warm-up captures every pair: a few dozen graphs
    at most, sharing one memory pool.

Prefill and mixed (chunked) steps run eagerly. With capture off -- any device but CUDA -- the
same padded static-shape step runs eagerly, which is what the CPU tests check against the
plain path.
"""
from __future__ import annotations

import bisect

import torch

from backend.models.base import KVCache, StepBatch

MIN_LENGTH_BUCKET = 256   # shorter key lengths save little: a decode step's keys are then a small part of its reads


def bucket_sizes(max_batch: int) -> list[int]:
    """Powers of two below max_batch, then max_batch itself: 5 -> [1, 2, 4, 5]."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be at least 1, got {max_batch}")
    sizes = [1]
    while sizes[-1] * 2 < max_batch:
        sizes.append(sizes[-1] * 2)
    if sizes[-1] != max_batch:
        sizes.append(max_batch)
    return sizes


def length_buckets(max_len: int, smallest: int = MIN_LENGTH_BUCKET) -> list[int]:
    """Key lengths a static decode step attends over: powers of two from `smallest` below max_len,
    then max_len itself: 4096 -> [256, 512, 1024, 2048, 4096]; 272 -> [256, 272]; 48 -> [48].
    `smallest` and max_len should be multiples of 16 (fused attention kernels want aligned masks)."""
    if max_len < 1 or smallest < 1:
        raise ValueError(f"max_len and smallest must be at least 1, got {max_len} and {smallest}")
    sizes = []
    size = smallest
    while size < max_len:
        sizes.append(size)
        size *= 2
    return sizes + [max_len]


class StaticDecoder:
    """Runs decode steps of up to max_batch requests as padded, fixed-shape batches."""

    def __init__(self, model: torch.nn.Module, cache: KVCache, scratch_slot: int, max_batch: int, capture: bool,
                 min_length: int = MIN_LENGTH_BUCKET):
        if not 0 <= scratch_slot < cache.num_slots:
            raise ValueError(f"scratch slot {scratch_slot} is not a slot of a {cache.num_slots}-slot cache")
        if int(cache.block_table[scratch_slot, 0]) < 0:
            raise ValueError(f"the scratch row {scratch_slot} owns no block for the padding rows to write")
        self.model = model
        self.cache = cache
        self.scratch_slot = scratch_slot
        self.buckets = bucket_sizes(max_batch)
        self.lengths = length_buckets(cache.max_len, min_length)
        self.capture = capture
        device = cache.k[0].device
        largest = self.buckets[-1]
        self.inputs = torch.zeros(3, largest, dtype=torch.long, device=device)  # rows: token ids, positions, slots
        self.rows = torch.arange(largest, device=device)
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}   # (bucket, length)
        self.pool = torch.cuda.graph_pool_handle() if capture else None
        self._reset_inputs()

    def bucket_for(self, num_requests: int) -> int:
        if not 1 <= num_requests <= self.buckets[-1]:
            raise ValueError(f"{num_requests} decode requests; this decoder takes 1 to {self.buckets[-1]}")
        return self.buckets[bisect.bisect_left(self.buckets, num_requests)]

    def length_for(self, longest_position: int) -> int:
        """The smallest length bucket holding keys 0..longest_position (the decode token's own included)."""
        if not 0 <= longest_position < self.lengths[-1]:
            raise ValueError(f"position {longest_position} outside this cache's 0..{self.lengths[-1] - 1}")
        return self.lengths[bisect.bisect_left(self.lengths, longest_position + 1)]

    def decode(self, slots: list[int], positions: list[int], token_ids: list[int]) -> torch.Tensor:
        """Logits (D, vocab) of one decode step: request i feeds token_ids[i] at positions[i] of slots[i]."""
        num = len(slots)
        size = self.bucket_for(num)
        length = self.length_for(max(positions))   # host values: no sync
        pad = size - num
        host = torch.tensor([token_ids + [0] * pad, positions + [0] * pad, slots + [self.scratch_slot] * pad],
                            dtype=torch.long)  # (3, size)
        self.inputs[:, :size].copy_(host)
        if not self.capture:
            return self.model(self._batch(size), self.cache, static_len=length)[:num]
        if (size, length) not in self.graphs:
            self._capture(size, length)
            self.inputs[:, :size].copy_(host)   # capture ran on padding inputs
        graph, logits = self.graphs[size, length]
        graph.replay()
        return logits[:num]

    def warmup(self) -> None:
        """Capture every (bucket, length) graph now (largest first, so the smaller ones reuse its
        memory), or on an eager device run the smallest bucket once at each length. Writes only
        the scratch slot."""
        if self.capture:
            for size in reversed(self.buckets):
                for length in reversed(self.lengths):
                    if (size, length) not in self.graphs:
                        self._capture(size, length)
        else:
            for length in self.lengths:
                self.model(self._batch(self.buckets[0]), self.cache, static_len=length)

    def _batch(self, size: int) -> StepBatch:
        ids, positions, slots = self.inputs[:, :size]
        return StepBatch(input_ids=ids, positions=positions, prefill=[], decode_slots=slots,
                         decode_positions=positions, decode_slot_range=None, logit_rows=self.rows[:size])

    def _reset_inputs(self) -> None:
        """Every row a padding row: token 0 at position 0 of the scratch slot."""
        self.inputs[:2].zero_()
        self.inputs[2].fill_(self.scratch_slot)

    def _capture(self, size: int, length: int) -> None:
        self._reset_inputs()
        batch = self._batch(size)
        # Warm up on a side stream first: lazy initialisation (library handles, the rotary
        # table, autotuning) must not happen inside the capture.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.model(batch, self.cache, static_len=length)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            logits = self.model(batch, self.cache, static_len=length)
        self.graphs[size, length] = (graph, logits)
