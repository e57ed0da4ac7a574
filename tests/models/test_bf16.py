"""The bfloat16 products (backend/kernels/bf16.c): equal to torch's product of the same operands
rounded to bfloat16, on every weight format, and only where the rows are many enough."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from backend import kernels
from backend.kernels import matmath, ops
from backend.kernels.matmath import MatMath
from backend.models.packed import Panels, QuantPanels

ROOT = Path(__file__).resolve().parents[2]
lib = kernels.load()
UNIT, WHY = matmath.bf16_unit()
needs_unit = pytest.mark.skipif(UNIT is None, reason=f"no bfloat16 unit here: {WHY}")
FORMATS = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "f16", "bf16w"]


def rounded(t: torch.Tensor) -> torch.Tensor:
    return t.bfloat16().double()


def bound(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Float32 accumulation's rounding on products of bfloat16 operands: a few ulps of sum |x| |w|."""
    return 1e-6 * 8 * (rounded(x).abs() @ rounded(w).abs().T) + 1e-6


@pytest.fixture
def math():
    """The best unit for products of 16+ rows, float32 again afterwards."""
    chosen = MatMath(UNIT, 16)
    matmath.select(chosen)
    yield chosen
    matmath.select(matmath.FP32)


@needs_unit
@pytest.mark.parametrize("n", [16, 17, 40])
@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_multiplies_in_bfloat16_with_float32_sums(math, fmt, n):
    torch.manual_seed(n)
    w, x, bias = torch.randn(72, 256), torch.randn(n, 256), torch.randn(72)
    deq = ops.dequantize_rows(ops.quantize_rows(w, fmt), fmt, 256)
    got = ops.qlinear(x, QuantPanels.quantize(w, fmt).data, fmt, 72, bias)
    want = rounded(x) @ rounded(deq).T + bias.double()
    assert ((got.double() - want).abs() <= bound(x, deq)).all()
    # and it is not the float32 product: bfloat16 rounding moves the result by far more than float32's
    assert (got.double() - (x.double() @ deq.double().T + bias.double())).abs().max() > 1e-3


@needs_unit
@pytest.mark.parametrize("inp", [70, 576])
def test_float32_panels_with_any_width_and_an_in_place_residual(math, inp):
    torch.manual_seed(inp)
    w, x = torch.randn(100, inp), torch.randn(33, inp)
    y = torch.randn(33, 100)
    before = y.clone()
    out = ops.linear(x, Panels.pack(w, lib.psk_panel_width()).data, 100, residual=y)
    want = rounded(x) @ rounded(w).T + before.double()
    assert ((out.double() - want).abs() <= bound(x, w)).all()


@needs_unit
def test_fewer_rows_than_the_threshold_stay_float32_exactly(math):
    torch.manual_seed(1)
    w, x = torch.randn(64, 256), torch.randn(15, 256)
    packed = QuantPanels.quantize(w, "q8_0").data
    on = ops.qlinear(x, packed, "q8_0", 64)
    matmath.select(matmath.FP32)
    assert torch.equal(on, ops.qlinear(x, packed, "q8_0", 64))


@needs_unit
def test_a_matrix_of_row_segments_in_bfloat16(math):
    torch.manual_seed(2)
    a, b, x = torch.randn(48, 256), torch.randn(40, 256), torch.randn(20, 256)
    joined = QuantPanels.join([QuantPanels.quantize(a, "q5_0"), Panels.pack(b, lib.psk_panel_width())])
    got = ops.qlinear(x, joined.data, "segments", 88)
    deq = torch.cat([ops.dequantize_rows(ops.quantize_rows(a, "q5_0"), "q5_0", 256), b])
    assert ((got.double() - rounded(x) @ rounded(deq).T).abs() <= bound(x, deq)).all()


