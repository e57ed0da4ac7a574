"""The compute roof of each product: a CPU run's bfloat16 products on the bf16 peak, the rest on fp32."""
import dataclasses

import pytest

from backend.kernels.matmath import FP32, MatMath
from backend.precision import precision
from backend.run_info import RunInfo
from backend.roofline.cost import (
    CROSSOVER_CAP, Bound, PhaseTotals, crossover_batch, phase_cost, phase_roofline, predict, predict_decode,
    predict_prefill, step_cost, utilization,
)
from backend.roofline.profiles import find_profile
from backend.roofline.roofs import compute_key, compute_roofs, compute_seconds, math_from_info, runs_bf16
from backend.sim.step_time import CostModel
from tests.roofline.test_roofline import LLAMA_1B

CPU = find_profile("cpu")
BF16 = MatMath("AVX512-BF16", 16)
F32 = precision("float32")
Q4_1 = precision("q4_1")


def fp32_peak() -> float:
    return CPU.peak_flops("fp32")


def bf16_peak() -> float:
    return CPU.peak_flops("bf16")


def test_the_cpu_profile_has_two_different_roofs():
    assert bf16_peak() > fp32_peak() and CPU.bf16_unit == "AVX512-BF16"


def test_prefill_runs_its_layers_on_the_bf16_roof_and_its_one_logit_row_on_fp32():
    got = predict_prefill(LLAMA_1B, F32, 512, CPU, F32, BF16)
    cost = step_cost(LLAMA_1B, F32, [512], [512])
    # the layers multiply 512 rows (bf16); the LM head one row and attention its own kernel (fp32)
    want = cost.linear_flops / bf16_peak() + (cost.head_flops + cost.attention_flops) / fp32_peak()
    assert got.compute_s == pytest.approx(want)
    assert got.compute_s < predict_prefill(LLAMA_1B, F32, 512, CPU, F32).compute_s / 1.5


@pytest.mark.parametrize("batch", [1, 8, 15])
def test_decode_below_min_rows_stays_on_the_fp32_roof(batch):
    assert predict_decode(LLAMA_1B, F32, batch, 64, CPU, F32, BF16) == predict_decode(LLAMA_1B, F32, batch, 64, CPU, F32)


@pytest.mark.parametrize("batch", [16, 64, 512])
def test_decode_from_min_rows_on_runs_its_matmuls_on_the_bf16_roof(batch):
    cost = step_cost(LLAMA_1B, F32, [1] * batch, [64] * batch)
    want = (cost.linear_flops + cost.head_flops) / bf16_peak() + cost.attention_flops / fp32_peak()
    assert predict_decode(LLAMA_1B, F32, batch, 64, CPU, F32, BF16).compute_s == pytest.approx(want)


@pytest.mark.parametrize("math", [None, FP32])
@pytest.mark.parametrize("key", ["cpu", "h100-sxm"])
def test_no_bf16_math_prices_as_before(math, key):
    """No recorded math (an old run) and float32 math are the one-peak roofline on any profile."""
    profile = find_profile(key)
    for batch in (1, 32, 256):
        cost = step_cost(LLAMA_1B, F32, [1] * batch, [64] * batch)
        assert predict(cost, profile, F32, math).compute_s == cost.flops / profile.peak_flops(F32)
    assert crossover_batch(LLAMA_1B, F32, 64, profile, F32, math) == crossover_batch(LLAMA_1B, F32, 64, profile, F32)


def test_a_gpu_profile_ignores_a_cpus_bf16_units():
    h100 = find_profile("h100-sxm")
    assert predict_prefill(LLAMA_1B, F32, 512, h100, F32, BF16) == predict_prefill(LLAMA_1B, F32, 512, h100, F32)
    assert crossover_batch(LLAMA_1B, F32, 64, h100, F32, BF16) == crossover_batch(LLAMA_1B, F32, 64, h100, F32)


def test_bf16_math_applies_only_where_the_kernels_multiply_in_float32_on_a_cpu_profile_with_a_bf16_peak():
    assert runs_bf16(CPU, F32, BF16) and runs_bf16(CPU, Q4_1, BF16)
    assert not runs_bf16(CPU, precision("bfloat16"), BF16)          # torch's bfloat16 run: already the bf16 peak
    assert not runs_bf16(find_profile("h100-sxm"), F32, BF16)
    no_bf16 = dataclasses.replace(CPU, tflops={"fp32": 2.3})
    assert not runs_bf16(no_bf16, F32, BF16)
    assert predict_prefill(LLAMA_1B, F32, 512, no_bf16, F32, BF16).compute_s == \
        predict_prefill(LLAMA_1B, F32, 512, no_bf16, F32).compute_s
    assert compute_key(CPU, F32, BF16, 15) == "fp32" and compute_key(CPU, F32, BF16, 16) == "bf16"


def compute_from(profile, prec, math, context=64, up_to=400) -> int | None:
    """By brute force: the smallest batch from which every batch up to `up_to` is compute-bound."""
    bounds = [predict_decode(LLAMA_1B, prec, b, context, profile, prec, math).bound for b in range(1, up_to + 1)]
    first = None
    for b, bound in enumerate(bounds, start=1):
        if bound is Bound.COMPUTE and first is None:
            first = b
        elif bound is Bound.MEMORY:
            first = None
    return first


