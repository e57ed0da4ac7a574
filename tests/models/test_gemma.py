"""Gemma 2 and Gemma 3 (text) against transformers on the same random weights: prefill, decode through
the cache, chunked prefill mixed with decode, 32 greedy steps, the GGUF llama.cpp's converter would
write (llama.cpp itself reading it as transformers runs the checkpoint), the config fields refused
elsewhere, and the CLI on a saved folder.

Every check runs on the C kernels (CPU float32) and on the torch path the GPU runs (the kernels
switched off here). Each model's window (8 keys) is shorter than its prompts and generations, so
sliding layers drop keys that global layers still see; the norm weights are drawn at random
(transformers initializes them to zero, which would hide the 1 + weight)."""
import copy
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from backend.loaders.hf import copy_weights, shape_from_config
from backend.models import KVCache, build_model
from tests.models.test_models import greedy_pair, run, tokens

transformers = pytest.importorskip("transformers")

SLIDING, FULL = "sliding_attention", "full_attention"
GEMMA = dict(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rms_norm_eps=1e-6, sliding_window=8,
             initializer_range=0.2)
VARIANTS = {
    # transformers' default layer_types (sliding, full, sliding, full); caps small enough to bite
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(GEMMA, query_pre_attn_scalar=24, attn_logit_softcapping=4.0,
                                                         final_logit_softcapping=6.0)),
    # a layer_types that no default pattern gives; global layers rotate with base 1e6 and factor 8, sliding ones 500
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        GEMMA, query_pre_attn_scalar=24, layer_types=[SLIDING, SLIDING, FULL, SLIDING], rope_theta=1e6,
        rope_local_base_freq=500.0, rope_scaling=dict(rope_type="linear", factor=8.0))),
}
PATHS = ["kernels", "torch"]


def hf_model(variant: str, **overrides):
    config_cls, model_cls, kwargs = VARIANTS[variant]
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**(kwargs | overrides), attn_implementation="eager")
    config.architectures = [model_cls]
    hf = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(0.0, 0.3)
    return hf


def reference_pair(variant: str):
    hf = hf_model(variant)
    shape, factors = shape_from_config(hf.config.to_dict(), variant)
    ours = build_model(shape, factors).eval()
    copy_weights(ours, hf.state_dict().items(), variant)
    return hf, ours, shape


@pytest.fixture(scope="module", params=list(VARIANTS))
def pair(request):
    return reference_pair(request.param)


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    """The C kernels where they are built, or the torch path (what a GPU or another dtype runs)."""
    from backend.kernels import ops
    if request.param == "torch":
        monkeypatch.setattr(ops, "usable", lambda device, dtype: False)
    return request.param


def assert_close_logits(got: torch.Tensor, expected: torch.Tensor):
    assert got.shape == expected.shape
    assert (got - expected).abs().max() <= 1e-3 * expected.abs().max()


def hf_logits(hf, seq: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return hf(torch.tensor([seq])).logits[0]   # (T, vocab)


def test_the_shape_carries_gemma_fields_and_counts_every_parameter(pair):
    from backend.roofline.cost import layer_params
    hf, ours, shape = pair
    gemma3 = isinstance(hf.config, transformers.Gemma3TextConfig)
    assert (shape.arch, shape.sliding_window, shape.query_pre_attn_scalar, shape.qk_norm) == ("gemma", 8, 24.0, gemma3)
    assert shape.global_layers == ((2,) if gemma3 else (1, 3))
    assert [shape.window(i) for i in range(4)] == ([8, 8, None, 8] if gemma3 else [8, None, 8, None])
    assert (shape.attn_softcap, shape.final_softcap, shape.rope_local_theta) == \
        ((None, None, 500.0) if gemma3 else (4.0, 6.0, None))
    assert shape.rope_theta == (1e6 if gemma3 else 10000.0)
    assert shape.num_params() == sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in hf.parameters())
    assert shape.vocab_size * shape.hidden_size + 4 * layer_params(shape) + shape.hidden_size == shape.num_params()


