"""Mixtures of experts (Mixtral, Qwen3-MoE, OLMoE) against transformers on the same random weights,
on the C kernels (packed float32 panels, backend/kernels/moe.c) and on the torch path (the kernels
turned off, as on a GPU); their GGUF form; what a step reports it read; the roofline's union of
experts; and the one-line refusals of what is not implemented."""
import json

import pytest
import torch

from backend.errors import InputError
from backend.loaders.hf import shape_from_config
from backend.models import KVCache, make_step_batch, moe
from backend.models.packed import Panels, pack_weights
from backend.roofline.moe import expected_experts
from tests.models import test_models
from tests.models.test_models import greedy_pair, run

transformers = pytest.importorskip("transformers")

MOE = dict(vocab_size=49152, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
           max_position_embeddings=256, rms_norm_eps=1e-5, initializer_range=0.2)
VARIANTS = {
    # 8 experts, top-2, the softmax over the two chosen logits
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(MOE, intermediate_size=96, num_local_experts=8,
                                                            num_experts_per_tok=2)),
    # 16 experts of 32, top-4 renormalized; per-head q/k norms and a head_dim wider than hidden / heads
    "qwen3-moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(MOE, intermediate_size=128, moe_intermediate_size=32,
                                                               num_experts=16, num_experts_per_tok=4, head_dim=32,
                                                               norm_topk_prob=True)),
    # 16 experts, top-4 not renormalized; q/k norms over the whole projections, q/k/v clamped at 2
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", dict(MOE, intermediate_size=48, num_experts=16, num_experts_per_tok=4,
                                                      clip_qkv=2.0)),
}


def reference_pair(variant: str):
    """test_models.reference_pair for an MoE variant (it reads its own table)."""
    test_models.VARIANTS.setdefault(variant, VARIANTS[variant])
    return test_models.reference_pair(variant)


def close(got: torch.Tensor, expected: torch.Tensor) -> None:
    """Within 1e-3 of the largest expected logit."""
    assert got.shape == expected.shape
    assert (got - expected).abs().max() <= 1e-3 * expected.abs().max()


