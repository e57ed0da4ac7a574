"""The CUDA path on a real GPU: every family in bfloat16 and float16 against float32, CUDA graphs
against eager decode (Gemma's windows and soft caps, an MoE), chunked prefill against one shot,
the attention kernels without SDPA's math fallback, MoE routing with no host sync, the length
buckets, the int8 refusal. Every test's name holds "cuda" (`pytest -k cuda` selects them, as
bench/gpu_check.sh does); without a GPU they skip, with the reason."""
from __future__ import annotations

import math

import pytest
import torch

from backend.engine.cuda_graphs import StaticDecoder
from backend.models import KVCache, build_model, make_step_batch, moe
from tests.fakes.paged import scramble
from backend.models.attention_kernels import choose_kernel, run_kernel
from backend.shape import ModelShape

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
DEV = "cuda"

BASE = dict(vocab_size=96, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
            intermediate_size=128, max_position=4096)
FAMILIES = {
    "llama": ModelShape(arch="llama", **BASE),
    "mistral": ModelShape(arch="llama", **BASE, sliding_window=8),
    "gemma2": ModelShape(arch="gemma", **BASE, sliding_window=8, global_layers=(1,), attn_softcap=50.0,
                         final_softcap=30.0, query_pre_attn_scalar=16),
    "gemma3": ModelShape(arch="gemma", **BASE, sliding_window=8, global_layers=(1,), qk_norm=True,
                         rope_local_theta=10000.0),
    "gpt2": ModelShape(arch="gpt2", **dict(BASE, num_kv_heads=4), tie_embeddings=True),
    "moe": ModelShape(arch="llama", **dict(BASE, intermediate_size=32), num_experts=8, experts_per_token=2,
                      norm_topk_prob=True),
}
HALF = {"bfloat16": torch.bfloat16, "float16": torch.float16}
PROMPTS = {0: 30, 1: 9, 2: 14, 3: 5}   # slot -> prompt length (past the window of 8)