@pytest.mark.skipif(UNIT != "AMX", reason=f"AMX tiles are not usable here: {matmath.units_report().get('AMX')}")
def test_amx_tiles_give_the_bfloat16_product():
    """Only where the CPU has AMX and Linux granted the tiles (the bfloat16 tests above then run on them)."""
    granted, words = matmath.amx_permission()
    assert granted, words
    matmath.select(MatMath("AMX", 1))
    try:
        torch.manual_seed(4)
        w, x = torch.randn(96, 512), torch.randn(50, 512)
        got = ops.linear(x, Panels.pack(w, lib.psk_panel_width()).data, 96)
    finally:
        matmath.select(matmath.FP32)
    assert ((got.double() - rounded(x) @ rounded(w).T).abs() <= bound(x, w)).all()


@pytest.mark.skipif(lib is None or not lib.psk_math_compiled() & 4 or kernels.cpu_units().get("AMX")
                    or not sys.platform.startswith("linux"),
                    reason="needs an x86-64 Linux build with the AMX code on a CPU without AMX")
def test_a_unit_that_faults_kills_the_self_checks_child_not_this_process():
    """The self-check's product runs in a forked child: AMX instructions on a CPU without AMX raise
    SIGILL there, and the unit is refused with the reason while this process goes on."""
    x, panels, got = torch.randn(40, 80), torch.randn(3, 80, 32), torch.zeros(40, 70).share_memory_()
    why = matmath._in_child(lambda: matmath._product(lib, "AMX", x, panels, got))
    assert why == "a test product killed the process (SIGILL): not used"
    assert matmath._in_child(lambda: matmath._product(lib, "fp32", x, panels, got)) == ""
    assert got.abs().max() > 0   # the child's product reached the shared memory


def test_a_cpu_without_bfloat16_units_refuses_bf16_and_auto_stays_float32(monkeypatch):
    from backend.errors import InputError
    monkeypatch.setenv("PHASESCOPE_MATH_UNITS", "")
    matmath._units.cache_clear()
    try:
        assert matmath.resolve("auto") == matmath.FP32
        with pytest.raises(InputError, match="no bfloat16 unit runs here"):
            matmath.resolve("bf16")
        with pytest.raises(InputError, match="use one of auto, fp32, bf16"):
            matmath.resolve("fp16")
    finally:
        monkeypatch.delenv("PHASESCOPE_MATH_UNITS")
        matmath._units.cache_clear()


@needs_unit
def test_a_portable_build_still_reaches_the_bfloat16_unit(tmp_path):
    """The bfloat16 code is compiled with target attributes, so a build for plain x86-64 (the
    baseline users' machines share) still runs it where the CPU has the unit."""
    if os.uname().machine != "x86_64":
        pytest.skip("x86-64 only")
    script = ("import torch; from backend import kernels; from backend.kernels import matmath, ops\n"
              "from backend.models.packed import Panels\n"
              "unit, why = matmath.bf16_unit(); print(kernels.isa()[0], unit)\n"
              "matmath.select(matmath.MatMath(unit, 1)); torch.manual_seed(0)\n"
              "w, x = torch.randn(40, 96), torch.randn(20, 96)\n"
              "got = ops.linear(x, Panels.pack(w, 32).data, 40)\n"
              "print(float((got.double() - x.bfloat16().double() @ w.bfloat16().double().T).abs().max()))\n")
    # the user's cache folder: the portable build is kept by its sources and flags (test_quant's shares it)
    env = {**os.environ, "PHASESCOPE_KERNELS_ARCH": "-march=x86-64"}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    first, error = done.stdout.split("\n")[:2]
    assert first == f"portable C {UNIT}"
    assert float(error) < 1e-3


@needs_unit
def test_the_bundled_models_logits_stay_within_the_bound():
    from backend.loaders.weights import load_model
    from backend.models import fidelity
    from backend.models.packed import pack_weights
    loaded = load_model("smollm2-135m", "cpu", "float32")
    pack_weights(loaded.model)
    found = fidelity.compare(loaded.model, fidelity.english_tokens(loaded.tokenizer, 64), MatMath(UNIT, 16),
                             loaded.device)
    assert found.within, found.describe()
    assert 0 < found.kl_mean < fidelity.BOUND_KL   # bfloat16 changes something, a little
