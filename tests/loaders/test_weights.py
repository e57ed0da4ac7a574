"""Loaders: the bundled GGUF answers a question, HF folders match transformers, every bad input says why."""
import json

import pytest
import torch

from backend.loaders import weights
from backend.errors import InputError
from backend.models import KVCache, make_step_batch
from backend.loaders.weights import bundled_gguf, list_models, load_model


def greedy(loaded, prompt: list[int], steps: int) -> list[int]:
    cache = KVCache(loaded.shape, 1, len(prompt) + steps, loaded.device, loaded.dtype)
    out: list[int] = []
    with torch.inference_mode():
        logits = loaded.model(make_step_batch([(0, 0, prompt)], [], loaded.device), cache)
        for pos in range(len(prompt), len(prompt) + steps):
            out.append(int(logits[-1].argmax()))
            if out[-1] in loaded.tokenizer.eos_ids:
                break
            logits = loaded.model(make_step_batch([], [(0, pos, out[-1])], loaded.device), cache)
    return out


def test_bundled_smollm2_loads_with_its_shape(smollm2):
    s = smollm2.shape
    assert (s.arch, s.num_layers, s.hidden_size, s.num_heads, s.num_kv_heads) == ("llama", 30, 576, 9, 3)
    assert (s.intermediate_size, s.vocab_size, s.tie_embeddings, s.rope_theta) == (1536, 49152, True, 100000.0)
    assert s.num_params() == sum(p.numel() for p in smollm2.model.parameters())
    assert smollm2.weight_bytes == 4 * s.num_params() and not smollm2.random_weights
    assert not smollm2.model.training


def test_bundled_smollm2_knows_the_capital_of_france(smollm2):
    prompt = smollm2.tokenizer.apply_chat_template("What is the capital of France?")
    answer = smollm2.tokenizer.decode(greedy(smollm2, prompt, 24))
    assert "Paris" in answer, answer


def test_synthetic_tiny_has_random_weights_and_byte_tokens():
    loaded = load_model("tiny", device="cpu", dtype="bfloat16")
    assert loaded.random_weights and loaded.dtype == torch.bfloat16
    assert all(p.dtype == torch.bfloat16 for p in loaded.model.parameters())
    assert len(greedy(loaded, loaded.tokenizer.encode("hello"), 5)) == 5  # random text, but it runs
    std = loaded.model.layers[0].qkv.float().std().item()
    assert 0.015 < std < 0.025
    assert loaded.model.layers[0].attn_norm.float().eq(1).all()


def test_synthetic_shape_too_big_for_memory_says_how_much(monkeypatch):
    monkeypatch.setattr(weights, "free_memory", lambda device: 2 * 2**30)
    with pytest.raises(InputError, match=r"llama-8b needs 29\.9 GiB .* only 2\.0 GiB is free"):
        load_model("llama-8b", device="cpu", dtype="float32")


def test_list_models_names_the_bundled_and_synthetic_shapes():
    infos = {m.name: m for m in list_models()}
    assert set(infos) == {"smollm2-135m", "tiny", "gpt2-124m", "llama-1b", "llama-8b"}
    assert infos["llama-8b"].params > 8_000_000_000 and infos["gpt2-124m"].arch == "gpt2"
    assert infos["llama-1b"].bytes_bf16 * 2 == infos["llama-1b"].bytes_fp32


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_hf_folder_matches_transformers(tmp_path, arch):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if arch == "llama":
        config = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=64)
        hf = transformers.LlamaForCausalLM(config).eval()
    else:
        config = transformers.GPT2Config(vocab_size=96, n_positions=64, n_embd=32, n_layer=2, n_head=4)
        hf = transformers.GPT2LMHeadModel(config).eval()
    hf.save_pretrained(tmp_path)
    loaded = load_model(str(tmp_path), device="cpu", dtype="float32")
    assert loaded.shape.arch == arch and "safetensors" in loaded.source
    prompt = [3, 14, 15, 92, 65, 35]
    with torch.inference_mode():
        expected = hf(torch.tensor([prompt])).logits[0, -1]
        got = loaded.model(make_step_batch([(0, 0, prompt)], [], "cpu"), KVCache(loaded.shape, 1, 8, "cpu", torch.float32))
    torch.testing.assert_close(got[0], expected, atol=1e-4, rtol=1e-4)