def model_for(family: str, device: str = "cpu", dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model(FAMILIES[family]).eval().requires_grad_(False)
    for p in model.parameters():
        p.normal_(0, 0.3)
    return model.to(device=device, dtype=dtype)


def prompt(slot: int) -> list[int]:
    return [(7 * slot + 3 * i + 1) % 96 for i in range(PROMPTS[slot])]


def step(model, cache, prefill, decode, device) -> torch.Tensor:
    with torch.inference_mode():
        return model(make_step_batch(prefill, decode, device), cache).float().cpu()


def assert_near(got: torch.Tensor, expected: torch.Tensor, rel: float) -> None:
    """Within rel of the largest expected logit."""
    assert got.shape == expected.shape
    assert torch.isfinite(got).all()
    assert (got - expected).abs().max() <= rel * expected.abs().max(), (got - expected).abs().max()


@pytest.mark.parametrize("dtype", list(HALF))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_cuda_half_precision_follows_float32_through_prefill_chunks_and_decode(family, dtype):
    shape = FAMILIES[family]
    ref, gpu = model_for(family), model_for(family, DEV, HALF[dtype])
    caches = KVCache(shape, 4, 64, "cpu", torch.float32), KVCache(shape, 4, 64, DEV, HALF[dtype])
    rel = 0.05 if dtype == "bfloat16" else 0.02
    steps = [([(0, 0, prompt(0)[:12]), (1, 0, prompt(1))], []),            # two first chunks
             ([(0, 12, prompt(0)[12:])], [(1, 9, 5)]),                     # a later chunk past the window, mixed
             ([], [(0, 30, 7), (1, 10, 8)])]                               # decode at two positions
    for prefill, decode in steps:
        assert_near(step(gpu, caches[1], prefill, decode, DEV), step(ref, caches[0], prefill, decode, "cpu"), rel)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_cuda_chunked_prefill_matches_one_shot(family, dtype):
    """Chunks of 16, 16 and 8 (later chunks, windows cut, the soft cap) against the whole prompt at once."""
    shape = FAMILIES[family]
    dt = torch.float32 if dtype == "float32" else torch.bfloat16
    model = model_for(family, DEV, dt)
    tokens = [(5 * i + 2) % 96 for i in range(40)]
    whole = step(model, KVCache(shape, 1, 64, DEV, dt), [(0, 0, tokens)], [], DEV)
    cache = KVCache(shape, 1, 64, DEV, dt)
    for start, end in ((0, 16), (16, 32), (32, 40)):
        chunked = step(model, cache, [(0, start, tokens[start:end])], [], DEV)
    assert_near(chunked, whole, 1e-4 if dtype == "float32" else 0.03)


@pytest.mark.parametrize("table", ["identity", "scrambled"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_cuda_graphs_match_eager_decode_across_batch_and_length_buckets(family, dtype, table):
    """Captured graphs (length buckets 16, 32, 64 of a 64-position cache) against the eager step,
    the batch growing and shrinking and the contexts passing 16, 32 and the window; each replay
    first has its output poisoned with NaN, so a graph that replays nothing fails."""
    shape = FAMILIES[family]
    dt = torch.float32 if dtype == "float32" else torch.bfloat16
    model = model_for(family, DEV, dt)
    plain, static = KVCache(shape, 4, 64, DEV, dt), KVCache(shape, 5, 64, DEV, dt)
    if table == "scrambled":   # the graphs gather every row's keys through permuted blocks
        scramble(static, seed=5)
    decoder = StaticDecoder(model, static, scratch_slot=4, max_batch=4, capture=True, min_length=16)
    assert decoder.lengths == [16, 32, 64]
    positions = {}
    for cache in (plain, static):
        step(model, cache, [(s, 0, prompt(s)) for s in PROMPTS], [], DEV)
    positions = dict(PROMPTS)
    schedule = [[0, 1, 2, 3], [3, 1], [2], [0, 2, 3]] * 4   # contexts from 5 to 38 tokens: buckets 16, 32, 64
    for n, slots in enumerate(schedule):
        tokens = [(11 * n + s) % 96 for s in slots]
        pos = [positions[s] for s in slots]
        expected = step(model, plain, [], list(zip(slots, pos, tokens)), DEV)
        key = (decoder.bucket_for(len(slots)), decoder.length_for(max(pos)))
        if key in decoder.graphs:
            decoder.graphs[key][1].fill_(math.nan)
        with torch.inference_mode():
            got = decoder.decode(slots, pos, tokens).float().cpu()
        assert_near(got, expected, 1e-4 if dtype == "float32" else 0.03)
        for s in slots:
            positions[s] += 1
    assert {length for _, length in decoder.graphs} == {16, 32, 64}


def test_cuda_graph_decode_reads_the_length_bucket_of_its_contexts_not_max_len():
    shape = FAMILIES["llama"]
    model = model_for("llama", DEV, torch.bfloat16)
    cache = KVCache(shape, 3, 4096, DEV, torch.bfloat16)
    decoder = StaticDecoder(model, cache, scratch_slot=2, max_batch=2, capture=True)
    step(model, cache, [(0, 0, prompt(0)), (1, 0, prompt(1))], [], DEV)
    with torch.inference_mode():
        for i in range(3):
            decoder.decode([0, 1], [30 + i, 9 + i], [1, 2])
    assert set(decoder.graphs) == {(2, 256)}


CASES = [(128, 0, 8, 2, None), (128, 0, 8, 8, None), (64, 192, 8, 2, None), (200, 100, 8, 2, 64), (256, 0, 8, 1, 64)]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("length, start, heads, kv, window", CASES)
def test_cuda_attention_kernels_run_without_the_math_fallback(length, start, heads, kv, window, dtype):
    """Each choice under SDPA restricted to flash and memory-efficient: a fall back to the math kernel
    raises. Against the float32 reference on the CPU."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from tests.models.test_attention_kernels import reference
    dt = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    gen = torch.Generator().manual_seed(length + start)
    q = torch.randn(1, heads, length, 64, generator=gen)
    k, v = (torch.randn(1, kv, start + length, 64, generator=gen) for _ in range(2))
    choice = choose_kernel("cuda", dt, length, start, window, heads, kv, None, torch.cuda.get_device_capability())
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        got = run_kernel(choice, q.to(DEV, dt), k.to(DEV, dt), v.to(DEV, dt), start, window, None, None)
    expected = reference(q, k, v, start, window, None, None)
    assert (got.double().cpu() - expected).abs().max() < (1e-3 if dt == torch.float32 else 3e-2), choice


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_moe_routes_with_no_host_sync_and_matches_the_sorted_path(dtype):
    """The CUDA path (grouped or dense) under sync debug mode "error", against torch_moe on the CPU
    on the same rounded inputs; a router scaled up so that no row's top-k is a near tie."""
    dt = torch.float32 if dtype == "float32" else torch.bfloat16
    g = torch.Generator().manual_seed(1)
    d, ff, num_experts, k, n = 64, 32, 8, 2, 37
    h, residual = torch.randn(n, d, generator=g).to(dt), torch.randn(n, d, generator=g).to(dt)
    router = (torch.randn(num_experts, d, generator=g) * 4).to(dt)
    plain = [((torch.randn(2 * ff, d, generator=g) * 0.2).to(dt), (torch.randn(d, ff, generator=g) * 0.2).to(dt))
             for _ in range(num_experts)]
    expected, touched = moe.torch_moe(h.float(), residual.float(), router.float(),
                                      [(a.float(), b.float()) for a, b in plain], k, True)
    path = moe.moe_path("cuda", dt, False, True, d, ff, torch.cuda.get_device_capability())
    args = [t.to(DEV) for t in (h, residual, router, torch.stack([a for a, _ in plain]),
                                torch.stack([b for _, b in plain]))]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")   # any synchronizing call in the routed path raises
    try:
        got, got_touched = moe.device_moe(*args, k, True, path is moe.MoePath.GROUPED)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert int(got_touched) == touched
    assert_near(got.float().cpu(), expected, 1e-5 if dt == torch.float32 else 0.02)


def test_cuda_int8_is_refused_in_one_line():
    from backend.errors import InputError
    from backend.loaders.weights import load_model
    with pytest.raises(InputError, match="does not run on CUDA") as refused:
        load_model("tiny", "cuda", "int8")
    assert "\n" not in str(refused.value)


def test_cuda_runner_warmup_captures_every_graph_and_leaves_no_trace():
    from backend.config import SamplingConfig
    from backend.engine.warmup import warmup_steps
    from tests.engine.test_cuda_graphs import loaded
    from tests.engine.test_runner import run_engine, specs
    sampling = SamplingConfig(temperature=0.9, top_p=0.95, seed=5, ignore_eos=True)

    def generate(warm: bool):
        from backend.engine.runner import Runner
        runner = Runner(loaded("llama", DEV), 3, 40, sampling)
        assert runner.static is not None and runner.static.capture
        if warm:
            runner.warmup(warmup_steps("chunked", 3, 40, 8, sampling.temperature))
            assert len(runner.static.graphs) == len(runner.static.buckets) * len(runner.static.lengths)
        return run_engine(runner, specs())
    assert generate(True) == generate(False)
