"""Our decoders against transformers on the same weights, and the KV cache paths against one full pass."""
import pytest
import torch

from backend.loaders.hf import copy_weights, shape_from_config
from backend.models import KVCache, build_model, make_step_batch
from backend.shape import ModelShape

transformers = pytest.importorskip("transformers")

LLAMA = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5)
VARIANTS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(LLAMA, rope_theta=10000.0)),
    "llama3-rope-tied": ("LlamaConfig", "LlamaForCausalLM", dict(
        LLAMA, rope_theta=500000.0, tie_word_embeddings=True,
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=64))),
    "qwen2-bias": ("Qwen2Config", "Qwen2ForCausalLM", dict(LLAMA, rope_theta=1000000.0)),
    # q and k normalized per head; head_dim 32 of a 64-wide model (so q is wider than the hidden state)
    "qwen3-qknorm": ("Qwen3Config", "Qwen3ForCausalLM", dict(LLAMA, head_dim=32, rope_theta=1000000.0,
                                                             initializer_range=0.2)),
    # fused qkv_proj and gate_up_proj in the checkpoint, and a 10-key sliding window
    "phi3-fused": ("Phi3Config", "Phi3ForCausalLM", dict(LLAMA, sliding_window=10, pad_token_id=0,
                                                         initializer_range=0.2)),
    # a window of 8 keys, shorter than the tests' prompts: prefill, decode and chunks all cross it
    "mistral-window": ("MistralConfig", "MistralForCausalLM", dict(LLAMA, sliding_window=8, initializer_range=0.2)),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(vocab_size=128, n_positions=256, n_embd=64, n_layer=2, n_head=4)),
}


def reference_pair(variant: str):
    """A random transformers model and ours with its weights."""
    config_cls, model_cls, kwargs = VARIANTS[variant]
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**kwargs, attn_implementation="eager")
    config.architectures = [model_cls]
    hf = getattr(transformers, model_cls)(config).eval()
    shape, factors = shape_from_config(config.to_dict(), variant)
    ours = build_model(shape, factors).eval()
    copy_weights(ours, hf.state_dict().items(), variant)
    return hf, ours, shape


def run(model, shape: ModelShape, prefill, decode, cache: KVCache, all_rows: bool = False) -> torch.Tensor:
    batch = make_step_batch(prefill, decode, "cpu")
    if all_rows:
        batch.logit_rows = torch.arange(batch.input_ids.shape[0])
    with torch.inference_mode():
        return model(batch, cache)