HUB_GEMMA3_4B_TEXT = dict(  # the text part of google/gemma-3-4b-it's config.json, as the hub has it (older form)
    architectures=["Gemma3ForCausalLM"], vocab_size=262208, hidden_size=2560, intermediate_size=10240,
    num_hidden_layers=34, num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=131072,
    rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=256, sliding_window=1024,
    sliding_window_pattern=6, rope_theta=1000000.0, rope_local_base_freq=10000.0,
    rope_scaling={"factor": 8.0, "rope_type": "linear"}, final_logit_softcapping=None, attn_logit_softcapping=None)
HUB_GEMMA2_2B = dict(  # google/gemma-2-2b-it's config.json: no layer_types, hidden_act beside hidden_activation
    architectures=["Gemma2ForCausalLM"], vocab_size=256000, hidden_size=2304, intermediate_size=9216,
    num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=8192,
    rms_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=256,
    sliding_window=4096, rope_theta=10000.0, final_logit_softcapping=30.0, attn_logit_softcapping=50.0,
    cache_implementation="hybrid")


@pytest.mark.parametrize("config_cls, hub", [("Gemma3TextConfig", HUB_GEMMA3_4B_TEXT), ("Gemma2Config", HUB_GEMMA2_2B)])
def test_a_hub_config_is_read_as_transformers_reads_it(config_cls, hub):
    """The older config.json form (no layer_types; rope_theta, rope_local_base_freq and rope_scaling
    instead of rope_parameters): the layers and rotary bases transformers derives from it."""
    shape, factors = shape_from_config(hub, "config.json")
    config = getattr(transformers, config_cls)(**{k: v for k, v in hub.items() if k != "architectures"})
    assert shape.global_layers == tuple(i for i, t in enumerate(config.layer_types) if t == FULL)
    rope = config.rope_parameters
    if config_cls == "Gemma3TextConfig":
        assert shape.global_layers == (5, 11, 17, 23, 29)
        assert (shape.rope_theta, shape.rope_local_theta) == (rope[FULL]["rope_theta"], rope[SLIDING]["rope_theta"])
        assert factors.tolist() == [rope[FULL]["factor"]] * 128
    else:
        assert shape.global_layers == tuple(range(1, 26, 2)) and factors is None
        assert (shape.rope_theta, shape.attn_softcap, shape.final_softcap) == (rope["rope_theta"], 50.0, 30.0)
    assert (shape.sliding_window, shape.query_pre_attn_scalar) == (config.sliding_window, 256.0)
    assert shape.num_params() == pytest.approx(3.88e9 if config_cls == "Gemma3TextConfig" else 2.61e9, rel=0.01)


def test_prefill_matches_transformers(pair, path):
    hf, ours, shape = pair
    prompt = tokens(19, seed=1)   # longer than the window
    got = run(ours, shape, [(1, 0, prompt)], [], KVCache(shape, 2, 32, "cpu", torch.float32), all_rows=True)
    assert_close_logits(got, hf_logits(hf, prompt))


def test_decode_and_a_chunk_mixed_with_decode_match_transformers(pair, path):
    """Request A: prompt in chunks of 6 and 5, then decode to 24 tokens; request B decodes in the
    same steps as A's second chunk and after, from other positions (so the decode mask differs per row)."""
    hf, ours, shape = pair
    a, b = tokens(24, seed=2), tokens(20, seed=3)
    full_a, full_b = hf_logits(hf, a), hf_logits(hf, b)
    cache = KVCache(shape, 3, 32, "cpu", torch.float32)
    got_b = [run(ours, shape, [(2, 0, b[:9])], [], cache)]
    run(ours, shape, [(0, 0, a[:6])], [], cache)
    mixed = run(ours, shape, [(0, 6, a[6:11])], [(2, 9, b[9])], cache)   # A's second chunk + B's decode
    got_a, got_b = [mixed[:1]], got_b + [mixed[1:]]
    for i in range(11, 20):
        step = run(ours, shape, [], [(0, i, a[i]), (2, i - 1, b[i - 1])], cache)
        got_a.append(step[:1])
        got_b.append(step[1:])
    assert_close_logits(torch.cat(got_a), full_a[10:20])
    assert_close_logits(torch.cat(got_b), full_b[8:19])


