"""The C kernels (backend/kernels): built here, and equal to torch's results on every shape they take."""
from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from backend import kernels
from backend.models.attention import AttentionPlan, attend
from backend.models.base import KVCache
from tests.fakes.paged import dense, scramble
from backend.shape import ModelShape
from backend.models.packed import Panels, linear

lib = kernels.load()
needs_kernels = pytest.mark.skipif(lib is None, reason=f"C kernels not built here: {kernels.reason()}")


def test_the_kernels_build_on_this_machine():
    """CI machines have a C compiler: a failed build here is a bug, not a fallback."""
    assert lib is not None, kernels.reason()
    assert kernels.reason() == ""
    assert lib.psk_panel_width() == 32


@needs_kernels
def test_a_build_is_cached_by_its_sources_and_flags(tmp_path, monkeypatch):
    # -O0: the caching, the flags file and the atomic rename are what is checked here, not the code
    # the optimizer makes (the -O3 build every other test loads is kept in the user's cache folder)
    monkeypatch.setattr(kernels, "FLAGS", ["-O0" if f == "-O3" else f for f in kernels.FLAGS])
    first = kernels.build(tmp_path)
    stamp = first.stat().st_mtime_ns
    assert kernels.build(tmp_path) == first and first.stat().st_mtime_ns == stamp   # not rebuilt
    # no temporary left: the build and the architecture flags it took (doctor's "built with")
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name, first.name + ".flags"]
    assert (tmp_path / (first.name + ".flags")).read_text() in {" ".join(a) for a in kernels._arches()}


def test_a_missing_compiler_is_one_clear_message(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "no-such-compiler-here")
    with pytest.raises(RuntimeError, match="no C compiler found.*set CC"):
        kernels.build(tmp_path)


@needs_kernels
@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 9, 33, 130])
@pytest.mark.parametrize("out, inp", [(1000, 333), (32, 64), (1, 5), (70, 1)])
@pytest.mark.parametrize("bias", [False, True])
def test_panel_linear_matches_torch(n, out, inp, bias):
    gen = torch.Generator().manual_seed(n * 7 + out)
    w = torch.randn(out, inp, generator=gen)
    b = torch.randn(out, generator=gen) if bias else None
    x = torch.randn(n, inp, generator=gen)
    got = linear(x, Panels.pack(w, lib.psk_panel_width()), b)
    torch.testing.assert_close(got, F.linear(x, w, b), atol=1e-4, rtol=1e-4)


