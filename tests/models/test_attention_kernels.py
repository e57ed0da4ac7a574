"""The CUDA attention kernel choice (a pure rule, asked for "cuda" on any machine) and each choice's
arithmetic, run on the CPU, against the eager scores with the full mask in float64."""
from __future__ import annotations

import pytest
import torch

import backend.models.attention_kernels as ak
from backend.models.attention_kernels import Kernel, KernelChoice, choose_kernel, run_kernel

H100 = (9, 0)
T4 = (7, 5)


def choice(dtype=torch.bfloat16, length=128, start=0, window=None, heads=8, kv=2, softcap=None, capability=H100):
    return choose_kernel("cuda", dtype, length, start, window, heads, kv, softcap, capability)


def test_a_first_chunk_runs_causal_sdpa_with_gqa_on_flash_in_half_precision():
    assert choice() == KernelChoice(Kernel.CAUSAL, expand_kv=False)
    assert choice(torch.float16) == KernelChoice(Kernel.CAUSAL, expand_kv=False)
    assert choice(kv=8) == KernelChoice(Kernel.CAUSAL, expand_kv=False)   # no GQA


def test_gqa_in_float32_or_before_ampere_expands_kv_for_the_memory_efficient_kernel():
    assert choice(torch.float32) == KernelChoice(Kernel.CAUSAL, expand_kv=True)
    assert choice(torch.float16, capability=T4) == KernelChoice(Kernel.CAUSAL, expand_kv=True)
    assert choice(capability=None) == KernelChoice(Kernel.CAUSAL, expand_kv=True)
    assert choice(torch.float32, kv=8) == KernelChoice(Kernel.CAUSAL, expand_kv=False)   # nothing to expand


def test_a_later_chunk_runs_the_bottom_right_causal_bias_not_a_mask():
    assert choice(start=512) == KernelChoice(Kernel.CAUSAL_OFFSET, expand_kv=False)
    assert choice(torch.float32, start=512) == KernelChoice(Kernel.CAUSAL_OFFSET, expand_kv=True)


def test_a_window_that_cuts_runs_a_mask_over_its_span_on_the_memory_efficient_kernel():
    assert choice(length=100, window=128) == KernelChoice(Kernel.CAUSAL, expand_kv=False)       # inside the window
    assert choice(length=28, start=100, window=128) == KernelChoice(Kernel.CAUSAL_OFFSET, expand_kv=False)
    assert choice(length=200, window=128) == KernelChoice(Kernel.WINDOW_MASK, expand_kv=True)   # a mask rules out flash
    assert choice(length=20, start=120, window=128) == KernelChoice(Kernel.WINDOW_MASK, expand_kv=True)
    assert choice(length=200, window=128, kv=8) == KernelChoice(Kernel.WINDOW_MASK, expand_kv=False)


def test_gemma_2s_soft_cap_runs_blocked_scores_and_off_cuda_the_reference():
    for start, window in ((0, None), (300, None), (0, 64), (300, 64)):
        assert choice(start=start, window=window, softcap=50.0) == KernelChoice(Kernel.BLOCKED_SCORES, False)
    assert choose_kernel("cpu", torch.float32, 128, 0, None, 8, 2, None) == KernelChoice(Kernel.REFERENCE, False)
    assert choose_kernel("mps", torch.float16, 128, 64, 32, 8, 2, 30.0).kernel is Kernel.REFERENCE


def reference(q, k, v, start, window, scale, softcap):
    """q (1, heads, L, hd) at positions start.., k and v (1, kv, start+L, hd) -> (1, heads, L, hd), float64."""
    heads, length, hd = q.shape[1], q.shape[2], q.shape[3]
    group = heads // k.shape[1]
    pos = torch.arange(start, start + length)[:, None]
    key = torch.arange(start + length)[None, :]
    seen = (key <= pos) & ((key > pos - window) if window else True)
    out = []
    for h in range(heads):
        s = q[0, h].double() @ k[0, h // group].double().T * (hd ** -0.5 if scale is None else scale)
        if softcap:
            s = torch.tanh(s / softcap) * softcap
        out.append(torch.softmax(s.masked_fill(~seen, float("-inf")), -1) @ v[0, h // group].double())
    return torch.stack(out)[None]


CASES = [   # (length, start, heads, kv, window, softcap): each a case the rule sends somewhere else
    (33, 0, 8, 2, None, None),      # first chunk, GQA
    (33, 0, 4, 4, None, None),      # first chunk, no GQA
    (20, 45, 8, 2, None, None),     # a later chunk
    (70, 100, 4, 2, 16, None),      # a window shorter than the segment, after a chunk
    (40, 0, 4, 1, 16, None),        # a window inside a first chunk
    (5, 3, 4, 2, 4, None),          # a window after a chunk, shorter than the segment
    (33, 0, 4, 2, None, 50.0),      # Gemma 2's cap
    (30, 20, 4, 2, 8, 5.0),         # the cap, a window and a later chunk
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("length, start, heads, kv, window, softcap", CASES)
def test_each_choice_computes_the_reference_attention(length, start, heads, kv, window, softcap, dtype):
    gen = torch.Generator().manual_seed(length + start)
    hd = 32
    q = torch.randn(1, heads, length, hd, generator=gen).to(dtype)
    k, v = (torch.randn(1, kv, start + length, hd, generator=gen).to(dtype) for _ in range(2))
    scale = 0.7 * hd ** -0.5
    expected = reference(q, k, v, start, window, scale, softcap)
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    for capability in (H100, T4):   # with and without flash's GQA: both expansions
        picked = choose_kernel("cuda", dtype, length, start, window, heads, kv, softcap, capability)
        got = run_kernel(picked, q, k, v, start, window, scale, softcap)
        assert got.shape == q.shape
        assert (got.double() - expected).abs().max() < tol, picked
    got = run_kernel(KernelChoice(Kernel.REFERENCE, False), q, k, v, start, window, scale, softcap)
    assert (got.double() - expected).abs().max() < tol


def test_the_soft_cap_blocks_keep_each_block_under_the_bound_and_agree(monkeypatch):
    """A bound of a few rows' scores: many blocks, the same answer as one."""
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 4, 50, 16, generator=gen)
    k, v = torch.randn(1, 2, 60, 16, generator=gen), torch.randn(1, 2, 60, 16, generator=gen)
    whole = ak.blocked_scores(q, k, v, 10, 12, None, 20.0)
    calls = []
    real = ak.scores_attention
    monkeypatch.setattr(ak, "BLOCK_BYTES", 4 * 4 * 60 * 7)   # 7 rows of 4 heads x 60 keys
    monkeypatch.setattr(ak, "scores_attention", lambda q, *a: calls.append(q.shape[2]) or real(q, *a))
    blocked = ak.blocked_scores(q, k, v, 10, 12, None, 20.0)
    assert max(calls) == 7 and sum(calls) == 50
    torch.testing.assert_close(blocked, whole, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(blocked.double(), reference(q, k, v, 10, 12, None, 20.0), atol=1e-5, rtol=1e-5)


def test_masks_are_laid_out_aligned_for_the_memory_efficient_kernel():
    mask = ak.window_mask(100, 70, 16, torch.bfloat16, "cpu")
    assert mask.shape == (70, 70 + 15) and mask.stride(0) % 16 == 0
    assert (mask == 0).sum(dim=1).tolist() == [16] * 70   # every query sees its window's 16 keys
