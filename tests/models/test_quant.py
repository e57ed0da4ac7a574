"""Quantized weights: the GGUF block formats in the C kernels, int8 weight-only, and what a run records.

Tolerances: the quantized products dequantize in registers and multiply in float32, so against
a float64 product on the same dequantized weights they differ only by float32 rounding: for a
dot product of n terms, about n * 2^-24 * sum |w x| at worst (the bound used below, times 4 for
the order of additions). A whole model compounds that over 30 layers, so its logits are checked
against the float32 model on the same dequantized weights at 1e-3 of the logits' scale.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from backend import kernels
from backend.errors import InputError
from backend.run_info import RunInfo
from backend.kernels import ops
from backend.models.base import KVCache
from backend.shape import ModelShape
from backend.precision import BLOCK_FORMATS, GGUF_FORMATS, canonical, from_info, precision

ROOT = Path(__file__).resolve().parents[2]
lib = kernels.load()
needs_kernels = pytest.mark.skipif(lib is None, reason=f"C kernels not built here: {kernels.reason()}")
FORMATS = BLOCK_FORMATS
K_QUANTS = ("q4_k", "q5_k", "q6_k")
GGUF_QUANTIZES = tuple(f for f in FORMATS if f not in K_QUANTS)   # the formats the gguf package quantizes


def gguf_type(fmt):
    from gguf import GGMLQuantizationType
    return getattr(GGMLQuantizationType, {v: k for k, v in GGUF_FORMATS.items()}[fmt].upper())


def width(fmt, inp):
    """An input width for a format: inp, or as many super-blocks of 256 as inp has blocks of 32."""
    return inp * precision(fmt).block // 32


def rounding_bound(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """A float32 rounding bound for x @ w.T: 4 * n * 2^-24 * sum_k |x_k w_k| per output."""
    return 4 * x.shape[-1] * 2.0 ** -24 * (x.abs().double() @ w.abs().double().T) + 1e-30


@needs_kernels
@pytest.mark.parametrize("fmt", GGUF_QUANTIZES)
def test_quantizing_writes_the_same_bytes_as_the_gguf_reference_and_reads_back_the_same_values(fmt):
    from gguf.quants import dequantize, quantize
    torch.manual_seed(0)
    w = torch.randn(37, 96) * 0.05
    w[3, :32] = 0.0                                    # an all-zero block: scale 0, no division by it
    blocks = ops.quantize_rows(w, fmt)
    assert np.array_equal(blocks.numpy(), np.asarray(quantize(w.numpy(), gguf_type(fmt))).view(np.uint8).reshape(37, -1))
    ours = ops.dequantize_rows(blocks, fmt, 96)
    theirs = torch.from_numpy(np.asarray(dequantize(blocks.numpy(), gguf_type(fmt)), dtype=np.float32).reshape(37, 96))
    assert torch.equal(ours, theirs)
    tolerance = {"q8_0": 0.02, "f16": 0.004, "bf16w": 0.03, "q5_0": 0.15, "q5_1": 0.15}.get(fmt, 0.3)
    assert (ours - w).abs().max() < 0.05 * tolerance   # close to the floats it came from


@needs_kernels
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 9, 17])   # 5: a K+1 = 5 verification
@pytest.mark.parametrize("out, inp", [(16, 32), (37, 96), (960, 576)])
def test_quantized_products_equal_the_float_product_on_the_dequantized_weights(fmt, n, out, inp):
    torch.manual_seed(n)
    inp = width(fmt, inp)
    w = torch.randn(out, inp) * 0.05
    blocks = ops.quantize_rows(w, fmt)
    deq = ops.dequantize_rows(blocks, fmt, inp)
    packed = ops.quant_pack(blocks, fmt, inp)
    x = torch.randn(n, inp)
    bias, residual = torch.randn(out), torch.randn(n, out)
    got = ops.qlinear(x, packed, fmt, out, bias, residual)
    want = x.double() @ deq.double().T + bias.double() + residual.double()
    assert ((got.double() - want).abs() <= rounding_bound(x, deq) + 1e-6 * residual.abs().double()).all()


@needs_kernels
def test_packed_matrices_hold_the_formats_own_bytes():
    """Bytes counted right: a packed matrix is its GGUF blocks' bytes, scales included (the bits
    per weight are llama.cpp's: Q5_0 5.5, Q5_1 6, Q4_K 4.5, Q5_K 5.5, Q6_K 6.5625, F16 16)."""
    from backend.models.packed import QuantPanels
    w = torch.randn(960, 1536)
    bits = {"q8_0": 8.5, "q4_0": 4.5, "q4_1": 5.0, "q5_0": 5.5, "q5_1": 6.0, "q4_k": 4.5, "q5_k": 5.5,
            "q6_k": 6.5625, "f16": 16.0, "bf16w": 16.0}
    assert set(bits) == set(FORMATS)
    for fmt, b in bits.items():
        q = QuantPanels.quantize(w, fmt)
        assert q.data.numel() == 960 * 1536 * b / 8 == q.nbytes
        assert precision(fmt).matrix_bytes(960, 1536) == q.nbytes and precision(fmt).weight_bits == b
    # a K-quant on rows of 576 (not whole super-blocks) is priced as the format llama.cpp falls back to
    assert precision("q4_k").matrix_bytes(576, 576) == precision("q5_0").matrix_bytes(576, 576)
    assert precision("q6_k").matrix_bytes(576, 576) == precision("q8_0").matrix_bytes(576, 576)