@needs_kernels
@pytest.mark.parametrize("n", [1, 9])
def test_panel_linear_adds_the_residual_after_the_bias(n):
    w, b = torch.randn(70, 48), torch.randn(70)
    x, residual = torch.randn(n, 48), torch.randn(n, 70)
    got = linear(x, Panels.pack(w, 32), b, residual=residual)
    torch.testing.assert_close(got, F.linear(x, w, b) + residual, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(linear(x, w, b, residual=residual), got, atol=1e-4, rtol=1e-4)   # the torch path agrees


@needs_kernels
@pytest.mark.parametrize("rows", [1, 7, 300])   # 300 x 576 rows run on the pool's threads
def test_rms_norm_and_swiglu_match_torch(rows):
    from backend.kernels import ops
    gen = torch.Generator().manual_seed(rows)
    x, weight = torch.randn(rows, 576, generator=gen) * 3, torch.randn(576, generator=gen)
    torch.testing.assert_close(ops.rms_norm(x, weight, 1e-5), F.rms_norm(x, (576,), weight, 1e-5), atol=1e-5, rtol=1e-5)
    gate_up = torch.randn(rows, 2 * 1003, generator=gen) * 8   # large gates: exp saturates both ways
    gate_up[0, :4] = torch.tensor([-200.0, 200.0, 0.0, -1e-30])
    gate, up = gate_up.chunk(2, dim=-1)
    torch.testing.assert_close(ops.silu_mul(gate_up), F.silu(gate) * up, atol=1e-5, rtol=1e-5)


@needs_kernels
def test_the_read_probe_reads_every_element():
    from backend.kernels import ops
    x = torch.arange(1_000_003, dtype=torch.float32) % 3   # odd length: the tail after the vectors counts
    assert ops.read(x) == pytest.approx(float(x.double().sum()), rel=1e-6)


@needs_kernels
def test_panel_linear_takes_batched_strided_and_empty_inputs():
    w = torch.randn(96, 40)
    panels = Panels.pack(w, 32)
    x = torch.randn(3, 5, 80)[..., ::2]   # (3, 5, 40), not contiguous
    torch.testing.assert_close(linear(x, panels), F.linear(x, w), atol=1e-4, rtol=1e-4)
    assert linear(torch.empty(0, 40), panels).shape == (0, 96)
    assert panels.shape == (96, 40) and panels.data.shape == (3, 40, 32)


@needs_kernels
def test_the_kernels_follow_torchs_thread_count():
    before = torch.get_num_threads()
    w, x = torch.randn(200, 64), torch.randn(4, 64)
    try:
        for threads in (1, 3, 2):
            torch.set_num_threads(threads)
            torch.testing.assert_close(linear(x, Panels.pack(w, 32)), F.linear(x, w), atol=1e-4, rtol=1e-4)
            assert lib.psk_threads() == threads
    finally:
        torch.set_num_threads(before)


def _ints(values):
    import ctypes
    return (ctypes.c_int * max(1, len(values)))(*values)


@needs_kernels
def test_a_woken_worker_picks_a_core_no_other_part_holds():
    def pick(allowed, used):
        return lib.psk_pool_pick_cpu(_ints(allowed), len(allowed), _ints(used), len(used))
    assert pick([0, 1], [0]) == 1
    assert pick([2, 3, 5], [2, 3]) == 5
    assert pick([0, 1], [1, 0]) == -1        # more threads than cores: it stays where it is
    assert pick([4], []) == 4


def _pool_counts() -> tuple[int, int]:
    """(worker starts on a core another part held, moves off it) since the pool started."""
    import ctypes
    out = (ctypes.c_int64 * 4)()
    lib.psk_pool_stats(out)
    return out[1], out[2]


@needs_kernels
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two cores and Linux's thread affinity")
def test_a_worker_woken_on_its_callers_core_moves_to_a_free_one():
    """The pool's worker started on the caller's core waits for it (both spin) and runs the product at one
    core's speed while another idles: it moves itself off, where its allowed cores leave it somewhere to go."""
    import threading
    import time
    cores = sorted(os.sched_getaffinity(0))
    threads, main = torch.get_num_threads(), threading.get_native_id()
    w, x = torch.randn(256, 64), torch.randn(32, 64)
    panels = Panels.pack(w, 32)
    try:
        os.sched_setaffinity(0, {cores[0]})   # this thread, and the worker it starts now, on one core
        torch.set_num_threads(1)
        linear(x, panels)
        torch.set_num_threads(2)
        shared, moves = _pool_counts()
        for _ in range(20):
            torch.testing.assert_close(linear(x, panels), F.linear(x, w), atol=1e-4, rtol=1e-4)
        now_shared, now_moves = _pool_counts()
        assert now_shared > shared and now_moves == moves   # found on the caller's core, and nowhere else to go
        for task in os.listdir("/proc/self/task"):      # the worker may go to a second core now; the caller may not
            if int(task) != main:
                os.sched_setaffinity(int(task), set(cores[:2]))
        for _ in range(50):
            time.sleep(0.001)                           # the worker sleeps between products: each call wakes it
            linear(x, panels)
        last_shared, last_moves = _pool_counts()
        assert last_moves - now_moves == last_shared - now_shared   # each time it woke on the caller's core, it left
    finally:
        for task in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(task), set(cores))
            except OSError:
                pass   # a thread that ended meanwhile
        torch.set_num_threads(1)
        linear(x, panels)   # the pool restarted: its next worker takes this thread's cores again
        torch.set_num_threads(threads)


