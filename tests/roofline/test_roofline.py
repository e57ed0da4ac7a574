"""The roofline model: hand-counted FLOPs and bytes, the bound at the ridge, decode batching."""
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from backend.errors import InputError
from backend.summary import Summary
from backend.roofline.profiles import GpuProfile, find_profile
from backend.roofline.cost import (
    CROSSOVER_CAP, Bound, PhaseTotals, crossover_batch, layer_params, phase_cost, phase_roofline, predict,
    predict_decode, predict_prefill, step_cost, step_pairs, utilization,
)


@dataclass(frozen=True)
class Shape:
    """Duck-typed stand-in for backend.models.base.ModelShape: the roofline needs no torch."""

    arch: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    max_position: int = 64
    tie_embeddings: bool = False
    attention_bias: bool = False


# 1 layer, hidden 8, 2 query heads and 1 KV head of 4, SwiGLU width 16, vocabulary 32.
TINY_LLAMA = Shape("llama", vocab_size=32, hidden_size=8, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=4,
                   intermediate_size=16)
# 1 layer, hidden 8, 2 heads of 4, MLP width 32, vocabulary 16, tied embeddings.
TINY_GPT2 = Shape("gpt2", vocab_size=16, hidden_size=8, num_layers=1, num_heads=2, num_kv_heads=2, head_dim=4,
                  intermediate_size=32, tie_embeddings=True)
LLAMA_1B = Shape("llama", vocab_size=128256, hidden_size=2048, num_layers=16, num_heads=32, num_kv_heads=8,
                 head_dim=64, intermediate_size=8192, max_position=131072, tie_embeddings=True)


def profile(peak_tflops: float, bandwidth_gbs: float) -> GpuProfile:
    return GpuProfile(key="test", name="test", vendor="test", memory_gb=1.0, bandwidth_gbs=bandwidth_gbs,
                      tflops={"fp32": peak_tflops}, source="test")


def test_llama_prefill_hand_count():
    # one fresh request of 3 prompt tokens, bf16 (2 bytes)
    cost = step_cost(TINY_LLAMA, 2, new_tokens=[3], context=[3])
    # matrices: q 8*2*4=64, k 8*1*4=32, v 32, o 2*4*8=64, MLP 3*8*16=384 -> 576 weights
    linear = 2 * 576 * 3                    # 3456
    # causal pairs among 3 new tokens: 1 + 2 + 3 = 6; scores + values: 2 * 2 FLOPs * 2 heads * 4 dims each
    attention = 4 * 2 * 4 * 6 * 1           # 192
    head = 2 * 8 * 32 * 1                   # 512: logits for the last prompt token only
    assert (cost.linear_flops, cost.attention_flops, cost.head_flops) == (linear, attention, head)
    assert cost.flops == 4160
    # weights: 576 + two RMSNorms 16 + final norm 8 + LM head 32*8=256 + 3 gathered embedding rows 24 = 880
    assert cost.weight_bytes == 880 * 2
    # KV: 2 (k, v) * 1 layer * 1 head * 4 dims * 2 bytes = 16 B/token; read 3 context + write 3 new
    assert cost.kv_bytes == 16 * (3 + 3)
    # residual stream: 3 tokens * (embedding 8 + 4*8 per layer) + 1 logit row * (hidden 8 + logits 32)
    assert cost.activation_bytes == (3 * (8 + 32) + 1 * (8 + 32)) * 2
    assert cost.bytes == 1760 + 96 + 320


def test_llama_mixed_step_hand_count():
    # request A decodes one token with 5 in context; request B prefills a chunk of 2 after 4 cached tokens
    cost = step_cost(TINY_LLAMA, 4, new_tokens=[1, 2], context=[5, 6])
    pairs = 5 + (2 * 4 + (1 + 2))           # A: 5 keys; B: 2 queries x 4 cached + causal triangle 1 + 2
    assert cost.attention_flops == 4 * 2 * 4 * pairs
    assert cost.linear_flops == 2 * 576 * 3
    assert cost.head_flops == 2 * 8 * 32 * 2
    assert cost.weight_bytes == (576 + 16 + 8 + 256 + 3 * 8) * 4
    assert cost.kv_bytes == 2 * 1 * 1 * 4 * 4 * ((5 + 6) + 3)
    # an intermediate chunk needs no logits: only A's row
    assert step_cost(TINY_LLAMA, 4, [1, 2], [5, 6], logit_rows=1).head_flops == 2 * 8 * 32