def tokens(n: int, seed: int) -> list[int]:
    return torch.randint(0, 49152, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.fixture(params=["kernels", "torch"])
def path(request, monkeypatch):
    """kernels: the packed model on the C kernels; torch: the kernels off (as PHASESCOPE_KERNELS=0), so the
    matrices pack for oneDNN and the experts run in torch, as they do on a GPU."""
    from backend import kernels
    if request.param == "kernels" and kernels.load() is None:
        pytest.skip(f"the C kernels are unavailable: {kernels.reason()}")
    if request.param == "torch":
        monkeypatch.setattr(kernels, "load", lambda: None)
    return request.param


@pytest.fixture(scope="module", params=list(VARIANTS))
def pair(request):
    hf, ours, shape = reference_pair(request.param)
    return request.param, hf, ours, shape


def packed(ours, path: str):
    """The model as the runner packs it; the C path must really hold float32 panels."""
    import copy
    model = copy.deepcopy(ours)
    pack_weights(model)
    assert isinstance(model.layers[0].expert0_down, Panels) == (path == "kernels")
    return model


def test_shape_from_each_config(pair):
    variant, hf, _, shape = pair
    expected = {"mixtral": (8, 2, 96, True, False, None), "qwen3-moe": (16, 4, 32, True, False, None),
                "olmoe": (16, 4, 48, False, True, 2.0)}[variant]
    assert (shape.num_experts, shape.experts_per_token, shape.intermediate_size, shape.norm_topk_prob,
            shape.qk_norm_full, shape.clip_qkv) == expected
    assert shape.num_params() == sum(p.numel() for p in hf.parameters())
    unrouted = shape.num_layers * (shape.num_experts - shape.experts_per_token) * 3 * 64 * shape.intermediate_size
    assert shape.num_active_params() == shape.num_params() - unrouted


def test_prefill_matches_transformers(pair, path):
    _, hf, ours, shape = pair
    prompt = tokens(19, seed=1)
    with torch.inference_mode():
        expected = hf(torch.tensor([prompt])).logits[0]   # (T, vocab)
    got = run(packed(ours, path), shape, [(1, 0, prompt)], [], KVCache(shape, 2, 32, "cpu", torch.float32),
              all_rows=True)
    close(got, expected)


def assert_mixed_chunk_matches(model, hf, shape) -> None:
    """A prompt's later chunk mixed with another request's decode token in one step gives
    transformers' logits for both."""
    prompt, other = tokens(14, seed=3), tokens(6, seed=4)
    cache = KVCache(shape, 2, 32, "cpu", torch.float32)
    run(model, shape, [(1, 0, other)], [], cache)
    run(model, shape, [(0, 0, prompt[:8])], [], cache)
    mixed = run(model, shape, [(0, 8, prompt[8:])], [(1, 6, 9)], cache)   # (2, vocab)
    with torch.inference_mode():
        close(mixed[:1], hf(torch.tensor([prompt])).logits[0, -1:])
        close(mixed[1:], hf(torch.tensor([other + [9]])).logits[0, -1:])


def test_chunked_prefill_mixed_with_a_decode_token_matches_transformers(pair, path):
    _, hf, ours, shape = pair
    model = packed(ours, path)
    assert_mixed_chunk_matches(model, hf, shape)


@pytest.mark.parametrize("table", ["identity", "scrambled"])   # the slot layout's block table, and permuted blocks
def test_greedy_tokens_match_transformers_for_32_steps(pair, path, table):
    _, hf, ours, shape = pair
    model = packed(ours, path)
    got, expected = greedy_pair(hf, model, shape, table=table)
    assert got == expected


def test_the_kernel_routes_as_torch_and_adds_the_same_experts():
    """moe.c on float32 panels: each row's experts are torch's top-k, and the output torch's grouped sum."""
    from backend import kernels
    from backend.kernels import ops
    if kernels.load() is None:
        pytest.skip(f"the C kernels are unavailable: {kernels.reason()}")
    g = torch.Generator().manual_seed(0)
    d, ff, num_experts, k, n = 64, 32, 16, 4, 7
    h, residual = torch.randn(n, d, generator=g), torch.randn(n, d, generator=g)
    router = torch.randn(num_experts, d, generator=g)
    plain = [(torch.randn(2 * ff, d, generator=g) * 0.2, torch.randn(d, ff, generator=g) * 0.2)
             for _ in range(num_experts)]
    width = kernels.load().psk_panel_width()
    panels = [(Panels.pack(a, width), Panels.pack(b, width)) for a, b in plain]
    table = torch.tensor([[a.data.data_ptr(), b.data.data_ptr(), 0, 0] for a, b in panels], dtype=torch.long)
    for norm in (False, True):
        chosen = torch.empty(n, k, dtype=torch.long)
        got, touched = ops.moe(h, residual, Panels.pack(router, width).data, 0, table, k, ff, norm, chosen)
        want_chosen, _ = moe.route(h @ router.T, k, norm)
        expected, expected_touched = moe.torch_moe(h, residual, router, plain, k, norm)
        assert chosen.sort(dim=1).values.tolist() == want_chosen.sort(dim=1).values.tolist()
        assert touched == expected_touched == len(want_chosen.unique())
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_the_moe_path_by_device_and_dtype():
    """The C kernel where the panels are packed; one host read a layer only off CUDA."""
    P = moe.MoePath
    assert moe.moe_path("cpu", torch.float32, True, False, 64, 32) is P.KERNEL
    assert moe.moe_path("cpu", torch.bfloat16, False, True, 64, 32) is P.SORTED
    assert moe.moe_path("cuda", torch.bfloat16, False, True, 4096, 14336, (9, 0)) is P.GROUPED
    assert moe.moe_path("cuda", torch.bfloat16, False, True, 4096, 14336, (8, 0)) is P.GROUPED
    assert moe.moe_path("cuda", torch.bfloat16, False, True, 4096, 14336, (7, 5)) is P.DENSE   # no grouped kernel
    assert moe.moe_path("cuda", torch.float16, False, True, 4096, 14336, (9, 0)) is P.DENSE
    assert moe.moe_path("cuda", torch.float32, False, True, 4096, 14336, (9, 0)) is P.DENSE
    assert moe.moe_path("cuda", torch.bfloat16, False, True, 4100, 14336, (9, 0)) is P.DENSE   # unaligned rows
    assert moe.moe_path("cuda", torch.bfloat16, False, False, 4096, 14336, (9, 0)) is P.SORTED  # not plain tensors


def no_host_reads(monkeypatch):
    """Make every explicit read of a tensor's value on the host fail (what stalls a GPU at each layer)."""
    def refuse(*args, **kwargs):
        raise AssertionError("a host read in the routed path")
    for name in ("tolist", "item", "__int__", "__bool__", "__index__", "__float__"):
        monkeypatch.setattr(torch.Tensor, name, refuse)


@pytest.mark.parametrize("grouped", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_cuda_paths_equal_the_sorted_path_with_no_host_read(grouped, dtype, monkeypatch):
    """device_moe (grouped matmul over sorted rows, or dense) against torch_moe, on the CPU, with
    host reads refused while it runs; rows routed to no expert and one expert taking most rows."""
    g = torch.Generator().manual_seed(1)
    d, ff, num_experts, k, n = 64, 32, 8, 2, 37
    h, residual = (torch.randn(n, d, generator=g) + 1).to(dtype), torch.randn(n, d, generator=g).to(dtype)
    router = torch.randn(num_experts, d, generator=g)
    router[3] += 0.5    # along every row's common part: expert 3 takes most rows
    router[6:] = -0.5   # against it: experts 6 and 7 none
    router = router.to(dtype)
    plain = [((torch.randn(2 * ff, d, generator=g) * 0.2).to(dtype), (torch.randn(d, ff, generator=g) * 0.2).to(dtype))
             for _ in range(num_experts)]
    gate_up, down = torch.stack([a for a, _ in plain]), torch.stack([b for _, b in plain])
    for norm in (False, True):
        expected, expected_touched = moe.torch_moe(h, residual, router, plain, k, norm)
        with monkeypatch.context() as m:
            no_host_reads(m)
            got, touched = moe.device_moe(h, residual, router, gate_up, down, k, norm, grouped)
            with pytest.raises(AssertionError, match="host read"):   # the guard holds: the sorted path reads
                moe.torch_moe(h, residual, router, plain, k, norm)
        assert isinstance(touched, torch.Tensor) and int(touched) == expected_touched < num_experts
        tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=3e-2, rtol=2e-2)
        torch.testing.assert_close(got, expected, **tol)


@pytest.mark.parametrize("forced", [moe.MoePath.GROUPED, moe.MoePath.DENSE])
def test_a_model_on_the_cuda_paths_matches_transformers_and_counts_its_experts(pair, forced, monkeypatch):
    """The CUDA paths forced on the CPU, through a whole model: stacking re-points the experts'
    parameters at views of the stack (no second copy), and a chunked prefill mixed with a decode
    token gives transformers' logits."""
    import copy
    _, hf, ours, shape = pair
    model = copy.deepcopy(ours)   # unpacked plain tensors, as on a GPU
    monkeypatch.setattr(moe, "moe_path", lambda *args: forced)
    assert_mixed_chunk_matches(model, hf, shape)
    layer = model.layers[0]
    _, gate_up, down = layer.expert_stack
    assert layer.expert1_gate_up.data_ptr() == gate_up[1].data_ptr() and layer.expert2_down.data_ptr() == down[2].data_ptr()
    touched, _, _ = model.experts_read()
    assert 0 < int(touched) <= shape.num_layers * shape.num_experts


@pytest.fixture(scope="module")
def qwen3_moe_folder(tmp_path_factory):
    hf, _, _ = reference_pair("qwen3-moe")
    folder = tmp_path_factory.mktemp("qwen3-moe")
    hf.save_pretrained(folder, safe_serialization=True)
    return folder


def test_a_step_reports_the_experts_it_touched_and_the_bytes_it_read(qwen3_moe_folder, path, monkeypatch):
    """A prefill segment and two decode tokens in one step: the experts counted by the model are those
    of the router's own top-k in torch, and the bytes are the shared weights plus those experts."""
    from backend.config import SamplingConfig
    from backend.engine.runner import Runner
    from backend.loaders.weights import load_model
    loaded = load_model(str(qwen3_moe_folder), "cpu", "float32")
    shape = loaded.shape
    routers = [layer.router.detach().clone() for layer in loaded.model.layers]
    runner = Runner(loaded, num_slots=3, max_len=32, sampling=SamplingConfig())
    # what every step reads: the layers and the (untied) LM head, not the embedding table it gathers rows of
    shared = loaded.weight_bytes - shape.vocab_size * shape.hidden_size * 4 - shape.num_layers * shape.num_experts * 3 * 64 * 32 * 4
    assert runner.step_reads() == (0, shared)
    seen = []
    real = moe.run

    def recording(layer, h, residual):
        seen.append(h.clone())
        return real(layer, h, residual)
    monkeypatch.setattr(moe, "run", recording)
    with torch.inference_mode():
        runner.model(make_step_batch([(0, 0, tokens(3, seed=5))], [(1, 0, 11), (2, 0, 12)], "cpu"), runner.cache)
    touched = sum(len(moe.route(h @ r.T, 4, True)[0].unique()) for h, r in zip(seen, routers))
    assert 4 <= touched < 2 * 16                                  # 5 tokens: some experts, not all
    expert = 3 * 64 * 32 * 4                                      # gate, up and down in float32
    assert runner.step_reads() == (touched, shared + touched * expert)


def test_the_union_of_experts_goes_from_k_to_all():
    assert expected_experts(8, 2, 1) == pytest.approx(2)
    assert expected_experts(128, 8, 1) == pytest.approx(8)
    assert expected_experts(8, 2, 10_000) == pytest.approx(8)
    assert expected_experts(8, 2, 0) == 0
    grows = [expected_experts(64, 4, b) for b in (1, 2, 8, 32, 256)]
    assert grows == sorted(grows) and grows[-1] < 64
    assert expected_experts(64, 4, 2) == pytest.approx(64 * (1 - (60 / 64) ** 2))


def test_the_roofline_prices_a_decode_step_by_its_experts_union():
    from backend.roofline.cost import step_cost
    shape, _ = shape_from_config(dict(architectures=["MixtralForCausalLM"], vocab_size=1000, hidden_size=64,
                                      intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=256, num_local_experts=8,
                                      num_experts_per_tok=2), "mixtral/config.json")
    d, ff, layers = 64, 96, 2
    attention, router, expert = d * (4 + 2 * 2) * 16 + 4 * 16 * d, 8 * d, 3 * d * ff
    for batch in (1, 3, 50):
        cost = step_cost(shape, 4, [1] * batch, [10] * batch)
        read = layers * (attention + router + expected_experts(8, 2, batch) * expert) + 1000 * d
        small = layers * 2 * d + d                       # the norms
        assert cost.weight_bytes == pytest.approx(4 * (read + small + batch * d))   # + the gathered embeddings
        assert cost.linear_flops == 2 * batch * layers * (attention + router + 2 * expert)


def llama_cpp_order(hf):
    """The model with q and k rows in the order llama.cpp's llama converter writes them (pairs of
    each head's halves side by side, for its interleaved rotary): what a Mixtral GGUF holds."""
    c = hf.config
    heads = {"q_proj": c.num_attention_heads, "k_proj": c.num_key_value_heads}

    def permute(name, w):
        for proj, n in heads.items():
            if name.endswith(f"self_attn.{proj}.weight"):
                return w.reshape(n, 2, w.shape[0] // n // 2, w.shape[1]).transpose(1, 2).reshape(w.shape)
        return w

    class Permuted:
        config = c

        @staticmethod
        def state_dict():
            return {name: permute(name, w) for name, w in hf.state_dict().items()}
    return Permuted


def assert_llama_cpp_agrees(path, prompt: list[int], ours: torch.Tensor) -> None:
    """llama.cpp runs the same file to the same logits (within 2e-3 of the largest: its own
    arithmetic differs a little), so the file follows its converter's conventions."""
    import numpy as np
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=32, logits_all=True, verbose=False, n_threads=2)
    llm.eval(prompt)
    theirs = torch.tensor(np.array(llm.scores[:len(prompt)]))
    assert (theirs - ours).abs().max() <= 2e-3 * ours.abs().max()


@pytest.mark.parametrize("arch, variant", [("qwen3moe", "qwen3-moe"), ("llama", "mixtral")])
def test_a_gguf_runs_as_its_transformers_checkpoint(tmp_path, arch, variant):
    """Experts stacked as llama.cpp's converter writes them (blk.N.ffn_gate_exps, ffn_up_exps,
    ffn_down_exps, the router as ffn_gate_inp; expert_count, expert_used_count and, for Qwen3-MoE,
    expert_feed_forward_length in the metadata; Mixtral as the llama architecture, its q and k rows
    permuted): the same logits as transformers and as llama.cpp. At --dtype q8_0 each expert is quantized on its own,
    and the bytes a step reads count them so."""
    from backend.loaders.weights import bundled_gguf, load_model
    from backend.models.packed import QuantPanels, matrix_bytes
    from tests.fakes.gguf_files import write_gguf
    if bundled_gguf() is None:
        pytest.skip("the bundled model (whose tokenizer the file borrows) is not installed")
    hf, _, _ = reference_pair(variant)
    gguf_path = write_gguf(tmp_path / f"{arch}.gguf", arch, llama_cpp_order(hf) if arch == "llama" else hf,
                           bundled_gguf())
    loaded = load_model(str(gguf_path), "cpu", "float32")
    shape = loaded.shape
    assert (shape.num_experts, shape.experts_per_token, shape.intermediate_size, shape.norm_topk_prob) == {
        "qwen3-moe": (16, 4, 32, True), "mixtral": (8, 2, 96, True)}[variant]
    prompt = tokens(9, seed=3)
    with torch.inference_mode():
        expected = hf(torch.tensor([prompt])).logits[0]
    ours = run(loaded.model, shape, [(0, 0, prompt)], [], KVCache(shape, 1, 32, "cpu", torch.float32), all_rows=True)
    close(ours, expected)
    assert_llama_cpp_agrees(gguf_path, prompt, ours)
    from backend import kernels
    if kernels.load() is None or arch == "llama":
        return
    quantized = load_model(str(gguf_path), "cpu", "q8_0")
    layer = quantized.model.layers[1]
    assert all(isinstance(m, QuantPanels) for pair in moe.experts(layer) for m in pair)
    assert moe.expert_bytes(layer) == 3 * 32 * 64 * 34 / 32     # Q8_0: 34 bytes per 32 weights
    matrices = [m for lay in quantized.model.layers for m in (lay.qkv, lay.o, lay.router)
                + tuple(x for pair in moe.experts(lay) for x in pair)] + [quantized.model.packed_head]
    norms = sum(p.numel() * 4 for p in quantized.model.parameters() if p.ndim == 1)
    assert quantized.weight_bytes == sum(matrix_bytes(m) for m in matrices) + norms   # loaders/quant.py sees experts
    got = run(quantized.model, shape, [(0, 0, prompt)], [], KVCache(shape, 1, 32, "cpu", torch.float32))
    assert int(got[0].argmax()) == int(expected[-1].argmax())


def test_a_q8_0_gguf_from_llama_cpps_quantizer_runs_each_expert_as_stored(tmp_path):
    """llama.cpp's quantizer writes the stacked experts as Q8_0: at --dtype auto each expert's rows of
    blocks are packed as they are (not quantized again), and the logits are those of the same file
    dequantized to float32."""
    import ctypes
    lc = pytest.importorskip("llama_cpp")
    from backend import kernels
    from backend.loaders.weights import bundled_gguf, load_model
    from backend.models.packed import QuantPanels
    from tests.fakes.gguf_files import write_gguf
    if bundled_gguf() is None or kernels.load() is None:
        pytest.skip("needs the bundled model (whose tokenizer the file borrows) and the C kernels")
    hf, _, _ = reference_pair("qwen3-moe")
    f32 = write_gguf(tmp_path / "qwen3moe.gguf", "qwen3moe", hf, bundled_gguf())
    q8 = tmp_path / "qwen3moe.Q8_0.gguf"
    params = lc.llama_model_quantize_default_params()
    params.ftype, params.nthread = lc.LLAMA_FTYPE_MOSTLY_Q8_0, 2
    assert lc.llama_model_quantize(str(f32).encode(), str(q8).encode(), ctypes.byref(params)) == 0
    stored = load_model(str(q8), "cpu", "auto")
    assert "quantized" not in stored.source and "q8_0 as stored" in stored.source
    assert all(isinstance(m, QuantPanels) and m.fmt == "q8_0" for layer in stored.model.layers
               for pair in moe.experts(layer) for m in pair)
    floats = load_model(str(q8), "cpu", "float32")
    prompt = tokens(9, seed=3)
    shape = stored.shape
    got = run(stored.model, shape, [(0, 0, prompt)], [], KVCache(shape, 1, 32, "cpu", torch.float32), all_rows=True)
    close(got, run(floats.model, shape, [(0, 0, prompt)], [], KVCache(shape, 1, 32, "cpu", torch.float32),
                   all_rows=True))


def test_a_missing_expert_tensor_is_named_in_one_line(qwen3_moe_folder, tmp_path):
    from safetensors.torch import load_file, save_file
    from backend.loaders.weights import load_model
    folder = tmp_path / "cut"
    folder.mkdir()
    (folder / "config.json").write_text((qwen3_moe_folder / "config.json").read_text())
    tensors = load_file(qwen3_moe_folder / "model.safetensors")
    del tensors["model.layers.1.mlp.experts.13.up_proj.weight"]
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(InputError, match=r"model\.layers\.1\.mlp\.experts\.13\.up_proj\.weight") as info:
        load_model(str(folder), "cpu", "float32")
    assert "\n" not in str(info.value)


def test_a_gguf_missing_an_expert_tensor_is_named_in_one_line(tmp_path):
    from backend.loaders.weights import bundled_gguf, load_model
    from tests.fakes.gguf_files import write_gguf
    if bundled_gguf() is None:
        pytest.skip("the bundled model (whose tokenizer the file borrows) is not installed")
    hf, _, _ = reference_pair("olmoe")

    class Cut:   # the model without layer 0's stacked down projections
        config = hf.config

        @staticmethod
        def state_dict():
            return {k: v for k, v in hf.state_dict().items() if k != "model.layers.0.mlp.experts.down_proj"}
    path = write_gguf(tmp_path / "olmoe.gguf", "olmoe", Cut, bundled_gguf())
    with pytest.raises(InputError, match=r"model\.layers\.0\.mlp\.experts\.\d+\.down_proj\.weight") as info:
        load_model(str(path), "cpu", "float32")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("names, extra, words", [
    (["Qwen3MoeForCausalLM"], dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                   decoder_sparse_step=2), "dense MLP layers between the sparse ones"),
    (["Qwen3MoeForCausalLM"], dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                                   mlp_only_layers=[1]), "dense MLP layers between the sparse ones"),
    (["LlamaForCausalLM"], dict(num_experts=8), "num_experts = 8 is not implemented"),
    (["DeepseekV3ForCausalLM"], dict(n_routed_experts=8, kv_lora_rank=16), "DeepseekV3ForCausalLM is not supported"),
])
def test_what_is_not_implemented_is_refused_in_one_line(names, extra, words):
    config = dict(architectures=names, vocab_size=128, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, **extra)
    with pytest.raises(InputError, match=words) as info:
        shape_from_config(config, "some/config.json")
    assert "\n" not in str(info.value)