def _product_in_child(queue) -> None:
    # numpy for the reference: torch's own OpenMP pool hangs in a forked child (a libgomp limit)
    import numpy as np
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((300, 64), dtype=np.float32), rng.standard_normal((2, 64), dtype=np.float32)
    got = linear(torch.from_numpy(x), Panels.pack(torch.from_numpy(w), 32)).numpy()
    queue.put(bool(np.allclose(got, x @ w.T, atol=1e-4)))


@needs_kernels
@pytest.mark.skipif(sys.platform != "linux", reason="fork")
def test_a_forked_child_runs_the_kernels_alone():
    """The pool's workers do not survive a fork; the child must not wait for them."""
    linear(torch.randn(1, 64), Panels.pack(torch.randn(64, 64), 32))   # the parent's pool is up
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_product_in_child, args=(queue,))
    child.start()
    child.join(60)
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0 and queue.get(timeout=5) is True


def test_without_a_compiler_a_run_says_so_and_runs_on_torchs_kernels(tmp_path):
    env = dict(os.environ, CC="no-such-compiler-here", XDG_CACHE_HOME=str(tmp_path))   # nothing cached either
    done = subprocess.run([sys.executable, "main.py", "run", "--model", "tiny", "--prompt-len", "8", "--output-len", "3"],
                          capture_output=True, text=True, env=env, timeout=120, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    assert "kernels: torch + oneDNN (phasescope C kernels unavailable: no C compiler found" in done.stdout
    assert "Traceback" not in done.stderr


def test_models_run_on_torchs_kernels_when_these_are_turned_off():
    code = ("from backend import kernels; from backend.loaders.weights import load_model; from backend.engine.runner import Runner; "
            "from backend.config import SamplingConfig; "
            "m = load_model('tiny', 'cpu', 'float32'); Runner(m, 1, 16, SamplingConfig()); "
            "print(kernels.load(), kernels.reason(), m.model.layers[0].qkv.is_mkldnn)")
    env = dict(os.environ, PHASESCOPE_KERNELS="0")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "turned", "off", "(PHASESCOPE_KERNELS=0)", "True"]