def test_gpt2_decode_hand_count():
    # one decode token attending to 4 tokens, fp32
    cost = step_cost(TINY_GPT2, 4, new_tokens=[1], context=[4])
    # matrices: qkv 8*24=192, o 8*8=64, MLP 2*8*32=512 -> 768
    assert cost.linear_flops == 2 * 768 * 1
    assert cost.attention_flops == 4 * 2 * 4 * 4
    assert cost.head_flops == 2 * 8 * 16
    # layer: 768 + biases (qkv 24, o 8, MLP 32 + 8) + two LayerNorms 4*8 = 872; final LayerNorm 16;
    # tied LM head 16*8 = 128 read whole; gathered token and position rows 2*8 = 16
    assert cost.weight_bytes == (872 + 16 + 128 + 16) * 4
    assert cost.kv_bytes == 2 * 1 * 2 * 4 * 4 * (4 + 1)
    assert cost.activation_bytes == (1 * (8 + 32) + 1 * (8 + 16)) * 4
    assert cost.bytes == 4128 + 320 + 256


@pytest.mark.parametrize("arch,bias,tied", [("llama", False, False), ("llama", True, True), ("gpt2", True, True)])
def test_layer_params_agree_with_model_shape(arch, bias, tied):
    from backend.shape import ModelShape

    shape = ModelShape(arch, vocab_size=100, hidden_size=16, num_layers=3, num_heads=4,
                       num_kv_heads=4 if arch == "gpt2" else 2, head_dim=4, intermediate_size=40, max_position=32,
                       tie_embeddings=tied, attention_bias=bias)
    embeddings = shape.vocab_size * 16 * (1 if tied else 2) + (32 * 16 if arch == "gpt2" else 0)
    final_norm = 2 * 16 if arch == "gpt2" else 16
    assert embeddings + 3 * layer_params(shape) + final_norm == shape.num_params()


def test_bound_flips_at_the_ridge():
    cost = step_cost(TINY_LLAMA, 4, [8], [8])
    bandwidth_gbs = 100.0
    ridge_tflops = cost.intensity * bandwidth_gbs * 1e9 / 1e12    # the peak whose ridge equals this intensity
    below = predict(cost, profile(ridge_tflops * 1.02, bandwidth_gbs), "fp32")   # ridge above the intensity
    above = predict(cost, profile(ridge_tflops * 0.98, bandwidth_gbs), "fp32")
    assert below.bound is Bound.MEMORY and below.time_s == below.memory_s > below.compute_s
    assert above.bound is Bound.COMPUTE and above.time_s == above.compute_s > above.memory_s
    assert below.memory_s == pytest.approx(cost.bytes / 100e9)


def test_prefill_is_compute_bound_and_decode_memory_bound_on_h100():
    h100 = find_profile("h100-sxm")
    assert predict_prefill(LLAMA_1B, 2, 2048, h100, "bf16").bound is Bound.COMPUTE
    assert predict_decode(LLAMA_1B, 2, 1, 512, h100, "bf16").bound is Bound.MEMORY


def test_decode_time_grows_sublinearly_below_the_crossover():
    h100 = find_profile("h100-sxm")
    crossover = crossover_batch(LLAMA_1B, 2, 64, h100, "bf16")
    assert 64 < crossover < CROSSOVER_CAP
    assert predict_decode(LLAMA_1B, 2, crossover, 64, h100, "bf16").bound is Bound.COMPUTE
    assert predict_decode(LLAMA_1B, 2, crossover - 1, 64, h100, "bf16").bound is Bound.MEMORY
    batch = 1
    while 2 * batch < crossover:
        t1 = predict_decode(LLAMA_1B, 2, batch, 64, h100, "bf16").time_s
        t2 = predict_decode(LLAMA_1B, 2, 2 * batch, 64, h100, "bf16").time_s
        assert t1 < t2 < 2 * t1           # more tokens per step for less than twice the time
        batch *= 2


