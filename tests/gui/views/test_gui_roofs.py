"""The throughput view's compute roofs: a CPU profile's fp32 FMA and bf16 roofs, a GPU's one, and the
prediction following the unit the run's products ran on (run.json's "matmul")."""
import numpy as np
import pytest

from backend.kernels.matmath import MatMath
from backend.models.shapes import SHAPES
from backend.roofline.cost import crossover_batch, predict_decode, predict_prefill, step_cost
from backend.run_info import RunInfo
from backend.roofline.profiles import find_profile
from gui.state.run_store import RunStore
from gui.views.throughput import ThroughputView

BF16 = {"unit": "AVX512-BF16", "min_rows": 16, "fp32_unit": "AVX-512 FMA", "mode": "bf16", "note": "",
        "fidelity": None}


def view_of(qtbot, profile: str, info: dict | None = None, kind: str = "batch") -> ThroughputView:
    store = RunStore()
    store.info = RunInfo.from_json(info or {})   # run.json's entries
    view = ThroughputView(store)
    qtbot.addWidget(view)
    view.set_kind(kind)
    view.set_inputs(shape=SHAPES["llama-8b"], run_dtype="float32", profile=find_profile(profile), context=512)
    view.refresh()
    return view


def shown_roofs(view) -> list[str]:
    return [label.textItem.toPlainText() for curve, label in zip(view.roof_curves, view.roof_labels)
            if curve.yData is not None and len(curve.yData) and label.isVisible()]


def test_a_cpu_profile_shows_its_two_roofs_and_a_gpu_profile_one(qtbot):
    cpu = view_of(qtbot, "cpu", {"matmul": BF16})
    assert shown_roofs(cpu) == ["fp32 FMA roof: below 16 rows, attention", "bf16 roof (AVX512-BF16): 16+ rows"]
    old = view_of(qtbot, "cpu")   # a float32 run: the bf16 roof drawn, said to be unused
    assert shown_roofs(old) == ["fp32 FMA roof", "bf16 roof (AVX512-BF16): unused (float32 products)"]
    gpu = view_of(qtbot, "h100-sxm")
    assert shown_roofs(gpu) == ["fp32 roof"]
    assert gpu.roof_curves[1].yData is None or len(gpu.roof_curves[1].yData) == 0


def test_each_roof_is_the_tokens_per_second_its_peak_alone_allows(qtbot):
    view = view_of(qtbot, "cpu", {"matmul": BF16})
    profile, shape = find_profile("cpu"), SHAPES["llama-8b"]
    for roof, curve in zip(view.roofs, view.roof_curves):
        b = int(round(2 ** curve.xData[4]))
        flops = step_cost(shape, 4, [1] * b, [512] * b).flops
        assert curve.yData[4] == pytest.approx(b * profile.peak_flops(roof.key) / flops)
    assert view.roof_curves[1].yData[4] == pytest.approx(2 * view.roof_curves[0].yData[4])   # 4.6 against 2.3


def test_the_prediction_follows_the_unit_that_ran(qtbot):
    profile, shape = find_profile("cpu"), SHAPES["llama-8b"]
    math = MatMath("AVX512-BF16", 16)
    bf16, old = view_of(qtbot, "cpu", {"matmul": BF16}), view_of(qtbot, "cpu")
    xs = np.round(2 ** bf16.predicted.xData).astype(int)
    want = [b / predict_decode(shape, 4, int(b), 512, profile, "float32", math).time_s for b in xs]
    assert bf16.predicted.yData == pytest.approx(want)
    small, large = xs < 16, xs >= 256
    assert bf16.predicted.yData[small] == pytest.approx(old.predicted.yData[small])   # fp32 below min_rows
    assert np.all(bf16.predicted.yData[large] > 1.5 * old.predicted.yData[large])      # the bf16 roof above
    assert bf16.crossover == crossover_batch(shape, 4, 512, profile, "float32", math) > old.crossover
    assert "16+ rows on the bf16 roof (AVX512-BF16)" in bf16.note.text() and "bf16 roof" not in old.note.text()
    prompt = view_of(qtbot, "cpu", {"matmul": BF16}, kind="prompt")
    n = int(round(2 ** prompt.predicted.xData[-1]))
    assert prompt.predicted.yData[-1] == pytest.approx(n / predict_prefill(shape, 4, n, profile, "float32",
                                                                           math).time_s)


def test_a_run_without_matmul_predicts_as_before(qtbot):
    """An old run folder, and a float32 run, draw exactly the one-roof prediction."""
    profile, shape = find_profile("cpu"), SHAPES["llama-8b"]
    fp32 = {**BF16, "unit": "fp32", "min_rows": 0}
    for info in ({}, {"matmul": None}, {"matmul": fp32}):
        view = view_of(qtbot, "cpu", info)
        xs = np.round(2 ** view.predicted.xData).astype(int)
        assert view.predicted.yData.tolist() == \
            [b / predict_decode(shape, 4, int(b), 512, profile, "float32").time_s for b in xs]
        assert view.crossover == crossover_batch(shape, 4, 512, profile, "float32")


def test_a_torch_bfloat16_run_on_a_cpu_profile_runs_under_the_bf16_roof_alone(qtbot):
    view = view_of(qtbot, "cpu")
    view.set_inputs(run_dtype="bfloat16")
    view.refresh()
    assert shown_roofs(view) == ["fp32 FMA roof: unused (bfloat16 products)", "bf16 roof (AVX512-BF16)"]