@needs_kernels
@pytest.mark.parametrize("fmt", [*FORMATS, "mixed"])
def test_a_whole_quantized_decode_layer_matches_the_float_layer_on_the_dequantized_weights(fmt):
    """layer.c's decode step with quantized matrices against LlamaLayer.forward in float32 on
    float panels of the same dequantized values: logits and the KV cache."""
    from backend.models import build_model, make_step_batch
    from backend.models.packed import pack_weights
    shape = ModelShape("llama", vocab_size=96, hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2,
                       head_dim=64, intermediate_size=512, max_position=256)
    torch.manual_seed(1)
    quantized, plain = (build_model(shape).eval().requires_grad_(False) for _ in range(2))
    for p in quantized.parameters():
        p.normal_(0, 0.3)
    # "mixed": every matrix as row segments (q5_0, then 16 rows q8_0, then 16 float32), as a GGUF
    # mix fills a fused q|k|v: layer.c's products take the segments in one pass
    segments = (lambda w: [(w.shape[0] - 32, "q5_0"), (16, "q8_0"), (16, "float32")]) if fmt == "mixed" else \
        (lambda w: [(w.shape[0], fmt)])

    def dequantized(w):
        parts, start = [], 0
        for rows, f in segments(w):
            piece = w[start:start + rows]
            start += rows
            parts.append(piece if f == "float32" else ops.dequantize_rows(ops.quantize_rows(piece, f), f, w.shape[1]))
        return torch.cat(parts)

    with torch.no_grad():   # the float model holds exactly the values the quantized one multiplies by
        for name, p in quantized.named_parameters():
            plain.get_parameter(name).copy_(dequantized(p) if p.ndim == 2 and name != "embed" else p)
    assert pack_weights(quantized, lambda w: [(rows, f, None) for rows, f in segments(w)])
    if fmt == "mixed":
        assert quantized.layers[0].qkv.fmt == "segments" and len(quantized.layers[0].qkv.parts) == 3
    assert pack_weights(plain)
    prompts = {0: [5, 6, 7], 1: [9] * 11}

    def run(model):
        cache = KVCache(shape, 2, 64, "cpu", torch.float32)
        with torch.inference_mode():
            first = model(make_step_batch([(s, 0, p) for s, p in prompts.items()], [], "cpu"), cache)
            steps = [model(make_step_batch([], [(s, len(p) + i, 3 + i) for s, p in prompts.items()], "cpu"), cache)
                     for i in range(3)]
        return torch.cat([first, *steps]), cache

    (got, got_cache), (want, want_cache) = run(quantized), run(plain)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    for a, b in zip(got_cache.k + got_cache.v, want_cache.k + want_cache.v):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def bundled():
    from backend.loaders.weights import bundled_gguf
    if bundled_gguf() is None or lib is None:
        pytest.skip("needs the bundled model and the C kernels")
    from backend.loaders.weights import load_model
    return {dt: load_model("smollm2-135m", "cpu", dt) for dt in ("auto", "float32")}


