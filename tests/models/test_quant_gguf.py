"""GGUF files as users download them: llama.cpp's own quantizer writes the bundled SmolLM2 as
F32 and then Q4_K_M, Q5_K_M, Q6_K (and Q3_K_S, F16, BF16), and the kernels run them as stored.

The blocks are real llama.cpp output (its quantizer's choices, every format of a K-quant mix of
a small model), not our quantizer's: our dequantizer gives the gguf package's values for them,
our K-quant quantizer writes the same bytes, the products equal float products on them, whole
files answer as the float32 model on the same weights does, and the fidelity of Q4_K_M (mean
KL from the F32 model over real text) is at least llama.cpp's own. Tolerances as in test_quant.py.
"""
from __future__ import annotations

import functools
import hashlib
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from backend.errors import InputError
from backend.kernels import cache_folder, ops
from backend.models.base import KVCache
from backend.precision import GGUF_FORMATS
from backend.workload.prompts import PROMPTS
from tests.models.test_quant import lib, needs_kernels, rounding_bound

LLAMA_MIXES = ("Q4_K_M", "Q5_K_M", "Q6_K")


@pytest.fixture(scope="session")
def llama_files():
    """The bundled SmolLM2-135M written by llama.cpp's quantizer (llama_model_quantize, default
    params, no importance matrix) as F32 -- from the bundled Q4_1, allow_requantize -- and then
    Q4_K_M, Q5_K_M and Q6_K from that F32 file, as bench/engine_vs_llamacpp.py writes them. As
    576 is not a multiple of 256 their mixes are mostly Q5_0 / Q5_1 / Q8_0 with ffn_down Q4_K /
    Q5_K / Q6_K: every format a user's K-quant file of a small model holds."""
    import ctypes
    lc = pytest.importorskip("llama_cpp")
    from backend.loaders.weights import bundled_gguf
    if bundled_gguf() is None or lib is None:
        pytest.skip("needs the bundled model and the C kernels")
    # Kept in the user's cache folder, keyed by llama.cpp's version and the bundled file's bytes: these
    # tests read what llama.cpp writes, they are not about writing it (a new version writes anew).
    digest = hashlib.sha256(f"{getattr(lc, '__version__', '?')} {LLAMA_MIXES}".encode())
    digest.update(bundled_gguf().read_bytes())
    folder = cache_folder() / "llama-cpp-quantized" / digest.hexdigest()[:16]
    files = {"F32": folder / "smollm2.F32.gguf", **{m: folder / f"smollm2.{m}.gguf" for m in LLAMA_MIXES}}
    if all(path.exists() for path in files.values()):
        return files
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:   # written aside, renamed: another worker may read
        written = {name: Path(tmp) / path.name for name, path in files.items()}
        for name, path in written.items():
            params = lc.llama_model_quantize_default_params()
            params.ftype = getattr(lc, "LLAMA_FTYPE_ALL_F32" if name == "F32" else f"LLAMA_FTYPE_MOSTLY_{name}")
            params.nthread, params.allow_requantize = torch.get_num_threads(), name == "F32"
            source = bundled_gguf() if name == "F32" else written["F32"]
            assert lc.llama_model_quantize(str(source).encode(), str(path).encode(), ctypes.byref(params)) == 0
        for name, path in written.items():
            path.replace(files[name])
    return files


@functools.lru_cache(maxsize=None)
def _gguf_tensors(path):
    """A file's tensors, read once per module: the reader parses every metadata field (the tokenizer's
    49,152 tokens and merges among them), about 2.5 s a file, and four tests read the same four files."""
    from gguf import GGUFReader
    return GGUFReader(path).tensors


def _raw(t) -> torch.Tensor:
    """A GGUF tensor's bytes as rows of blocks, uint8 (rows, row bytes)."""
    return torch.from_numpy(np.array(t.data).view(np.uint8).reshape(int(t.shape[1]), -1))


