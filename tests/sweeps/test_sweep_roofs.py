"""A sweep's predictions on the roof of the unit its products ran on (run.json's "matmul")."""

import pytest

from backend.config import ModelChoice, RunConfig, SweepSpec
from backend.events import ModelLoaded, SweepPoint
from backend.results.export import read_run
from backend.kernels import matmath
from backend.kernels.matmath import MatMath
from backend.models.shapes import SHAPES
from backend.precision import precision
from backend.roofline.cost import crossover_batch, predict, step_cost
from backend.roofline.profiles import find_profile
from backend.roofline.roofs import math_from_info
from backend.session import execute
from backend.sweeps.steps import sweep_summary

needs_bf16 = pytest.mark.skipif(matmath.bf16_unit()[0] is None,
                                reason=f"no bfloat16 unit here: {matmath.bf16_unit()[1]}")
F32 = precision("float32")


def config_of(tmp_path, spec: SweepSpec, prefill_math: str = "auto") -> RunConfig:
    return RunConfig(mode=f"sweep-{spec.kind}", model=ModelChoice("tiny", "cpu", "float32", prefill_math),
                     sweep=spec, profile="cpu", out_dir=str(tmp_path))


def sweep(tmp_path, spec: SweepSpec, prefill_math: str):
    events = []
    finished = execute(config_of(tmp_path, spec, prefill_math), events.append, lambda: False)
    return finished, [e for e in events if isinstance(e, SweepPoint)]


@needs_bf16
@pytest.mark.parametrize("prefill_math", ["bf16", "fp32"])
def test_a_prompt_sweep_prices_its_prefills_on_the_roof_of_the_unit_that_ran(tmp_path, prefill_math):
    """A 256-token prefill of `tiny` is compute-bound on the CPU profile's fp32 roof: the bf16 roof
    (twice as high) makes its predicted time shorter, and only where the run's products were bfloat16."""
    _, points = sweep(tmp_path, SweepSpec("prompt", lengths=[256], steps=1), prefill_math)
    math = math_from_info(read_run(tmp_path).info)
    assert math is not None and math.bf16 == (prefill_math == "bf16")
    cpu, cost = find_profile("cpu"), step_cost(SHAPES["tiny"], F32, [256], [256])
    assert points[0].predicted_ms == pytest.approx(predict(cost, cpu, F32, math).time_s * 1000)
    plain = predict(cost, cpu, F32).time_s * 1000
    if prefill_math == "bf16":
        assert points[0].predicted_ms < 0.9 * plain
    else:
        assert points[0].predicted_ms == pytest.approx(plain)


@pytest.mark.parametrize("math", [None, MatMath("fp32", 0), MatMath("AVX512-BF16", 16)])
def test_the_summarys_crossover_is_the_one_of_the_runs_math(tmp_path, math):
    """A run.json without "matmul" (math None) keeps the one-roof crossover; bf16 math moves it up."""
    shape = SHAPES["llama-8b"]
    loaded = ModelLoaded("llama-8b", "cpu", "cpu", "float32", "synthetic", True, shape.num_params(), 0, 0, shape)
    config = config_of(tmp_path, SweepSpec("batch", batches=[1, 2], context=512))
    cpu = find_profile("cpu")
    summary = sweep_summary(config, [], loaded, "", cpu, cpu, math)
    want = crossover_batch(shape, F32, 512, cpu, F32, math)
    assert summary.crossover.predicted == summary.crossover.predicted_local == want
    plain = crossover_batch(shape, F32, 512, cpu, F32)
    assert (want > plain) == (math is not None and math.bf16)