def test_auto_on_the_bundled_gguf_keeps_its_q4_1_layers_and_q8_0_head_as_stored(bundled):
    auto = bundled["auto"]
    assert auto.precision.name == "q4_1" and auto.dtype == torch.float32
    assert "120 matrices q4_1 as stored" in auto.source and "1 matrix q8_0 as stored" in auto.source
    layers = 30 * (960 * 576 + 576 * 576 + 3072 * 576 + 576 * 1536)
    head = 49152 * 576
    matrices = layers // 32 * 20 + head // 32 * 34
    norms = (30 * 2 + 1) * 576 * 4
    assert auto.weight_bytes == matrices + norms                          # the file's own bytes, as read per step
    assert auto.precision.weight_bits == pytest.approx(8 * matrices / (layers + head))
    assert bundled["float32"].weight_bytes > 5 * auto.weight_bytes


def test_the_bundled_model_at_q4_1_logits_match_float32_on_the_same_weights(bundled):
    """The float32 model holds the same dequantized values: the logits agree to float rounding."""
    from backend.models import make_step_batch
    from backend.models.packed import pack_weights
    ids = bundled["float32"].tokenizer.encode("The capital of France is")
    out = {}
    for dt, m in bundled.items():
        pack_weights(m.model)
        cache = KVCache(m.shape, 1, 32, "cpu", m.dtype)
        with torch.inference_mode():
            prefill = m.model(make_step_batch([(0, 0, ids)], [], "cpu"), cache)
            decode = m.model(make_step_batch([], [(0, len(ids), int(prefill.argmax()))], "cpu"), cache)
        out[dt] = torch.cat([prefill, decode])
    scale = out["float32"].abs().max()
    assert (out["auto"] - out["float32"]).abs().max() < 1e-3 * scale
    assert bundled["float32"].tokenizer.decode([int(out["auto"][0].argmax())]).strip() == "Paris"


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "main.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


@needs_kernels
def test_the_bundled_model_at_q4_1_answers_the_paris_question():
    proc = cli("run", "--prompt", "What is the capital of France?", "--chat", "--output-len", "12", "--dtype", "q4_1")
    assert proc.returncode == 0, proc.stderr
    assert "Paris" in proc.stdout
    assert "q4_1 weights (5.74 bits), float32 activations" in proc.stdout


def test_unknown_and_unrunnable_precisions_are_one_clear_message():
    with pytest.raises(InputError, match="unknown dtype 'q3_k'.*q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, f16"):
        canonical("q3_k")
    from backend.loaders.quant import _check_widths
    odd = ModelShape("llama", vocab_size=96, hidden_size=48, num_layers=1, num_heads=4, num_kv_heads=2,
                     head_dim=12, intermediate_size=96, max_position=64)
    with pytest.raises(InputError, match="blocks of 32.*hidden size 48, attention width 48"):
        _check_widths("q4_1", odd)
    proc = cli("run", "--model", "tiny", "--dtype", "q8_0", "--output-len", "2", env={"PHASESCOPE_KERNELS": "0"})
    assert proc.returncode != 0 and "CPU kernels" in proc.stderr and "--dtype int8" in proc.stderr


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])   # bench/gpu_check.sh runs the CUDA case


@pytest.mark.parametrize("device", DEVICES)
def test_int8_weight_only_matches_its_dequantized_weights(device):
    from backend.models.packed import Int8Weight, linear
    torch.manual_seed(0)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    w = torch.randn(64, 96, device=device, dtype=dtype)
    q = Int8Weight.quantize(w)
    assert q.weight.dtype == torch.int8 and q.nbytes == 64 * 96 + 64 * dtype.itemsize
    deq = q.weight.float() * q.scales.float()[:, None]
    assert (deq - w.float()).abs().max() <= q.scales.float().max() / 2 + 1e-2 * (dtype != torch.float32)
    x = torch.randn(5, 96, device=device, dtype=dtype)
    tol = 1e-4 if dtype == torch.float32 else 5e-2
    torch.testing.assert_close(linear(x, q).float(), x.float() @ deq.T, atol=tol * 10, rtol=tol)


def test_int8_weight_only_runs_a_model_through_the_engine():
    proc = cli("run", "--model", "tiny", "--dtype", "int8", "--output-len", "3", "--prompt-len", "8")
    assert proc.returncode == 0, proc.stderr
    assert "int8 weights" in proc.stdout