@needs_kernels
@pytest.mark.parametrize("mix", LLAMA_MIXES)
def test_llama_cpp_written_blocks_dequantize_to_the_gguf_references_values(llama_files, mix):
    """Every format in the file: every block of two tensors of each, and the first 32 rows of
    every tensor, read by our dequantizer (the values the products multiply by) and by the gguf
    package's reference dequantizer: bit for bit the same floats."""
    from gguf.quants import dequantize
    checked = {}
    for t in _gguf_tensors(llama_files[mix]):
        fmt = GGUF_FORMATS.get(t.tensor_type.name.lower())
        if fmt is None or len(t.shape) != 2:
            continue
        rows, inp = int(t.shape[1]), int(t.shape[0])
        whole = checked.get(fmt, 0) < 2
        checked[fmt] = checked.get(fmt, 0) + 1
        take = rows if whole else min(rows, 32)
        raw = _raw(t)[:take]
        ours = ops.dequantize_rows(raw, fmt, inp)
        theirs = np.asarray(dequantize(raw.numpy(), t.tensor_type), dtype=np.float32).reshape(take, inp)
        assert torch.equal(ours, torch.from_numpy(theirs)), (t.name, fmt)
    expected = {"Q4_K_M": {"q5_0", "q8_0", "q4_k", "q6_k"}, "Q5_K_M": {"q5_1", "q8_0", "q5_k", "q6_k"},
                "Q6_K": {"q8_0", "q6_k"}}[mix]
    assert set(checked) == expected


@needs_kernels
def test_our_k_quant_quantizers_write_the_bytes_llama_cpps_writes(llama_files):
    """--dtype q4_k / q5_k / q6_k quantize by the reference rules: on the same floats (the F32
    file's ffn_down), every super-block byte for byte as llama.cpp's quantizer wrote it."""
    floats = {t.name: t for t in _gguf_tensors(llama_files["F32"])}
    for mix, fmt in (("Q4_K_M", "q4_k"), ("Q5_K_M", "q5_k"), ("Q6_K", "q6_k")):
        written = [t for t in _gguf_tensors(llama_files[mix]) if t.tensor_type.name.lower() == fmt][:2]
        assert written
        for t in written:
            w = torch.from_numpy(np.array(floats[t.name].data)).reshape(int(t.shape[1]), int(t.shape[0]))
            assert torch.equal(ops.quantize_rows(w, fmt), _raw(t)), (mix, t.name)


@needs_kernels
@pytest.mark.parametrize("mix", LLAMA_MIXES)
def test_products_on_llama_cpp_written_blocks_equal_float_products(llama_files, mix):
    """The decode path (a few rows of x, weights widened in registers) and the prefill path (panel
    pairs dequantized, then float products) on the file's own blocks, odd row counts included,
    with bias and residual."""
    from gguf.quants import dequantize
    seen = set()
    torch.manual_seed(0)
    for t in _gguf_tensors(llama_files[mix]):
        fmt = GGUF_FORMATS.get(t.tensor_type.name.lower())
        if fmt is None or fmt in seen or len(t.shape) != 2 or t.name.startswith("token_embd"):
            continue
        seen.add(fmt)
        inp = int(t.shape[0])
        for out in (37, 16, int(t.shape[1])):
            raw = _raw(t)[:out]
            deq = torch.from_numpy(np.asarray(dequantize(raw.numpy(), t.tensor_type), dtype=np.float32).reshape(out, inp))
            packed = ops.quant_pack(raw, fmt, inp)
            for n in (1, 3, 8, 9, 40):
                x, bias, residual = torch.randn(n, inp), torch.randn(out), torch.randn(n, out)
                got = ops.qlinear(x, packed, fmt, out, bias, residual)
                want = x.double() @ deq.double().T + bias.double() + residual.double()
                assert ((got.double() - want).abs() <= rounding_bound(x, deq) + 1e-6 * residual.abs().double()).all(), \
                    (t.name, fmt, out, n)
    assert len(seen) >= 2


def _greedy(loaded, ids: list[int], steps: int) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy tokens and each step's logits, prefill then one token a step."""
    from backend.models import make_step_batch
    from backend.models.packed import pack_weights
    pack_weights(loaded.model)
    cache = KVCache(loaded.shape, 1, len(ids) + steps + 1, "cpu", torch.float32)
    tokens, logits = [], []
    with torch.inference_mode():
        out = loaded.model(make_step_batch([(0, 0, ids)], [], "cpu"), cache)[0]
        for i in range(steps):
            logits.append(out)
            tokens.append(int(out.argmax()))
            out = loaded.model(make_step_batch([], [(0, len(ids) + i, tokens[-1])], "cpu"), cache)[0]
    return tokens, logits