def test_run_writes_the_experts_and_bytes_of_each_step(qwen3_moe_folder, tmp_path):
    """`main.py run` on an MoE folder: steps.csv carries experts_touched and weight_bytes, each step's
    bytes the shared weights plus its touched experts, a prefill touching more than a decode step."""
    import csv
    from tests.cli.test_cli import cli
    proc = cli("run", "--model", str(qwen3_moe_folder), "--prompt-len", "12", "--output-len", "4", "--batch", "2",
               "--ignore-eos", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert " of 16 experts a layer read, " in proc.stdout   # the decode line: not "every weight read"
    with open(tmp_path / "steps.csv") as f:
        steps = list(csv.DictReader(f))
    total = json.loads((tmp_path / "run.json").read_text())["info"]["weight_bytes"]   # the whole model's
    expert = 3 * 64 * 32 * 4
    every = 2 * 16 * expert + 49152 * 64 * 4   # every expert, and the embedding table a step gathers rows of
    assert len(steps) == 4 and steps[0]["phase"] == "prefill"
    for step in steps:
        touched = int(step["experts_touched"])
        assert 2 * 4 <= touched <= 2 * 16
        assert int(step["weight_bytes"]) == total - every + touched * expert
    assert int(steps[0]["experts_touched"]) > max(int(s["experts_touched"]) for s in steps[1:])
    from backend.results.export import read_run
    back = read_run(tmp_path).steps
    assert [(s.experts_touched, s.weight_bytes) for s in back] == [
        (int(s["experts_touched"]), int(s["weight_bytes"])) for s in steps]



def test_sweep_batch_on_an_moe_shows_the_weights_a_step_reads_rising_with_the_batch(qwen3_moe_folder, tmp_path):
    """`sweep batch`: each point's measured and predicted weight bytes (sweep.csv and the table), and the
    summary line an MoE gets: more tokens in a step touch more experts, so a step reads more."""
    import csv
    from tests.cli.test_cli import cli
    proc = cli("sweep", "batch", "--model", str(qwen3_moe_folder), "--batches", "1,16", "--context", "16",
               "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    read = [float(r["weight_bytes"]) for r in rows]
    predicted = [float(r["predicted_weight_bytes"]) for r in rows]
    assert read[1] > read[0] and predicted[1] > predicted[0]
    assert read[0] == pytest.approx(predicted[0], rel=0.05)   # one token: exactly k experts a layer
    assert "mixture of experts (4 of 16 experts a token): a decode step read" in proc.stdout