def test_the_roofline_prices_each_precision_at_its_real_bytes():
    from backend.models import SHAPES
    from backend.roofline.cost import step_cost
    shape = SHAPES["smollm2-135m"]
    f32 = step_cost(shape, precision("float32"), [1], [128])
    assert f32.weight_bytes == step_cost(shape, 4, [1], [128]).weight_bytes   # a Precision and a count agree
    q8, q41 = (step_cost(shape, precision(n), [1], [128]) for n in ("q8_0", "q4_1"))
    floats = 4 * 576 * (2 * 30 + 1 + 1)            # the norms and the one gathered embedding row stay float32
    assert q8.weight_bytes == pytest.approx((f32.weight_bytes - floats) * 34 / 128 + floats, rel=1e-12)
    assert q41.weight_bytes == pytest.approx((f32.weight_bytes - floats) * 20 / 128 + floats, rel=1e-12)
    assert q8.kv_bytes == f32.kv_bytes and q8.flops == f32.flops       # only the weights' bytes change
    mixed = from_info(RunInfo(dtype="q4_1", weight_bits=5.7368, activation_dtype="float32"))
    assert mixed.weight_bytes == pytest.approx(5.7368 / 8)


X86 = os.uname().machine == "x86_64"
# Each x86-64 level users' CPUs have, built here in a child: (flags, the path the build must report).
# haswell is AVX2 without AVX-512 (most laptops and older servers); x86-64 is the plain-C baseline.
LEVELS = [("-march=haswell", "AVX2"), ("-march=x86-64", "portable C")] if X86 else [("-O2", None)]


@pytest.mark.parametrize("arch, path", LEVELS, ids=[a for a, _ in LEVELS])
def test_each_instruction_set_level_builds_and_computes_the_float_reference(tmp_path, arch, path):
    """Machines without AVX-512 run other paths of the same kernels: each built for its level, in a
    child, reports that path and gives every block format's product (and the float32 panels') to
    float32 rounding of the float64 product on the same dequantized weights."""
    if lib is None:
        pytest.skip(f"C kernels not built here: {kernels.reason()}")
    torch.manual_seed(3)
    w, x = torch.randn(48, 256), torch.randn(5, 256)
    np.save(tmp_path / "w.npy", w.numpy())
    np.save(tmp_path / "x.npy", x.numpy())
    script = (f"import numpy as np, torch; from backend import kernels; from backend.kernels import ops\n"
              f"from backend.models.packed import Panels, linear\n"
              f"print(kernels.isa()[0])\n"
              f"w = torch.from_numpy(np.load(r'{tmp_path}/w.npy')); x = torch.from_numpy(np.load(r'{tmp_path}/x.npy'))\n"
              f"for fmt in {FORMATS!r}:\n"
              f"    p = ops.quant_pack(ops.quantize_rows(w, fmt), fmt, 256)\n"
              f"    for n in (1, 2, 5):\n"   # 1 and 2 rows: the decode tiles; 5: the dequantized panels
              f"        np.save(r'{tmp_path}/' + fmt + str(n) + '.npy', ops.qlinear(x[:n], p, fmt, 48).numpy())\n"
              f"np.save(r'{tmp_path}/float32.npy', linear(x, Panels.pack(w, 32)).numpy())\n")
    # the user's cache folder: each arch's build is kept by its sources and flags (test_bf16's shares one)
    env = {**os.environ, "PHASESCOPE_KERNELS_ARCH": arch}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    if path is not None:
        assert done.stdout.split("\n")[0] == path
    for fmt, n in [*((f, n) for f in FORMATS for n in (1, 2, 5)), ("float32", "")]:
        deq = w if fmt == "float32" else ops.dequantize_rows(ops.quantize_rows(w, fmt), fmt, 256)
        built = torch.from_numpy(np.load(tmp_path / f"{fmt}{n}.npy"))
        rows = x[:n or None]
        reference = rows.double() @ deq.double().T
        assert ((built.double() - reference).abs() <= rounding_bound(rows, deq)).all(), (fmt, n)