@needs_kernels
@pytest.mark.parametrize("mix", LLAMA_MIXES)
def test_k_quant_files_run_every_matrix_as_stored_and_answer_like_their_dequantized_floats(llama_files, mix):
    """--dtype auto on llama.cpp's Q4_K_M / Q5_K_M / Q6_K: no matrix falls back to float32 (fused
    q|k|v of Q5_0 and Q8_0 pieces run as row segments), the device line names the formats, and
    over 32 greedy steps of the Paris question the tokens are those of the float32 model holding
    the same dequantized weights -- or differ first where that model's top two logits are a near
    tie (float order decides it, not the weights).

    The answer itself is the weights': the first token is a near tie of "The", "L" and "La"
    (within 0.3 of a logit of 23-26), which each mix's rounding settles its own way. At Q5_K_M
    it is "L'Étoile: Paris, the City of Light, France."; at Q4_K_M "L'Étoile (The City of Light)
    is the capital of France." -- llama.cpp's own answer on that file too -- and at Q6_K
    "L'Étoile, la Marseur, ..." (llama.cpp, which also rounds the activations to int8, says
    Paris there). So Paris is asserted at Q5_K_M, and at the others that the float32 model on the
    same weights answers exactly as we do."""
    from backend.loaders.weights import load_model
    from backend.models.packed import kernels_in_use
    ours = load_model(str(llama_files[mix]), "cpu", "auto")
    how = ours.source.split(": ", 1)[1]
    assert "float32" not in how and "quantized" not in how and "as stored" in how, how
    if mix != "Q6_K":
        assert "q8_0 as stored" in how and ("q5_0+q8_0" in how or "q5_1+q8_0" in how)   # the mixed q|k|v
    expected = {"Q4_K_M": {"q5_0", "q8_0", "q4_k", "q6_k"}, "Q5_K_M": {"q5_1", "q8_0", "q5_k", "q6_k"},
                "Q6_K": {"q8_0", "q6_k"}}[mix]
    assert set(ours.precision.formats) == expected
    line = kernels_in_use(ours.device, ours.dtype, ours.precision)
    assert all(f in line for f in expected) and "float32 panels" not in line
    floats = load_model(str(llama_files[mix]), "cpu", "float32")
    ids = floats.tokenizer.apply_chat_template("What is the capital of France?")
    got, _ = _greedy(ours, ids, 32)
    want, logits = _greedy(floats, ids, 32)
    if mix == "Q5_K_M":
        assert "Paris" in floats.tokenizer.decode(got)
    if got != want:
        first = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
        top2 = logits[first].topk(2).values
        assert top2[0] - top2[1] < 1e-3 * logits[first].abs().max(), (first, got, want)


FIDELITY_TEXT = "\n\n".join(p for p in PROMPTS if len(p) > 200)   # the passages: summaries, translations, long-context asks


def _all_logits(loaded, ids: list[int]) -> torch.Tensor:
    """Next-token logits at every position of one prefill, (len(ids), vocab)."""
    from dataclasses import replace
    from backend.models import make_step_batch
    from backend.models.packed import pack_weights
    pack_weights(loaded.model)
    cache = KVCache(loaded.shape, 1, len(ids) + 1, "cpu", torch.float32)
    batch = replace(make_step_batch([(0, 0, ids)], [], "cpu"), logit_rows=torch.arange(len(ids)))
    with torch.inference_mode():
        return loaded.model(batch, cache).double()


def _mean_kl(reference: torch.Tensor, other: torch.Tensor) -> float:
    """Mean over positions of KL(reference || other) of the next-token distributions."""
    p = torch.log_softmax(reference.double(), -1)
    q = torch.log_softmax(other.double(), -1)
    return float((p.exp() * (p - q)).sum(-1).mean())