@pytest.mark.parametrize("table", ["identity", "scrambled"])   # the slot layout's block table, and permuted blocks
def test_greedy_tokens_match_transformers_for_32_steps(pair, path, table):
    """12-token prompt, 32 greedy steps (positions up to 43, five windows): the same tokens as
    transformers' generate, on the packed weights the runner uses."""
    from backend.models.packed import pack_weights
    hf, ours, shape = pair
    if path == "kernels":
        ours = copy.deepcopy(ours)   # packed in place: the module's other tests keep the plain one
        pack_weights(ours)
    got, expected = greedy_pair(hf, ours, shape, table=table)
    assert got == expected


@pytest.mark.parametrize("seed", [None, 3])   # the identity block table and a scrambled one
@pytest.mark.parametrize("hd", [64, 12])   # the vector path (a multiple of 8) and the scalar one
def test_the_c_decode_kernel_scales_caps_and_windows_as_the_reference(hd, seed):
    from tests.fakes.paged import to_pools
    from backend.kernels import ops
    if not ops.usable(torch.device("cpu"), torch.float32):
        pytest.skip("the C kernels are not built here")
    gen = torch.Generator().manual_seed(0)
    heads, kv, max_len, positions = 4, 2, 80, [3, 70, 12]
    q, k, v = (torch.randn(3, n, hd, generator=gen) * 3 for n in (heads, kv, kv))
    cache_k, cache_v = (torch.randn(3, kv, max_len, hd, generator=gen) for _ in range(2))
    slots = torch.tensor([2, 0, 1])
    expected = []
    for t, (slot, pos) in enumerate(zip(slots.tolist(), positions)):
        keys, values = cache_k[slot].clone(), cache_v[slot].clone()   # (kv, max_len, hd)
        keys[:, pos], values[:, pos] = k[t], v[t]
        first = max(0, pos - 9)                                       # a window of 10 keys
        scores = q[t].view(kv, 2, hd) @ keys[:, first:pos + 1].transpose(1, 2) * 0.3   # (kv, group, keys)
        weights = torch.softmax(torch.tanh(scores / 5.0) * 5.0, dim=-1)
        expected.append((weights @ values[:, first:pos + 1]).reshape(-1))
    pool_k, pool_v, table = to_pools(cache_k, cache_v, block_size=8, seed=seed)
    got = ops.decode_attention(q, k, v, pool_k, pool_v, table, slots, torch.tensor(positions), scale=0.3,
                               softcap=5.0, window=10)
    torch.testing.assert_close(got, torch.stack(expected), atol=1e-5, rtol=1e-4)
    where = table[slots, torch.tensor(positions) // 8].long(), torch.tensor(positions) % 8
    assert torch.equal(pool_k[:, where[0], where[1]], k.transpose(0, 1))   # the new keys, in place in their blocks


@pytest.mark.parametrize("static_len", [16, 32])
def test_static_decode_matches_plain_decode(pair, path, static_len):
    """The CUDA-graph form of a decode step (padded batch, the first static_len keys of every slot
    under a mask built from tensors alone: a length bucket or the whole max_len) against the plain
    step, past the window."""
    from backend.models import make_step_batch
    _, ours, shape = pair
    prompts = [tokens(13, seed=5), tokens(9, seed=6)]
    caches = [KVCache(shape, 3, 32, "cpu", torch.float32) for _ in range(2)]
    for cache in caches:
        run(ours, shape, [(0, 0, prompts[0]), (1, 0, prompts[1])], [], cache)
    decode = [(0, 13, 5), (1, 9, 6), (2, 0, 0)]   # the last row pads the batch, in a slot no request owns
    plain = run(ours, shape, [], decode[:2], caches[0])
    with torch.inference_mode():
        static = ours(make_step_batch([], decode, "cpu"), caches[1], static_len=static_len)[:2]
    assert_close_logits(static, plain)


def test_bfloat16_runs_close_to_transformers_in_bfloat16(pair):
    """The dtype casts (the embedding's normalizer, float32 norms) in a non-float32 run, which takes
    the torch path; bfloat16 rounding on both sides allows a looser bound."""
    hf, ours, shape = pair
    prompt = tokens(19, seed=8)
    ours16, hf16 = copy.deepcopy(ours).to(torch.bfloat16), copy.deepcopy(hf).to(torch.bfloat16)
    got = run(ours16, shape, [(0, 0, prompt)], [], KVCache(shape, 1, 32, "cpu", torch.bfloat16), all_rows=True)
    expected = hf_logits(hf16, prompt)
    assert got.dtype == torch.bfloat16
    assert (got.float() - expected.float()).abs().max() <= 5e-2 * expected.float().abs().max()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_gguf_runs_as_its_transformers_checkpoint(tmp_path, variant):
    """The checkpoint as llama.cpp's converter writes it (norms + 1, its names, soft caps, window and
    rotary bases in the metadata), loaded by load_model: the shape and the logits of transformers.
    llama.cpp keeps no query_pre_attn_scalar (it scales by head_dim ** -0.5), so here it is head_dim;
    nor Gemma 3's layer_types (it slides 5 layers in 6), so that Gemma 3 has 6 layers, the last global."""
    from backend.kernels import ops
    from backend.loaders.weights import bundled_gguf, load_model
    from tests.fakes.gguf_files import write_gguf
    if bundled_gguf() is None:
        pytest.skip("the bundled model (whose tokenizer the file borrows) is not installed")
    pattern = dict(num_hidden_layers=6, layer_types=None) if variant == "gemma3" else {}
    hf = hf_model(variant, query_pre_attn_scalar=16, **pattern)
    path = write_gguf(tmp_path / f"{variant}.gguf", variant, hf, bundled_gguf())
    loaded = load_model(str(path), "cpu", "float32")
    expected_shape, _ = shape_from_config(hf.config.to_dict(), variant)
    assert loaded.shape.norm_eps == pytest.approx(expected_shape.norm_eps)   # stored as float32
    assert loaded.shape == dataclasses.replace(expected_shape, norm_eps=loaded.shape.norm_eps)
    prompt = [int(t) for t in torch.randint(0, 49152, (19,), generator=torch.Generator().manual_seed(3))]
    got = run(loaded.model, loaded.shape, [(0, 0, prompt)], [], KVCache(loaded.shape, 1, 32, "cpu", torch.float32),
              all_rows=True)
    expected = hf_logits(hf, prompt)
    assert_close_logits(got, expected)
    if ops.usable(torch.device("cpu"), torch.float32):   # its matrices quantized to Q8_0 for the C kernels
        q8 = load_model(str(path), "cpu", "q8_0")
        got = run(q8.model, q8.shape, [(0, 0, prompt)], [], KVCache(q8.shape, 1, 32, "cpu", torch.float32),
                  all_rows=True)
        # measured 2-5% on these random weights; a norm without its 1 or a misnamed tensor is off by the whole scale
        assert (got - expected).abs().max() <= 0.1 * expected.abs().max()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_llama_cpp_reads_the_written_gguf_as_transformers_runs_the_checkpoint(tmp_path, variant):
    """The fake converter's file is what llama.cpp expects (its names, the norms + 1, the caps, the
    sliding layers, the rotary bases): llama.cpp's logits are transformers' (to its float16 KV cache)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from backend.loaders.weights import bundled_gguf
    from tests.fakes.gguf_files import write_gguf
    if bundled_gguf() is None:
        pytest.skip("the bundled model (whose tokenizer the file borrows) is not installed")
    pattern = dict(num_hidden_layers=6, layer_types=None) if variant == "gemma3" else {}
    hf = hf_model(variant, query_pre_attn_scalar=16, **pattern)
    path = write_gguf(tmp_path / f"{variant}.gguf", variant, hf, bundled_gguf())
    prompt = [int(t) for t in torch.randint(0, 49152, (19,), generator=torch.Generator().manual_seed(3))]
    llm = llama_cpp.Llama(str(path), n_ctx=64, logits_all=True, verbose=False, n_threads=2)
    llm.eval(prompt)
    got, expected = torch.tensor(llm.scores[:19]), hf_logits(hf, prompt)
    assert (got - expected).abs().max() <= 5e-3 * expected.abs().max()


@pytest.mark.parametrize("arch, keys, layers, global_layers, scalar", [
    ("gemma2", {}, 4, (1, 3), 16.0),                                             # llama.cpp's default: every other
    ("gemma3", {"gemma3.attention.sliding_window_pattern": [True, False, True]}, 3, (1,), 16.0),   # per-layer flags
    ("gemma3", {"gemma3.attention.sliding_window_pattern": 3}, 62, tuple(range(2, 62, 3)), 8.0),   # 27B: hidden / heads
])
def test_gguf_metadata_gives_the_sliding_layers_and_the_scale_as_llama_cpp_reads_them(arch, keys, layers,
                                                                                     global_layers, scalar):
    from backend.loaders.gguf import _shape
    fields = {"general.architecture": arch, f"{arch}.embedding_length": 64, f"{arch}.attention.head_count": 8,
              f"{arch}.attention.key_length": 16, f"{arch}.block_count": layers, f"{arch}.feed_forward_length": 128,
              f"{arch}.context_length": 256, f"{arch}.attention.sliding_window": 8, **keys}
    shape = _shape(fields, {"token_embd.weight": (100, 64)}, Path("x.gguf"))
    assert (shape.arch, shape.global_layers, shape.query_pre_attn_scalar) == ("gemma", global_layers, scalar)
    assert (shape.attn_softcap, shape.final_softcap) == ((50.0, 30.0) if arch == "gemma2" else (None, None))
    assert shape.rope_local_theta == (None if arch == "gemma2" else 10000.0)


@pytest.mark.parametrize("arch, field, value, words", [
    ("LlamaForCausalLM", "attn_logit_softcapping", 50.0, "attn_logit_softcapping = 50.0 is not implemented"),
    ("LlamaForCausalLM", "final_logit_softcapping", 30.0, "final_logit_softcapping = 30.0 is not implemented"),
    ("MistralForCausalLM", "query_pre_attn_scalar", 256, "query_pre_attn_scalar = 256 is not implemented"),
    ("Qwen3ForCausalLM", "rope_local_base_freq", 10000.0, "rope_local_base_freq = 10000.0 is not implemented"),
    # transformers' Gemma 3 does not apply it, so a checkpoint that sets it is not run either way
    ("Gemma3ForCausalLM", "attn_logit_softcapping", 50.0, "attn_logit_softcapping = 50.0 is not implemented"),
    ("Gemma2ForCausalLM", "use_bidirectional_attention", True, "use_bidirectional_attention = True is not"),
    ("Gemma2ForCausalLM", "hidden_activation", "gelu", "activation 'gelu' is not implemented"),
    ("Gemma3ForConditionalGeneration", "vision_config", {}, "use a text-only Gemma 3 checkpoint (Gemma3ForCausalLM"),
])
def test_fields_gemma_implements_are_still_refused_where_it_does_not(arch, field, value, words):
    from backend.errors import InputError
    config = dict(GEMMA, architectures=[arch], **{field: value})
    with pytest.raises(InputError, match=words.replace("(", r"\(")) as info:
        shape_from_config(config, "some/config.json")
    assert "\n" not in str(info.value) and str(info.value).startswith("some/config.json: ")


def test_the_cli_runs_a_gemma_folder(tmp_path):
    hf_model("gemma3").save_pretrained(tmp_path, safe_serialization=True)
    proc = subprocess.run([sys.executable, "main.py", "run", "--model", str(tmp_path), "--prompt-len", "12",
                           "--output-len", "12", "--batch", "2", "--ignore-eos", "--out", str(tmp_path / "run")],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "TPOT" in proc.stdout and "Traceback" not in proc.stderr
    assert (tmp_path / "run" / "steps.csv").is_file()