def _reference_decode(q, k, v, cache_k, cache_v, slots, positions):
    """Each decode row on its own with SDPA: write its key and value, attend to keys 0..pos."""
    heads, kv = q.shape[1], k.shape[1]
    outs = []
    for i, (s, p) in enumerate(zip(slots.tolist(), positions.tolist())):
        cache_k[s, :, p] = k[i]
        cache_v[s, :, p] = v[i]
        qs = q[i].view(kv, heads // kv, -1)   # (kv, group, hd): query head h * group + g uses kv head h
        o = F.scaled_dot_product_attention(qs, cache_k[s, :, :p + 1], cache_v[s, :, :p + 1])  # (kv, group, hd)
        outs.append(o.reshape(-1))
    return torch.stack(outs)


@needs_kernels
@pytest.mark.parametrize("heads, kv, hd", [(6, 2, 8), (4, 4, 64), (8, 1, 128), (3, 3, 6), (2, 1, 40)])
@pytest.mark.parametrize("table", ["identity", "scrambled"])
def test_decode_attention_matches_sdpa_row_by_row(heads, kv, hd, table):
    """Head dims: the kernel's constant paths (64, 128), any multiple of 8, and any other; the slot
    layout's identity table and a scrambled one (rows own permuted, non-contiguous blocks)."""
    slots_n, max_len = 5, 300
    shape = ModelShape("llama", 64, heads * hd, 1, heads, kv, hd, 64, 512)
    gen = torch.Generator().manual_seed(heads * 10 + kv + hd)
    cache = KVCache(shape, slots_n, max_len, "cpu", torch.float32)
    if table == "scrambled":
        scramble(cache, seed=hd)
    cache.k[0].normal_(generator=gen)
    cache.v[0].normal_(generator=gen)
    expected_k, expected_v = dense(cache.k[0], cache), dense(cache.v[0], cache)   # (slots, kv, max_len, hd)
    slots = torch.tensor([3, 0, 4, 1])
    positions = torch.tensor([0, 63, 64, 299])   # one key, a block, a block and one, many blocks
    q = torch.randn(4, heads, hd, generator=gen) * 32 / hd ** 0.5   # large scores: the online softmax must rescale
    k = torch.randn(4, kv, hd, generator=gen)
    v = torch.randn(4, kv, hd, generator=gen)
    expected = _reference_decode(q, k, v, expected_k, expected_v, slots, positions)
    plan = AttentionPlan([], 0, slots, positions, cache.block_table, -1, None, decode_kernel=True)
    got = attend(q, k, v, plan, cache.k[0], cache.v[0])
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(dense(cache.k[0], cache), expected_k)   # the new keys and values were written,
    torch.testing.assert_close(dense(cache.v[0], cache), expected_v)   # in their blocks, nothing else


@needs_kernels
def test_decode_attention_rotates_q_and_k_itself_when_given_the_tables():
    from backend.models.llama import apply_rotary
    hd, heads, kv = 8, 4, 2
    shape = ModelShape("llama", 64, heads * hd, 1, heads, kv, hd, 64, 512)
    gen = torch.Generator().manual_seed(5)
    caches = [KVCache(shape, 3, 40, "cpu", torch.float32) for _ in range(2)]
    for c in caches:
        c.k[0].copy_(torch.randn(c.k[0].shape, generator=gen))
        c.v[0].copy_(torch.randn(c.v[0].shape, generator=gen))
    caches[1].k[0].copy_(caches[0].k[0])
    caches[1].v[0].copy_(caches[0].v[0])
    slots, positions = torch.tensor([2, 0]), torch.tensor([7, 39])
    angles = torch.randn(2, 1, hd // 2, generator=gen).repeat(1, 1, 2)   # (D, 1, hd): halves share angles
    cos, sin = angles.cos(), angles.sin()
    qk = torch.randn(2, heads + kv, hd, generator=gen)
    v = torch.randn(2, kv, hd, generator=gen)
    plan = AttentionPlan([], 0, slots, positions, caches[0].block_table, -1, None, decode_kernel=True)
    assert plan.rotates_in_kernel
    rotated = apply_rotary(qk, cos, sin)
    expected = attend(rotated[:, :heads], rotated[:, heads:], v, plan, caches[0].k[0], caches[0].v[0])
    got = attend(qk[:, :heads], qk[:, heads:], v, plan, caches[1].k[0], caches[1].v[0], rotary=(cos, sin))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(caches[1].k[0], caches[0].k[0], atol=1e-6, rtol=1e-6)   # keys cached rotated


@needs_kernels
@pytest.mark.parametrize("bias", [False, True])
def test_the_whole_decode_layer_in_c_matches_the_layer_kernel_by_kernel(bias, monkeypatch):
    """LlamaModel's decode-only fast path (layer.c) against LlamaLayer.forward on the same packed
    weights: the same logits and the same cache, over steps with several slots at different lengths."""

    from backend.models import build_model, llama, make_step_batch
    from backend.models.packed import pack_weights
    shape = ModelShape("llama", vocab_size=96, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                       head_dim=16, intermediate_size=96, max_position=256, attention_bias=bias)
    torch.manual_seed(1)
    model = build_model(shape).eval().requires_grad_(False)
    for p in model.parameters():
        p.normal_(0, 0.3)
    assert pack_weights(model)
    prompts = {0: [5, 6, 7], 1: [9] * 11, 2: list(range(1, 30))}
    from backend.kernels import ops
    calls = []
    monkeypatch.setattr(ops, "llama_decode_layers", lambda *a, _f=ops.llama_decode_layers: calls.append(1) or _f(*a))

    def decode(fused: bool):
        monkeypatch.setattr(llama, "Panels", Panels if fused else type("NotPanels", (), {}))
        cache = KVCache(shape, 3, 64, "cpu", torch.float32)
        with torch.inference_mode():
            model(make_step_batch([(s, 0, p) for s, p in prompts.items()], [], "cpu"), cache)
            steps = [model(make_step_batch([], [(s, len(p) + i, 3 + i) for s, p in prompts.items()], "cpu"), cache)
                     for i in range(3)]
        return torch.stack(steps), cache

    fused, fused_cache = decode(True)
    assert len(calls) == 3   # every decode step went through layer.c, all its layers in one call
    plain, plain_cache = decode(False)
    assert len(calls) == 3
    torch.testing.assert_close(fused, plain, atol=1e-4, rtol=1e-4)
    for a, b in zip(fused_cache.k + fused_cache.v, plain_cache.k + plain_cache.v):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@needs_kernels
@pytest.mark.parametrize("n", [1, 3, 9, 33])
def test_a_matrix_of_row_segments_in_different_formats_is_one_product(n):
    """A fused matrix whose GGUF pieces mix formats (q|k Q5_0, v Q8_0, and a float32 piece where
    a format is not run as stored): one product over the segments, each at its own rows, odd
    row counts and both paths (a few rows of x; a prefill's dequantized panel pairs)."""
    from backend.kernels import ops
    from backend.models.packed import QuantPanels
    torch.manual_seed(n)
    inp = 512
    pieces = [("q5_0", 37), ("q8_0", 19), ("float32", 40), ("q4_k", 17), ("f16", 5)]
    ws = [torch.randn(rows, inp) * 0.05 for _, rows in pieces]
    parts, deq = [], []
    for (fmt, _), w in zip(pieces, ws):
        if fmt == "float32":
            parts.append(Panels.pack(w, 32))
            deq.append(w)
        else:
            parts.append(QuantPanels.quantize(w, fmt))
            deq.append(ops.dequantize_rows(ops.quantize_rows(w, fmt), fmt, inp))
    matrix = QuantPanels.join(parts)
    assert matrix.fmt == "segments" and matrix.shape == (118, inp)
    assert matrix.nbytes == sum(p.nbytes if isinstance(p, QuantPanels) else 40 * inp * 4 for p in parts)
    w = torch.cat(deq)
    x, bias, residual = torch.randn(n, inp), torch.randn(118), torch.randn(n, 118)
    got = linear(x, matrix, bias, residual)
    want = x.double() @ w.double().T + bias.double() + residual.double()
    bound = 4 * inp * 2.0 ** -24 * (x.abs().double() @ w.abs().double().T) + 1e-6 * residual.abs().double()
    assert ((got.double() - want).abs() <= bound).all()
    with pytest.raises(ValueError, match="do not add up"):
        ops.qlinear(x, matrix.data, "segments", 117)


def test_whether_the_kernels_can_be_had_is_answered_without_compiling(tmp_path, monkeypatch):
    """The window's dtype list asks before any build exists: a compiler is enough, nothing is compiled."""
    monkeypatch.setattr(kernels, "_tried", False)
    monkeypatch.setattr(kernels, "_lib", None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))                 # no build kept here
    monkeypatch.setattr(kernels, "load", lambda: pytest.fail("can_have() compiled or loaded"))
    assert kernels.can_have() is (shutil.which(kernels._compiler()[0]) is not None)
    assert list(tmp_path.rglob("*.so")) == []
    monkeypatch.setenv("CC", "no-such-compiler-here")
    assert kernels.can_have() is False
    monkeypatch.delenv("CC")
    monkeypatch.setenv("PHASESCOPE_KERNELS", "0")
    assert kernels.can_have() is False
