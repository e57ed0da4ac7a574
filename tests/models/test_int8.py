"""The integer decode products (backend/kernels/qint8.c, --decode-math int8): equal to an exact
integer reference computed here from the same quantized activations, within float rounding of
the scale products, for every format they cover and for one and several rows; other formats
and more rows than MAX_ROWS keep the float32 products."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from backend import kernels
from backend.errors import InputError
from backend.kernels import decodemath, ops

lib = kernels.load()
pytestmark = pytest.mark.skipif(lib is None, reason=f"no C kernels: {kernels.reason()}")


def fields(blocks: torch.Tensor, fmt: str, inp: int):
    """GGUF blocks (rows, bytes) -> scale d, min m (0 without one), raw quants (rows, in) as ints, offset."""
    b = blocks.numpy().reshape(blocks.shape[0], inp // 32, -1)
    d = b[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float64)
    if fmt == "q8_0":
        return d, np.zeros_like(d), b[..., 2:34].view(np.int8).astype(np.int64).reshape(len(b), inp), 0
    has_min, q5 = fmt in ("q4_1", "q5_1"), fmt in ("q5_0", "q5_1")
    start = 2 + 2 * has_min + 4 * q5
    m = b[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float64) if has_min else np.zeros_like(d)
    nib = b[..., start:start + 16].astype(np.int64)
    q = np.concatenate([nib & 15, nib >> 4], axis=-1)
    if q5:   # bit k of the block's 32-bit qh is element k's fifth bit
        qh = b[..., start - 4:start].copy().view(np.uint32)[..., 0].astype(np.int64)
        q = q | ((qh[..., None] >> np.arange(32)) & 1) << 4
    return d, m, q.reshape(len(b), inp), {"q4_0": 8, "q5_0": 16}.get(fmt, 0)


def reference(x: torch.Tensor, blocks: torch.Tensor, fmt: str, inp: int):
    """y (n, out) in float64 from integer block dots, and the bound on float32 rounding."""
    xq, xd, xs = decodemath.quantize_acts(x)
    d, m, q, off = fields(blocks, fmt, inp)
    xq = xq.numpy().astype(np.int64).reshape(len(xq), inp // 32, 32)
    q = q.reshape(len(q), inp // 32, 32)
    isum = np.einsum("nbk,obk->nob", xq, q) - off * xs.numpy().astype(np.int64)[:, None, :]   # exact
    assert np.array_equal(xs.numpy(), xq.sum(-1))
    xd, xs = xd.numpy().astype(np.float64), xs.numpy().astype(np.float64)
    terms = d[None] * xd[:, None] * isum + m[None] * (xd * xs)[:, None]
    return terms.sum(-1), 1e-6 * 8 * np.abs(terms).sum(-1) + 1e-6


@pytest.fixture
def int8():
    decodemath.select("int8")
    yield
    decodemath.select("fp32")


@pytest.mark.parametrize("fmt", decodemath.FORMATS)
@pytest.mark.parametrize("n", [1, 3, 5, decodemath.MAX_ROWS])   # 5: a K+1 = 5 verification
def test_int8_products_equal_the_integer_reference(int8, fmt, n):
    g = torch.Generator().manual_seed(n)
    out, inp = 70, 256                          # 70 outputs: a partial last panel
    w = torch.randn(out, inp, generator=g)
    x = torch.randn(n, inp, generator=g) * torch.linspace(0.1, 4, inp)   # blocks of different scales
    blocks = ops.quantize_rows(w, fmt)
    packed = ops.quant_pack(blocks, fmt, inp)
    bias, residual = torch.randn(out, generator=g), torch.randn(n, out, generator=g)
    got = ops.qlinear(x, packed, fmt, out, bias, residual).double().numpy()
    want, tol = reference(x, blocks, fmt, inp)
    want += (bias.double()[None] + residual.double()).numpy()
    assert np.all(np.abs(got - want) <= tol + 1e-6 * np.abs(want)), float(np.abs(got - want).max())
    # and not the float32 product: the activations really were rounded
    with decodemath.using("fp32"):
        fp32 = ops.qlinear(x, packed, fmt, out, bias, residual).double().numpy()
    assert np.abs(fp32 - got).max() > 1e-5


@pytest.mark.parametrize("fmt", decodemath.K_FORMATS)
@pytest.mark.parametrize("n", [1, 3, decodemath.MAX_ROWS])
def test_k_quant_int8_products_equal_the_block_reference(int8, fmt, n):
    """The K-quants' integer products (qint8k.c) against float64 sums over blocks of 32 of the
    dequantized weights times the int8 activations, times the block's activation scale: what the
    integer sums compute exactly, up to the float32 rounding of the scale products."""
    if fmt not in decodemath.formats():
        pytest.skip(f"{fmt}: this build's products keep float32 (qint8k.c needs AVX2)")
    g = torch.Generator().manual_seed(n)
    out, inp = 70, 512                          # 70 outputs: a partial last panel; 2 super-blocks
    w = torch.randn(out, inp, generator=g)
    x = torch.randn(n, inp, generator=g) * torch.linspace(0.1, 4, inp)
    blocks = ops.quantize_rows(w, fmt)
    packed = ops.quant_pack(blocks, fmt, inp)
    bias, residual = torch.randn(out, generator=g), torch.randn(n, out, generator=g)
    got = ops.qlinear(x, packed, fmt, out, bias, residual).double().numpy()
    xq, xd, _ = decodemath.quantize_acts(x)
    wd = ops.dequantize_rows(blocks, fmt, inp).double().numpy().reshape(out, inp // 32, 32)
    xq = xq.numpy().astype(np.float64).reshape(n, inp // 32, 32)
    xd = xd.numpy().astype(np.float64)
    want = (np.einsum("nbk,obk->nob", xq, wd) * xd[:, None, :]).sum(-1)
    want += (bias.double()[None] + residual.double()).numpy()
    # the kernel's terms (scale x sum, min x sum) can each be ~3x a block's largest weight
    big = 3 * np.abs(wd).max(-1, keepdims=True)
    tol = 1e-6 * 8 * (np.einsum("nbk,obk->nob", np.abs(xq), np.broadcast_to(big, wd.shape)) * xd[:, None, :]).sum(-1)
    assert np.all(np.abs(got - want) <= tol + 1e-5), float(np.abs(got - want).max())
    with decodemath.using("fp32"):
        fp32 = ops.qlinear(x, packed, fmt, out, bias, residual).double().numpy()
    assert np.abs(fp32 - got).max() > 1e-5


def test_more_rows_and_other_formats_keep_float32(int8):
    g = torch.Generator().manual_seed(1)
    w, inp = torch.randn(40, 64, generator=g), 64
    others = [(f, n) for f, n in [("q4_k", 1), ("q6_k", 2)] if f not in decodemath.formats()]
    for fmt, n in [("q8_0", decodemath.MAX_ROWS + 1), ("q4_k", decodemath.MAX_ROWS + 1), *others]:
        inp = 256 if fmt in ("q4_k", "q6_k") else 64
        w = torch.randn(40, inp, generator=g)
        x = torch.randn(n, inp, generator=g)
        packed = ops.quant_pack(ops.quantize_rows(w, fmt), fmt, inp)
        got = ops.qlinear(x, packed, fmt, 40)
        with decodemath.using("fp32"):
            assert torch.equal(got, ops.qlinear(x, packed, fmt, 40))


def test_the_activations_round_to_the_nearest_of_127_steps():
    x = torch.tensor([[127.0, -63.4, 0.5, 1.49] + [0.0] * 28, [0.0] * 32])
    q, d, s = decodemath.quantize_acts(x)
    assert q[0, :4].tolist() == [127, -63, 0, 1] and float(d[0, 0]) == pytest.approx(1.0)
    assert int(s[0, 0]) == 127 - 63 + 1 and float(d[1, 0]) == 0.0 and not q[1].any()


def test_an_unknown_mode_is_one_line():
    with pytest.raises(InputError, match="--decode-math 'int4': use one of fp32, int8"):
        decodemath.check("int4")


def test_the_choice_carries_decode_math_to_the_kernels():
    from backend.kernels import matmath
    from backend.models import fidelity
    choice = fidelity.MathChoice("fp32", matmath.FP32, "float32 products, as asked")
    assert fidelity.with_decode(choice, "fp32") is choice
    int8 = fidelity.with_decode(choice, "int8")
    assert int8.math.decode == "int8" and "int8 activations" in int8.note
    assert int8.as_dict()["decode"] == "int8"
    with matmath.using(int8.math):
        assert decodemath.selected() == "int8"
    assert decodemath.selected() == "fp32"
    on_torch = fidelity.MathChoice("fp32", matmath.FP32, "torch", on_kernels=False)
    with pytest.raises(InputError, match="--decode-math int8 is the CPU kernels'"):
        fidelity.with_decode(on_torch, "int8")


def test_the_flag_reaches_the_run_config():
    from backend.cli.main import build_parser
    from backend.cli.flags import common_config
    from backend.config import RunKind
    args = build_parser().parse_args(["run", "--dtype", "q4_0", "--decode-math", "int8"])
    assert common_config(args, RunKind.BATCH).model.decode_math == "int8"
