"""Decode with static shapes: the batch padded to a bucket, fixed input buffers, and on CUDA one
captured graph per bucket.

A decode step on a GPU is short and memory-bound (a few ms for a 1B model); launched op by op
from Python, its hundreds of kernel launches cost about as much as the work. A CUDA graph
replays the whole step with one launch, but only with the shapes and addresses it captured:

  * the decode batch is padded up to a bucket size (1, 2, 4, ..., max_batch), one graph per
    bucket; padding rows decode token 0 at position 0 of a scratch slot of the KV cache that
    no request owns, and their logits are dropped;
  * token ids, positions and slots are copied into fixed buffers before each replay;
  * attention runs over each slot's whole max_len keys, masked on the device by position
    (AttentionPlan.build with static_decode), so no shape depends on how far the requests have got and
    a graph stays valid as positions advance. The price is reading max_len keys per request
    instead of its context: size the cache to the workload (the runner does).

Prefill and mixed (chunked) steps run eagerly. With capture off -- any device but CUDA -- the
same padded static-shape step runs eagerly, which is what the CPU tests check against the
plain path.
"""
from __future__ import annotations

import bisect

import torch

from backend.models.base import KVCache, StepBatch


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


class StaticDecoder:
    """Runs decode steps of up to max_batch requests as padded, fixed-shape batches."""

    def __init__(self, model: torch.nn.Module, cache: KVCache, scratch_slot: int, max_batch: int, capture: bool):
        if not 0 <= scratch_slot < cache.num_slots:
            raise ValueError(f"scratch slot {scratch_slot} is not a slot of a {cache.num_slots}-slot cache")
        self.model = model
        self.cache = cache
        self.scratch_slot = scratch_slot
        self.buckets = bucket_sizes(max_batch)
        self.capture = capture
        device = cache.k[0].device
        largest = self.buckets[-1]
        self.inputs = torch.zeros(3, largest, dtype=torch.long, device=device)  # rows: token ids, positions, slots
        self.rows = torch.arange(largest, device=device)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.pool = torch.cuda.graph_pool_handle() if capture else None
        self._reset_inputs()

    def bucket_for(self, num_requests: int) -> int:
        if not 1 <= num_requests <= self.buckets[-1]:
            raise ValueError(f"{num_requests} decode requests; this decoder takes 1 to {self.buckets[-1]}")
        return self.buckets[bisect.bisect_left(self.buckets, num_requests)]

    def decode(self, slots: list[int], positions: list[int], token_ids: list[int]) -> torch.Tensor:
        """Logits (D, vocab) of one decode step: request i feeds token_ids[i] at positions[i] of slots[i]."""
        num = len(slots)
        size = self.bucket_for(num)
        pad = size - num
        host = torch.tensor([token_ids + [0] * pad, positions + [0] * pad, slots + [self.scratch_slot] * pad],
                            dtype=torch.long)  # (3, size)
        self.inputs[:, :size].copy_(host)
        if not self.capture:
            return self.model(self._batch(size), self.cache, static_decode=True)[:num]
        if size not in self.graphs:
            self._capture(size)
            self.inputs[:, :size].copy_(host)   # capture ran on padding inputs
        graph, logits = self.graphs[size]
        graph.replay()
        return logits[:num]

    def warmup(self) -> None:
        """Capture every bucket's graph now (largest first, so the smaller ones reuse its memory),
        or on an eager device run the smallest bucket once. Writes only the scratch slot."""
        if self.capture:
            for size in reversed(self.buckets):
                if size not in self.graphs:
                    self._capture(size)
        else:
            self.model(self._batch(self.buckets[0]), self.cache, static_decode=True)

    def _batch(self, size: int) -> StepBatch:
        ids, positions, slots = self.inputs[:, :size]
        return StepBatch(input_ids=ids, positions=positions, prefill=[], decode_slots=slots,
                         decode_positions=positions, decode_slot_range=None, logit_rows=self.rows[:size])

    def _reset_inputs(self) -> None:
        """Every row a padding row: token 0 at position 0 of the scratch slot."""
        self.inputs[:2].zero_()
        self.inputs[2].fill_(self.scratch_slot)

    def _capture(self, size: int) -> None:
        self._reset_inputs()
        batch = self._batch(size)
        # Warm up on a side stream first: lazy initialisation (library handles, the rotary
        # table, autotuning) must not happen inside the capture.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.model(batch, self.cache, static_decode=True)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            logits = self.model(batch, self.cache, static_decode=True)
        self.graphs[size] = (graph, logits)