def tokens(n: int, seed: int) -> list[int]:
    return torch.randint(0, 128, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def make_cache(shape: ModelShape, rows: int, max_len: int, table: str = "identity") -> KVCache:
    """A float32 CPU cache with the slot layout's identity block table, or a scrambled one (every row
    owns permuted, non-contiguous blocks of the pool), in blocks of 8 so short tests cross blocks."""
    from tests.fakes.paged import scramble
    cache = KVCache(shape, rows, max_len, "cpu", torch.float32, block_size=8)
    return scramble(cache, seed=rows * max_len) if table == "scrambled" else cache


def greedy_pair(hf, ours, shape: ModelShape, steps: int = 32, table: str = "identity") -> tuple[list[int], list[int]]:
    """(our greedy tokens, transformers' generate) for `steps` steps after a 12-token prompt:
    one prefill, then a decode step per token through the KV cache (row 1 of three, through the
    identity block table or a scrambled one)."""
    prompt = tokens(12, seed=7)
    with torch.inference_mode():
        expected = hf.generate(torch.tensor([prompt]), max_new_tokens=steps, do_sample=False)[0, 12:].tolist()
    cache = make_cache(shape, 3, 64, table)
    got = [int(run(ours, shape, [(1, 0, prompt)], [], cache)[0].argmax())]
    for pos in range(12, 12 + steps - 1):
        got.append(int(run(ours, shape, [], [(1, pos, got[-1])], cache)[0].argmax()))
    return got, expected


@pytest.fixture(params=["c", "torch"])
def attention_path(request, monkeypatch):
    """The C kernels' attention (prefill_attention.c, attention.c, the fused layer.c on packed weights)
    or torch's (SDPA over keys gathered through the table), on the same model."""
    from backend.kernels import ops
    if request.param == "c" and not ops.usable(torch.device("cpu"), torch.float32):
        pytest.skip("the C kernels are not built here")
    if request.param == "torch":
        monkeypatch.setattr(ops, "usable", lambda device, dtype: False)
    return request.param


@pytest.fixture(scope="module", params=list(VARIANTS))
def pair(request):
    return reference_pair(request.param)


def test_prefill_matches_transformers(pair):
    hf, ours, shape = pair
    prompt = tokens(19, seed=1)
    with torch.inference_mode():
        expected = hf(torch.tensor([prompt])).logits[0]  # (T, vocab)
    got = run(ours, shape, [(1, 0, prompt)], [], KVCache(shape, 2, 32, "cpu", torch.float32), all_rows=True)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_decode_through_cache_matches_full_pass(pair):
    _, ours, shape = pair
    seq = tokens(16, seed=2)
    full = run(ours, shape, [(0, 0, seq)], [], KVCache(shape, 1, 32, "cpu", torch.float32), all_rows=True)
    cache = KVCache(shape, 1, 32, "cpu", torch.float32)
    steps = [run(ours, shape, [(0, 0, seq[:10])], [], cache)]
    for pos in range(10, 16):
        steps.append(run(ours, shape, [], [(0, pos, seq[pos])], cache))
    torch.testing.assert_close(torch.cat(steps), full[9:], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("table", ["identity", "scrambled"])
@pytest.mark.parametrize("slots", [[3, 0, 5], [1, 2, 3]])
def test_batched_requests_match_each_alone(pair, slots, table, attention_path):
    _, ours, shape = pair
    prompts = [tokens(n, seed=10 + n) for n in (5, 9, 13)]
    alone = []
    for prompt in prompts:
        cache = KVCache(shape, 1, 32, "cpu", torch.float32)
        rows = [run(ours, shape, [(0, 0, prompt)], [], cache)]
        for i in range(3):
            rows.append(run(ours, shape, [], [(0, len(prompt) + i, 7 + i)], cache))
        alone.append(torch.cat(rows))  # (4, vocab)
    cache = make_cache(shape, 6, 32, table)
    together = [run(ours, shape, [(s, 0, p) for s, p in zip(slots, prompts)], [], cache)]
    for i in range(3):
        decode = [(s, len(p) + i, 7 + i) for s, p in zip(slots, prompts)]
        assert (make_step_batch([], decode, "cpu").decode_slot_range is not None) == (slots == [1, 2, 3])
        together.append(run(ours, shape, [], decode, cache))
    together = torch.stack(together, dim=1)  # (requests, 4, vocab)
    torch.testing.assert_close(together, torch.stack(alone), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("table", ["identity", "scrambled"])
def test_chunked_prefill_matches_one_shot_and_mixes_with_decode(pair, table, attention_path):
    _, ours, shape = pair
    prompt, other = tokens(14, seed=3), tokens(6, seed=4)
    one_shot = run(ours, shape, [(0, 0, prompt)], [], KVCache(shape, 1, 32, "cpu", torch.float32))
    other_alone = KVCache(shape, 1, 32, "cpu", torch.float32)
    run(ours, shape, [(0, 0, other)], [], other_alone)
    other_next = run(ours, shape, [], [(0, 6, 9)], other_alone)

    cache = make_cache(shape, 2, 32, table)
    run(ours, shape, [(1, 0, other)], [], cache)
    run(ours, shape, [(0, 0, prompt[:8])], [], cache)
    # Second chunk and a decode token of another request in the same step.
    mixed = run(ours, shape, [(0, 8, prompt[8:])], [(1, 6, 9)], cache)
    torch.testing.assert_close(mixed[:1], one_shot, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(mixed[1:], other_next, atol=1e-5, rtol=1e-4)


def test_make_step_batch_layout():
    batch = make_step_batch([(2, 0, [5, 6, 7]), (0, 4, [8, 9])], [(4, 10, 1), (1, 3, 2)], "cpu")
    assert batch.input_ids.tolist() == [5, 6, 7, 8, 9, 1, 2]
    assert batch.positions.tolist() == [0, 1, 2, 4, 5, 10, 3]
    assert [(s.slot, s.start, s.length) for s in batch.prefill] == [(2, 0, 3), (0, 4, 2)]
    assert batch.decode_slots.tolist() == [4, 1] and batch.decode_positions.tolist() == [10, 3]
    assert batch.decode_slot_range is None
    assert batch.logit_rows.tolist() == [2, 4, 5, 6]
    assert make_step_batch([], [(2, 0, 1), (3, 0, 1)], "cpu").decode_slot_range == (2, 4)


@pytest.mark.parametrize("variant", ["mistral-window", "qwen3-qknorm", "phi3-fused"])
def test_greedy_tokens_match_transformers_for_32_steps(variant):
    """32 greedy steps of a 12-token prompt: transformers' generate and our prefill, then decode
    steps through the cache on the packed weights the runner uses, choose the same tokens. Mistral's
    8-key window is crossed (the C decode kernel inside it, SDPA with the window's mask past it);
    Qwen3's per-head q/k norms run layer by layer."""
    from backend.models.packed import pack_weights
    hf, ours, shape = reference_pair(variant)
    assert (shape.sliding_window, shape.qk_norm) == {"mistral-window": (8, False), "qwen3-qknorm": (None, True),
                                                     "phi3-fused": (10, False)}[variant]
    from backend import kernels
    assert pack_weights(ours) or kernels.load() is None
    got, expected = greedy_pair(hf, ours, shape)
    assert got == expected


@pytest.mark.parametrize("table", ["identity", "scrambled"])
def test_greedy_tokens_match_transformers_through_any_block_table(pair, table, attention_path):
    """Every family here, on the C kernels' attention (the fused decode layer on packed weights) and
    on torch's: the same 32 greedy tokens as transformers whether the request's blocks are the slot
    layout's or permuted, non-contiguous blocks of the pool."""
    import copy

    from backend.models.packed import pack_weights
    hf, ours, shape = pair
    if attention_path == "c":
        ours = copy.deepcopy(ours)   # packed in place: the module's other tests keep the plain one
        assert pack_weights(ours)
    got, expected = greedy_pair(hf, ours, shape, table=table)
    assert got == expected


@pytest.mark.parametrize("field, value, words", [
    ("attn_logit_softcapping", 50.0, "attn_logit_softcapping = 50.0 is not implemented"),
    ("num_local_experts", 8, "num_local_experts = 8 is not implemented"),
    ("partial_rotary_factor", 0.5, "partial_rotary_factor = 0.5 is not implemented"),
    ("hidden_act", "gelu", "activation 'gelu' is not implemented"),
    ("use_sliding_window", True, "sliding window on some layers only"),
])
def test_a_config_field_the_engine_does_not_implement_is_refused_in_one_line(field, value, words):
    from backend.errors import InputError
    config = dict(LLAMA, architectures=["LlamaForCausalLM"], **{field: value})
    with pytest.raises(InputError, match=words) as info:
        shape_from_config(config, "some/config.json")
    assert "\n" not in str(info.value) and str(info.value).startswith("some/config.json: ")


@pytest.mark.parametrize("arch, config_cls, model_cls, extra", [
    ("qwen3", "Qwen3Config", "Qwen3ForCausalLM", dict(head_dim=32, rope_theta=1000000.0)),
    ("phi3", "Phi3Config", "Phi3ForCausalLM", dict(sliding_window=6, pad_token_id=0)),
])
def test_a_gguf_runs_as_its_transformers_checkpoint(tmp_path, arch, config_cls, model_cls, extra):
    """Qwen3 (its q/k norms as attn_q_norm and attn_k_norm) and Phi-3 (fused attn_qkv and ffn_up, a
    sliding window in the metadata) from a GGUF named as llama.cpp's converter names them, loaded
    through load_model: the same logits as transformers on the same weights."""
    from backend.loaders.weights import bundled_gguf, load_model
    from tests.fakes.gguf_files import write_gguf
    if bundled_gguf() is None:
        pytest.skip("the bundled model (whose tokenizer the file borrows) is not installed")
    torch.manual_seed(0)
    config = getattr(transformers, config_cls)(**dict(LLAMA, vocab_size=49152, initializer_range=0.2, **extra),
                                               attn_implementation="eager")
    hf = getattr(transformers, model_cls)(config).eval()
    path = write_gguf(tmp_path / f"{arch}.gguf", arch, hf, bundled_gguf())
    loaded = load_model(str(path), "cpu", "float32")
    assert loaded.shape.qk_norm == (arch == "qwen3") and loaded.shape.sliding_window == extra.get("sliding_window")
    prompt = [int(t) for t in torch.randint(0, 49152, (9,), generator=torch.Generator().manual_seed(3))]
    with torch.inference_mode():
        expected = hf(torch.tensor([prompt])).logits[0]
    shape = loaded.shape
    got = run(loaded.model, shape, [(0, 0, prompt)], [], KVCache(shape, 1, 32, "cpu", torch.float32), all_rows=True)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