@needs_kernels
def test_sweep_precision_writes_one_row_per_precision(tmp_path):
    out = tmp_path / "sweep"
    proc = cli("sweep", "precision", "--dtypes", "float32,q8_0,q4_1", "--prompt-len", "32", "--output-len", "3",
               "--steps", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    from backend.sweeps.points import read_points
    kind, points = read_points(out)
    assert kind == "precision"
    assert [p.dtype for p in points] == ["float32", "q8_0", "q4_1"]
    header = (out / "sweep.csv").read_text().splitlines()[0].split(",")
    for column in ("dtype", "weight_bytes", "ttft_ms", "tpot_ms", "prefill_tokens_per_s", "decode_tokens_per_s",
                   "predicted_ttft_ms", "predicted_tpot_ms"):
        assert column in header
    assert points[0].weight_bytes > points[1].weight_bytes > points[2].weight_bytes
    assert all(p.ttft_ms > 0 and p.tpot_ms > 0 and p.predicted_tpot_ms > 0 for p in points)
    # the prediction tracks the bytes: TPOT's predicted ratio is the weight bytes' (plus the small KV term)
    assert points[0].predicted_tpot_ms / points[1].predicted_tpot_ms > 3
    assert "q8_0: 3.76x fewer weight bytes" in proc.stdout


def test_k_quant_and_f16_dtypes_quantize_the_floats_and_fall_back_on_narrow_rows():
    """--dtype q4_k / q5_k / q6_k / f16 on floats: a matrix whose rows are whole super-blocks of
    256 in the K-quant, narrower ones in llama.cpp's fallback (Q5_0, Q5_1, Q8_0), the head at Q8_0
    (F16 at f16); the bits per weight and the description say what runs."""
    from backend.loaders.quant import apply, effective
    from backend.models import build_model
    shape = ModelShape("llama", vocab_size=96, hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2,
                       head_dim=64, intermediate_size=320, max_position=64)   # 320: down's rows fall back
    for fmt, fallback in (("q4_k", "q5_0"), ("q5_k", "q5_1"), ("q6_k", "q8_0"), ("f16", None)):
        torch.manual_seed(0)
        model = build_model(shape).eval().requires_grad_(False)
        how = apply(model, fmt, None)
        if fallback:
            narrow = {"q5_0": "2 matrices q5_0", "q5_1": "2 matrices q5_1", "q8_0": "3 matrices q8_0"}[fallback]
            assert f"6 matrices {fmt} quantized from random floats" in how and f"{narrow} quantized" in how, how
            assert fallback == "q8_0" or "1 matrix q8_0" in how   # the head
            assert model.layers[0].down.fmt == fallback and model.layers[0].qkv.fmt == fmt
        else:
            assert "9 matrices f16 quantized from random floats" in how, how   # the head too
        prec, _ = effective(model, fmt, torch.float32)
        assert prec.name == fmt and prec.formats[0] == fmt
    proc = cli("run", "--model", "tiny", "--dtype", "q6_k", "--output-len", "2", "--prompt-len", "8")
    assert proc.returncode == 0, proc.stderr
    # widths 64 and 128: every row fell back to Q8_0, and the device line names what runs, not what was asked
    assert "q8_0 weights (8.50 bits)" in proc.stdout and "(q8_0 weights dequantized" in proc.stdout


def test_int8_is_refused_on_cuda_in_one_line_and_not_offered_there():
    """No GPU needed: the refusal is the validation's, before any weight is read."""
    from backend.loaders.device import available_precisions
    from backend.loaders.quant import choose
    from backend.precision import int8_refusal
    with pytest.raises(InputError) as refused:
        choose("int8", torch.device("cuda"), None)
    message = str(refused.value)
    assert "\n" not in message and "int8" in message and "slower than bfloat16" in message
    assert "--dtype bfloat16" in message
    assert choose("int8", torch.device("cpu"), None) == "int8"   # the CPU still runs it
    assert int8_refusal("cuda") == message and int8_refusal("cpu") is None and int8_refusal("mps") is None
    assert "int8" in available_precisions(torch.device("cpu"))
    with pytest.raises(InputError, match="on CUDA use --dtype bfloat16 or float16"):   # nor int8 for a block format
        choose("q4_1", torch.device("cuda"), None)


def test_the_window_does_not_offer_int8_on_cuda(monkeypatch):
    """available_precisions feeds the window's dtype list; on CUDA it holds the floats only."""
    import backend.loaders.device as device_module
    from backend.loaders.device import available_precisions
    monkeypatch.setattr(device_module, "available_dtypes", lambda device: ["float32", "float16", "bfloat16"])
    assert available_precisions(torch.device("cuda")) == ["float32", "float16", "bfloat16"]