@pytest.mark.parametrize("prec", [F32, Q4_1, precision("q8_0")])
def test_the_crossover_uses_the_roof_of_the_unit_that_runs_at_that_batch(prec):
    plain = crossover_batch(LLAMA_1B, prec, 64, CPU, prec)
    bf16 = crossover_batch(LLAMA_1B, prec, 64, CPU, prec, BF16)
    assert bf16 == compute_from(CPU, prec, BF16) and plain == compute_from(CPU, prec, None)
    assert bf16 > plain    # the higher roof is reached at a larger batch
    assert bf16 >= BF16.min_rows


def test_a_compute_bound_batch_below_min_rows_is_memory_bound_again_on_the_bf16_roof():
    """Q4_1 reads few bytes a weight: at fp32 decode turns compute-bound below min_rows, then the bf16
    roof takes over at min_rows and the steps are memory-bound again until the bf16 crossover."""
    plain = crossover_batch(LLAMA_1B, Q4_1, 64, CPU, Q4_1)
    assert plain < BF16.min_rows
    assert predict_decode(LLAMA_1B, Q4_1, BF16.min_rows - 1, 64, CPU, Q4_1, BF16).bound is Bound.COMPUTE
    assert predict_decode(LLAMA_1B, Q4_1, BF16.min_rows, 64, CPU, Q4_1, BF16).bound is Bound.MEMORY
    assert crossover_batch(LLAMA_1B, Q4_1, 64, CPU, Q4_1, BF16) > BF16.min_rows
    # with a threshold above both crossovers the fp32 one stands; below both, the bf16 one
    assert crossover_batch(LLAMA_1B, Q4_1, 64, CPU, Q4_1, MatMath("AVX512-BF16", 200)) == plain
    early = MatMath("AVX512-BF16", 2)
    assert crossover_batch(LLAMA_1B, Q4_1, 64, CPU, Q4_1, early) == compute_from(CPU, Q4_1, early)
    assert crossover_batch(LLAMA_1B, Q4_1, 64, CPU, Q4_1, early) == \
        crossover_batch(LLAMA_1B, Q4_1, 64, CPU, Q4_1, MatMath("AVX512-BF16", 1))


def test_a_context_that_stays_memory_bound_has_no_crossover_on_either_roof():
    assert crossover_batch(LLAMA_1B, F32, 1 << 16, CPU, F32, BF16) == CROSSOVER_CAP


def test_mfu_and_the_phase_bound_are_judged_against_the_roof_that_ran():
    totals = PhaseTotals()
    totals.add_step(1, 512, 512, 40.0)   # one 512-token prefill in 40 ms
    plain = phase_roofline(LLAMA_1B, F32, totals, CPU)
    bf16 = phase_roofline(LLAMA_1B, F32, totals, CPU, BF16)
    assert bf16.flops_per_s == plain.flops_per_s
    assert bf16.mfu < plain.mfu and bf16.ridge > plain.ridge
    cost = phase_cost(LLAMA_1B, F32, totals)
    effective = cost.flops / compute_seconds(cost, CPU, F32, BF16)   # between the two peaks
    assert fp32_peak() < effective < bf16_peak()
    assert bf16.mfu == pytest.approx(cost.flops / 0.04 / effective)
    assert utilization(cost, 0.04, CPU, F32, BF16).mfu == pytest.approx(bf16.mfu)


def test_the_cost_model_prices_bf16_products_at_the_bf16_peak():
    model = CostModel(mfu=0.5, afu=0.25, mbu=0.6, step_ms=0.0, token_ms=0.0, request_ms=0.0)
    cost = step_cost(LLAMA_1B, F32, [512], [512])
    got = model.step_seconds(LLAMA_1B, F32, CPU, [512], [512], math=BF16)
    want = (cost.linear_flops / bf16_peak() + cost.head_flops / fp32_peak()) / 0.5 + \
        cost.attention_flops / (fp32_peak() * 0.25)
    assert got == pytest.approx(max(want, cost.bytes / (CPU.bandwidth_bytes_per_s * 0.6)))
    assert model.step_seconds(LLAMA_1B, F32, CPU, [512], [512]) > got


def test_the_run_math_comes_from_run_json_and_an_old_run_has_none():
    assert math_from_info(RunInfo.from_json({})) is None                       # a run from before the bfloat16 path
    assert math_from_info(RunInfo.from_json({"matmul": None})) is None         # torch's products
    assert math_from_info(RunInfo.from_json({"matmul": {"unit": "AMX", "min_rows": 16, "fp32_unit": "AVX-512 FMA"}})) == \
        MatMath("AMX", 16)
    assert math_from_info(RunInfo.from_json({"matmul": {"unit": "fp32", "min_rows": 0}})) == FP32
    for broken in ({"unit": "TPU", "min_rows": 16}, {"unit": "AMX", "min_rows": "16"}, {"unit": "AMX"}, "AMX"):
        assert math_from_info(RunInfo.from_json({"matmul": broken})) is None


def test_a_cpu_profile_has_two_labelled_roofs_and_a_gpu_profile_one():
    roofs = compute_roofs(CPU, F32, BF16)
    assert [(r.key, r.label, r.used) for r in roofs] == [("fp32", "fp32 FMA roof", True),
                                                         ("bf16", "bf16 roof (AVX512-BF16)", True)]
    assert [r.flops for r in roofs] == [fp32_peak(), bf16_peak()]
    assert [r.used for r in compute_roofs(CPU, F32, None)] == [True, False]   # a float32 run: under fp32 only
    amx = compute_roofs(CPU, F32, MatMath("AMX", 16))
    assert amx[1].label == "bf16 roof (AMX)"
    gpu = compute_roofs(find_profile("h100-sxm"), precision("bfloat16"), BF16)
    assert [(r.key, r.label) for r in gpu] == [("bf16", "bf16 roof")]