def test_crossover_tracks_the_ridge():
    # with the KV cache small beside the weights, the crossover batch is near the ridge point
    h100, a100 = find_profile("h100-sxm"), find_profile("a100-80gb-sxm")
    h_cross = crossover_batch(LLAMA_1B, 2, 16, h100, "bf16")
    a_cross = crossover_batch(LLAMA_1B, 2, 16, a100, "bf16")
    assert a_cross < h_cross
    assert h_cross / a_cross == pytest.approx(h100.ridge("bf16") / a100.ridge("bf16"), rel=0.1)


def test_long_context_never_crosses():
    # every request reads 32k tokens of KV per new token: decode stays memory-bound at any batch
    assert crossover_batch(LLAMA_1B, 2, 32768, find_profile("h100-sxm"), "bf16") == CROSSOVER_CAP


def test_utilization():
    cost = step_cost(TINY_LLAMA, 4, [1], [10])
    device = profile(1.0, 10.0)
    prediction = predict(cost, device, "fp32")
    achieved_flops, achieved_bytes_s, mfu, mbu = utilization(cost, prediction.time_s, device, "fp32")
    assert mbu == pytest.approx(1.0)                      # memory-bound: running at the roofline is full bandwidth
    assert achieved_bytes_s == pytest.approx(10e9)
    assert mfu == pytest.approx(cost.flops / prediction.time_s / 1e12)
    assert achieved_flops == pytest.approx(cost.flops / prediction.time_s)
    half = utilization(cost, 2 * prediction.time_s, device, "fp32")
    assert half.mbu == pytest.approx(0.5)
    with pytest.raises(InputError):
        utilization(cost, 0.0, device, "fp32")


def test_a_local_measured_profile_works_like_a_datasheet_one():
    local = GpuProfile(key="this-machine", name="here", vendor="x", memory_gb=24, bandwidth_gbs=20.0,
                       tflops={"fp32": 0.1}, source="measured", measured=True)
    assert predict_decode(LLAMA_1B, 4, 1, 128, local, "float32").bound is Bound.MEMORY
    with pytest.raises(InputError, match="bf16"):
        predict_decode(LLAMA_1B, 2, 1, 128, local, "bfloat16")


@pytest.mark.parametrize("new,context", [([1], [1, 2]), ([], []), ([0], [4]), ([3], [2])])
def test_bad_steps_are_refused(new, context):
    with pytest.raises(InputError):
        step_cost(TINY_LLAMA, 2, new, context)


def test_roofline_module_does_not_import_torch():
    code = "import sys, backend.roofline.cost; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2]).returncode == 0


def profile_with(bandwidth_gbs: float, fp32_tflops: float = 1.0) -> GpuProfile:
    return GpuProfile(key="p", name="p", vendor="x", memory_gb=1.0, bandwidth_gbs=bandwidth_gbs,
                      tflops={"fp32": fp32_tflops}, source="test")


def decode_totals(batch: int, first_context: int, steps: int, time_ms: float) -> PhaseTotals:
    """The decode steps of `batch` requests from `first_context` tokens on, as the engine records them."""
    totals = PhaseTotals()
    for i in range(steps):
        totals.add_step(requests=batch, tokens=batch, context_tokens=batch * (first_context + i),
                        duration_ms=time_ms / steps)
    return totals


def test_step_pairs_are_exact_for_decode_steps_and_equal_prompts():
    # decode: one new token per request, each attending to its whole context
    assert step_pairs(3, 3, 3 * 40) == step_cost(TINY_LLAMA, 4, [1] * 3, [40] * 3).attention_flops / (4 * 2 * 4)
    # a batch of equal fresh prompts: the causal triangle of each
    assert step_pairs(2, 2 * 5, 2 * 5) == 2 * 15
    # a chunk of 2 after 4 cached tokens: 2 x 4 pairs with the cache + the triangle 1 + 2
    assert step_pairs(1, 2, 6) == 11
    assert step_pairs(0, 0, 0) == 0
    import numpy as np
    got = step_pairs(np.array([3.0, 2.0]), np.array([3.0, 10.0]), np.array([120.0, 10.0]))
    assert list(got) == [120.0, 30.0]


