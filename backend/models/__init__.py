"""Decoder models and the step-batch helper the runner and the tests share."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from backend.models.base import KVCache, Segment, StepBatch
from backend.models.shapes import SHAPES, SYNTHETIC, build_model

__all__ = ["KVCache", "SHAPES", "SYNTHETIC", "Segment", "StepBatch", "build_model", "make_step_batch"]


def make_step_batch(prefill: Sequence[tuple[int, int, Sequence[int]]],
                    decode: Sequence[tuple[int, int, int]], device: torch.device | str,
                    every_row: Sequence[int] = ()) -> StepBatch:
    """Build one step's tensors.

    prefill: (slot, start, token_ids) per segment -- token_ids go to positions start, start+1, ...
    decode:  (slot, position, token_id) per decoding request.
    Logits are asked for the last token of every prefill segment, then every decode token; a segment
    whose index is in `every_row` (a speculative verification: backend/engine/spec/) gets them for each
    of its positions instead, in position order.
    """
    ids: list[int] = []
    positions: list[int] = []
    segments: list[Segment] = []
    rows: list[int] = []
    for slot, start, tokens in prefill:
        if not tokens:
            raise ValueError(f"empty prefill segment for slot {slot}")
        ids.extend(tokens)
        positions.extend(range(start, start + len(tokens)))
        segments.append(Segment(slot, start, len(tokens)))
        if len(segments) - 1 in every_row:
            rows.extend(range(len(ids) - len(tokens), len(ids)))
        else:
            rows.append(len(ids) - 1)
    slots = [slot for slot, _, _ in decode]
    decode_positions = [pos for _, pos, _ in decode]
    rows.extend(range(len(ids), len(ids) + len(decode)))
    ids.extend(token for _, _, token in decode)
    positions.extend(decode_positions)
    n, d = len(ids), len(decode)
    # One tensor (one host-to-device copy on a GPU), handed out as views.
    flat = torch.tensor(ids + positions + slots + decode_positions + rows, dtype=torch.long, device=device)
    contiguous = d > 0 and slots == list(range(slots[0], slots[0] + d))
    return StepBatch(
        input_ids=flat[:n],
        positions=flat[n:2 * n],
        prefill=segments,
        decode_slots=flat[2 * n:2 * n + d],
        decode_positions=flat[2 * n + d:2 * n + 2 * d],
        decode_slot_range=(slots[0], slots[0] + d) if contiguous else None,
        logit_rows=flat[2 * n + 2 * d:],
    )