@needs_kernels
def test_q4_k_m_fidelity_is_at_least_llama_cpps_own(llama_files):
    """Mean KL divergence of the next-token distributions at Q4_K_M from the F32 model's, over a
    few hundred tokens of English (the workload prompts' longer passages): ours (the file run as
    stored, float32 activations) against our F32 model, llama.cpp's on the same file against its
    F32 model, on the same token ids. Ours must be no worse than 1.05x theirs."""
    lc = pytest.importorskip("llama_cpp")
    from backend.loaders.weights import load_model
    f32 = load_model(str(llama_files["F32"]), "cpu", "float32")
    ids = f32.tokenizer.encode(FIDELITY_TEXT)[:320]
    assert len(ids) >= 250
    reference = _all_logits(f32, ids)
    ours = _mean_kl(reference, _all_logits(load_model(str(llama_files["Q4_K_M"]), "cpu", "auto"), ids))

    def llama_logits(path):
        llm = lc.Llama(model_path=str(path), n_ctx=512, n_batch=512, n_threads=torch.get_num_threads(),
                       logits_all=True, verbose=False)
        llm.eval(ids)
        out = torch.from_numpy(np.array(llm.scores[:len(ids)], dtype=np.float64))
        llm.close()
        return out

    theirs = _mean_kl(llama_logits(llama_files["F32"]), llama_logits(llama_files["Q4_K_M"]))
    print(f"mean KL at Q4_K_M over {len(ids)} tokens: ours {ours:.5f}, llama.cpp {theirs:.5f}")
    assert 0 < ours <= 1.05 * theirs, (ours, theirs)


@needs_kernels
def test_formats_the_kernels_do_not_run_are_dequantized_and_said_so(llama_files, tmp_path):
    """llama.cpp's Q3_K_S: its ffn_down tensors are Q3_K, which the kernels do not run as stored:
    they become float32 panels, the description and the device line say so, and every other
    tensor (Q4_0, the Q8_0 head) stays as stored."""
    import ctypes
    lc = pytest.importorskip("llama_cpp")
    from backend.loaders.weights import load_model
    from backend.models.packed import kernels_in_use
    path = tmp_path / "smollm2.Q3_K_S.gguf"
    params = lc.llama_model_quantize_default_params()
    params.ftype, params.nthread = lc.LLAMA_FTYPE_MOSTLY_Q3_K_S, torch.get_num_threads()
    assert lc.llama_model_quantize(str(llama_files["F32"]).encode(), str(path).encode(), ctypes.byref(params)) == 0
    loaded = load_model(str(path), "cpu", "auto")
    how = loaded.source.split(": ", 1)[1]
    assert "30 matrices float32 (q3_k stored)" in how and "90 matrices q4_0 as stored" in how, how
    assert loaded.precision.name == "q4_0" and set(loaded.precision.formats) == {"q4_0", "q8_0", "float32"}
    assert "float32 panels" in kernels_in_use(loaded.device, loaded.dtype, loaded.precision)


@needs_kernels
def test_an_unknown_gguf_tensor_type_is_one_clear_line(tmp_path):
    import gguf
    from backend.loaders.gguf import gguf_checkpoint
    path = tmp_path / "odd.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = bytearray(path.read_bytes())
    at = data.index(b"token_embd.weight") + len(b"token_embd.weight") + 4 + 2 * 8   # past n_dims and 2 dims
    assert int.from_bytes(data[at:at + 4], "little") == 0                          # F32
    data[at:at + 4] = (250).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match="unknown GGUF type") as info:
        gguf_checkpoint(path)
    assert "\n" not in str(info.value)


@needs_kernels
@pytest.mark.parametrize("ftype, fmt", [("F16", "f16"), ("BF16", "bf16w")])
def test_f16_and_bf16_files_run_their_halves_as_stored(llama_files, tmp_path, ftype, fmt):
    """An F16 / BF16 GGUF at --dtype auto: every matrix in its 2-byte floats, widened in the
    kernels' registers (half the bytes of float32 a step), the tokens those of the float32 model."""
    import ctypes
    lc = pytest.importorskip("llama_cpp")
    from backend.loaders.weights import load_model
    path = tmp_path / f"smollm2.{ftype}.gguf"
    params = lc.llama_model_quantize_default_params()
    params.ftype, params.nthread = getattr(lc, f"LLAMA_FTYPE_MOSTLY_{ftype}"), torch.get_num_threads()
    assert lc.llama_model_quantize(str(llama_files["F32"]).encode(), str(path).encode(), ctypes.byref(params)) == 0
    halves = load_model(str(path), "cpu", "auto")
    how = halves.source.split(": ", 1)[1]
    assert how == f"121 matrices {fmt} as stored", how
    assert halves.precision.name == fmt and halves.precision.weight_bits == 16
    floats = load_model(str(path), "cpu", "float32")
    assert halves.weight_bytes < 0.51 * floats.weight_bytes
    ids = floats.tokenizer.apply_chat_template("What is the capital of France?")
    assert _greedy(halves, ids, 8)[0] == _greedy(floats, ids, 8)[0]