def test_a_phase_costs_the_sum_of_its_steps():
    totals = decode_totals(batch=2, first_context=9, steps=4, time_ms=8.0)
    steps = [step_cost(TINY_LLAMA, 4, [1, 1], [9 + i, 9 + i]) for i in range(4)]
    cost = phase_cost(TINY_LLAMA, 4, totals)
    assert cost.flops == pytest.approx(sum(c.flops for c in steps))
    assert cost.bytes == pytest.approx(sum(c.bytes for c in steps))
    assert cost.weight_bytes == pytest.approx(sum(c.weight_bytes for c in steps))   # the weights are read each step
    assert (totals.steps, totals.tokens, totals.logit_rows, totals.time_ms) == (4, 8, 8, 8.0)


def test_phase_bound_follows_the_profile():
    totals = decode_totals(batch=1, first_context=128, steps=10, time_ms=50.0)
    cost = phase_cost(LLAMA_1B, 4, totals)
    assert cost.intensity < 1.0                       # batch-1 decode: about one FLOP per 2 bytes in fp32
    normal = phase_roofline(LLAMA_1B, "float32", totals, profile_with(bandwidth_gbs=50.0))
    assert normal.bound is Bound.MEMORY and normal.ridge == pytest.approx(1e12 / 50e9)
    assert normal.bytes_per_s == pytest.approx(cost.bytes / 0.05)
    assert normal.peak_share == normal.mbu == pytest.approx(cost.bytes / 0.05 / 50e9)
    # a profile with an absurd bandwidth puts the ridge below decode's intensity: compute-bound, judged by FLOP/s
    absurd = phase_roofline(LLAMA_1B, "float32", totals, profile_with(bandwidth_gbs=1e9))
    assert absurd.bound is Bound.COMPUTE and absurd.ridge < cost.intensity
    assert absurd.peak_share == absurd.mfu == pytest.approx(cost.flops / 0.05 / 1e12)
    assert absurd.intensity == normal.intensity == pytest.approx(cost.intensity)


def test_prefill_phase_is_compute_bound_on_a_datasheet_gpu():
    totals = PhaseTotals()
    totals.add_step(requests=1, tokens=2048, context_tokens=2048, duration_ms=20.0)
    h100 = find_profile("h100-sxm")
    r = phase_roofline(LLAMA_1B, "bfloat16", totals, h100)
    assert r.bound is Bound.COMPUTE and r.intensity > h100.ridge("bf16")
    assert r.peak_share == pytest.approx(phase_cost(LLAMA_1B, 2, totals).flops / 0.02 / h100.peak_flops("bf16"))


def test_phase_roofline_says_nothing_it_cannot_compute():
    device = profile_with(bandwidth_gbs=50.0)
    assert phase_roofline(LLAMA_1B, "float32", PhaseTotals(), device) is None             # no steps of the phase
    assert phase_roofline(LLAMA_1B, "float32", None, device) is None
    totals = decode_totals(batch=1, first_context=8, steps=2, time_ms=4.0)
    assert phase_roofline(LLAMA_1B, "bfloat16", totals, device) is None                  # no bf16 peak in it
    assert phase_roofline(LLAMA_1B, "float32", totals, None) is None                     # no profile at all


def test_phase_totals_round_trip_through_a_summary():
    totals = decode_totals(batch=3, first_context=20, steps=5, time_ms=12.5)
    summary = Summary.from_json({**totals.to_summary("decode"), "decode_time_ms": totals.time_ms})
    assert PhaseTotals.from_summary(summary, "decode") == totals
    assert PhaseTotals.from_summary(summary, "prefill") is None
    assert PhaseTotals.from_summary(summary.merged({"decode_steps": float("nan")}), "decode") is None