def write_config(folder, **config):
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_truncated_gguf_names_the_file(tmp_path):
    path = tmp_path / "cut.gguf"
    with open(bundled_gguf(), "rb") as f:
        path.write_bytes(f.read(1 << 20))
    with pytest.raises(InputError, match=r"cut\.gguf"):
        load_model(str(path), device="cpu")


def test_truncated_safetensors_names_the_file(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=96, n_positions=64, n_embd=32, n_layer=1, n_head=4)
    transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path)
    weights_file = tmp_path / "model.safetensors"
    weights_file.write_bytes(weights_file.read_bytes()[:5000])
    with pytest.raises(InputError, match=r"model\.safetensors"):
        load_model(str(tmp_path), device="cpu")


@pytest.mark.parametrize("case, pattern", [
    ("no-config", r"no config\.json"),
    ("bert", r"BertModel is not supported; supported: LlamaForCausalLM"),
    ("unknown-name", r"unknown model 'no-such-model'; known: smollm2-135m, tiny"),
    ("missing-path", r"no such file or folder"),
    ("offline-hub", r"cannot download phasescope-test/does-not-exist: offline"),
])
def test_bad_inputs_say_why(tmp_path, monkeypatch, case, pattern):
    if case == "no-config":
        (tmp_path / "empty").mkdir()
        name = str(tmp_path / "empty")
    elif case == "bert":
        name = str(write_config(tmp_path / "bert", architectures=["BertModel"], hidden_size=8))
    elif case == "unknown-name":
        name = "no-such-model"
    elif case == "missing-path":
        name = str(tmp_path / "missing.gguf")
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # never touch the network in tests
        name = "phasescope-test/does-not-exist"
    with pytest.raises(InputError, match=pattern) as info:
        load_model(name, device="cpu")
    assert "\n" not in str(info.value)


