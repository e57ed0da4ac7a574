"""The untimed steps a run takes before its timed ones: one of every step shape it will time.

A shape's first use pays one-time costs the later ones do not: on a GPU kernel selection and
loading, cuBLAS workspaces, the rotary table, the sampler's kernels; on the CPU the packed
kernels' first calls. A warm-up that misses a shape moves that cost into the run's first step
of it, which then stands out in the figures. The shapes differ by what the attention plan and
the sampler do, so the list follows the run's settings:

  * a prefill from position 0 (every policy), its first token sampled;
  * a decode of one request (every key visible: no mask), and of two at different positions
    (a mask hides each request's later keys);
  * chunked: a later chunk (a prefill segment with keys before it) and mixed steps (a prefill
    chunk with decode tokens in the same step: one, and two at different positions, masked),
    which no other policy schedules;
  * a sliding window shorter than the cache: a decode past the window (its own mask, or on
    the CPU a different kernel);
  * sampling with a temperature: every sampling step runs the sampler (softmax, top-p, draws)
    on its logits, with a generator of its own so the run's seeded draws stay as they were.

The static decode path (CUDA graphs) is warmed by StaticDecoder.warmup, every (batch bucket,
length bucket) captured. Steps write slots 0, 1 and 2 only; every request later writes its own
slot from position 0 before attention reads it (a warm-up step reads whatever a slot holds: finite
values, which is all a warm-up needs).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WarmupStep:
    name: str
    prefill: tuple[tuple[int, int, int], ...]   # (slot, start, length) per prefill segment
    decode: tuple[tuple[int, int], ...]         # (slot, position) per decode token
    samples: bool                               # run the sampler on its logits (a temperature above 0)

    @property
    def last_position(self) -> int:
        ends = [start + length - 1 for _, start, length in self.prefill] + [pos for _, pos in self.decode]
        return max(ends)


def warmup_steps(policy: str, num_slots: int, max_len: int, chunk_tokens: int = 512, temperature: float = 0.0,
                 window: int | None = None, prompt_len: int = 16) -> list[WarmupStep]:
    """The warm-up steps of a run with these settings (see the module docstring), each within
    max_len positions. prompt_len: the warm-up prompt's length (short: the shapes matter, not the sizes)."""
    if num_slots < 1 or max_len < 2:
        raise ValueError(f"a run needs a slot and two positions, got {num_slots} slots of {max_len}")
    sampling = temperature > 0
    p = max(1, min(prompt_len, (max_len - 1) // 2))   # slot 0's prompt; it decodes at p, p + 1, ...
    q = max(1, p // 2)                                # slot 1's, shorter: its decode position differs
    steps = [WarmupStep("prefill", ((0, 0, p),), (), sampling),
             WarmupStep("decode", (), ((0, p),), sampling)]
    two = num_slots >= 2
    if policy == "chunked" and two:
        first = max(1, min(q, chunk_tokens) // 2)     # slot 1's prompt in two chunks, the first mixed with a decode
        steps.append(WarmupStep("mixed", ((1, 0, first),), ((0, p + 1),), sampling))
        if q > first:
            steps.append(WarmupStep("later chunk", ((1, first, q - first),), (), sampling))
        else:   # too short to split: a later chunk of slot 0's prompt instead, over its own keys
            steps.append(WarmupStep("later chunk", ((0, p + 1, 1),), (), sampling))
        if num_slots >= 3:   # decode tokens at two positions beside a chunk: the decode mask in a mixed step
            steps.append(WarmupStep("masked mixed", ((1, 0, first),), ((0, p + 2), (2, 1)), sampling))
    elif two:
        steps.append(WarmupStep("prefill", ((1, 0, q),), (), sampling))
    if two:
        steps.append(WarmupStep("masked decode", (), ((0, p + 2), (1, q)), sampling))
    if window is not None and window + 1 < max_len:
        steps.append(WarmupStep("decode past the window", (), ((0, max_len - 1),), sampling))
    return [s for s in steps if s.last_position < max_len]