LLAMA_32_1B = {"architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "intermediate_size": 8192,
               "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
               "max_position_embeddings": 131072, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
               "tie_word_embeddings": True, "hidden_act": "silu", "head_dim": 64,
               "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
LLAMA_31_70B = dict(LLAMA_32_1B, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                    num_attention_heads=64, head_dim=128, tie_word_embeddings=False)


def test_a_config_json_names_a_shape_that_runs_with_random_weights(tmp_path):
    small = dict(LLAMA_32_1B, architectures=["Qwen3ForCausalLM"], hidden_size=64, intermediate_size=128,
                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=256,
                 rope_scaling=None)
    path = write_config(tmp_path / "qwen3-small", **small) / "config.json"
    loaded = load_model(str(path), "cpu", "float32")
    assert loaded.name == "qwen3-small" and loaded.random_weights and loaded.shape.qk_norm
    assert "random weights" in loaded.source and str(path) in loaded.source
    from backend.config import BatchRun, EngineConfig, ModelChoice, RunConfig, SamplingConfig
    from backend.session import execute
    config = RunConfig(mode="batch", model=ModelChoice(str(path), "cpu", "float32"),
                       sampling=SamplingConfig(ignore_eos=True), engine=EngineConfig(policy="static"),
                       batch=BatchRun(prompt_len=8, output_len=3))
    finished = execute(config, lambda e: None, lambda: False)
    assert finished.error is None and finished.summary.num_finished == 1


def test_the_simulator_prices_a_model_named_by_its_config_and_refuses_one_too_big_for_the_gpu(tmp_path):
    from backend.config import BatchRun, EngineConfig, ModelChoice, RunConfig
    from backend.errors import InputError
    from backend.session import execute
    one_b = write_config(tmp_path / "Llama-3.2-1B", **LLAMA_32_1B) / "config.json"
    config = RunConfig(mode="batch", model=ModelChoice(str(one_b)), profile="h100-sxm", simulate=True,
                       engine=EngineConfig(policy="static"), batch=BatchRun(prompt_len=512, output_len=16))
    finished = execute(config, lambda e: None, lambda: False)
    assert finished.data.info.num_params == pytest.approx(1.236e9, rel=0.01)   # Llama 3.2 1B's 1.24 B
    seventy = write_config(tmp_path / "Llama-3.1-70B", **LLAMA_31_70B) / "config.json"
    config.model = ModelChoice(str(seventy))
    with pytest.raises(InputError, match="need 14[0-9].[0-9] GB; h100-sxm has 80 GB"):
        execute(config, lambda e: None, lambda: False)   # 70.6 B bf16 weights on one 80 GB GPU


def test_a_bad_config_file_is_one_line(tmp_path):
    from backend.errors import InputError
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not a readable config.json"):
        load_model(str(bad), "cpu", "float32")
    with pytest.raises(InputError, match="no such config file"):
        load_model(str(tmp_path / "missing.json"), "cpu", "float32")


def test_a_hub_id_whose_config_alone_is_cached_names_its_shape(tmp_path, monkeypatch):
    """Only config.json in the Hugging Face cache (the layout huggingface_hub writes): the hub id is
    a shape with random weights for `run` and the simulator; with weights cached it is a checkpoint."""
    from backend.errors import InputError
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = tmp_path / "hub" / "models--meta-llama--Llama-3.2-1B" / "snapshots" / "0123abc"
    snapshot.parent.mkdir(parents=True)
    write_config(snapshot, **LLAMA_32_1B)
    refs = snapshot.parent.parent / "refs"
    refs.mkdir()
    (refs / "main").write_text("0123abc")
    shape, _ = weights.config_shape("meta-llama/Llama-3.2-1B")
    assert (shape.num_layers, shape.hidden_size) == (16, 2048)
    from backend.config import BatchRun, EngineConfig, ModelChoice, RunConfig
    from backend.session import execute
    config = RunConfig(mode="batch", model=ModelChoice("meta-llama/Llama-3.2-1B"), profile="h100-sxm", simulate=True,
                       engine=EngineConfig(policy="static"), batch=BatchRun(prompt_len=128, output_len=4))
    finished = execute(config, lambda e: None, lambda: False)
    assert finished.data.info.num_params == pytest.approx(1.236e9, rel=0.01)
    (snapshot / "model.safetensors").write_bytes(b"")   # weights cached: no longer a bare shape
    assert weights.config_shape("meta-llama/Llama-3.2-1B") is None
    with pytest.raises(InputError):
        weights.load_model("meta-llama/Llama-3.2-1B", "cpu", "float32")


@pytest.mark.skipif(bundled_gguf() is None, reason="needs the bundled model")
def test_a_packed_load_never_dequantizes_what_it_packs_as_stored(monkeypatch):
    """The bundled Q4_1 file at --dtype auto: its layers run as the file's blocks, so only the tensors
    a step reads as floats (the Q8_0 embedding, the F32 norms) are dequantized; the model answers
    exactly as one loaded with every tensor dequantized; a float32 load still reads every tensor."""
    import gguf.quants
    from backend.kernels import ops
    from backend.loaders import quant
    if not ops.usable(torch.device("cpu"), torch.float32):
        pytest.skip("needs the C kernels")
    read = []
    real = gguf.quants.dequantize
    monkeypatch.setattr(gguf.quants, "dequantize", lambda data, kind: read.append(kind.name) or real(data, kind))
    packed = load_model("smollm2-135m", "cpu", "auto")
    assert "Q4_1" not in read and read.count("Q8_0") == 1 and set(read) == {"Q8_0", "F32"}
    read.clear()
    floats = load_model("smollm2-135m", "cpu", "float32")
    assert read.count("Q4_1") == 7 * 30 and floats.precision.name == "float32"   # q, k, v, o, gate, up, down
    del floats
    monkeypatch.setattr(quant, "floats_unused", lambda *args: set())
    every = load_model("smollm2-135m", "cpu", "auto")
    prompt = packed.tokenizer.apply_chat_template("What is the capital of France?")
    assert greedy(packed, prompt, 12) == greedy(every, prompt, 12)
    with torch.inference_mode():
        batch = make_step_batch([(0, 0, prompt)], [], packed.device)
        logits = [m.model(batch, KVCache(m.shape, 1, len(prompt), m.device, m.dtype)) for m in (packed, every)]
    assert torch.equal(*logits)
