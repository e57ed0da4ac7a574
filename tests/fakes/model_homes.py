"""A fake home with models where the tools users run keep them: real small files (a safetensors
folder in the Hugging Face cache, GGUFs in LM Studio's folder and llama.cpp's cache, an Ollama
manifest and blob, an added folder), for `models --local` and the window's model list."""
import json

import pytest
import torch

from backend.loaders import discover

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=256, rms_norm_eps=1e-5)


@pytest.fixture
def homes(tmp_path, monkeypatch):
    transformers = pytest.importorskip("transformers")
    """A home with models in the Hugging Face cache, LM Studio, Ollama, llama.cpp's cache and an added folder."""
    import gguf
    from safetensors.torch import save_file
    from backend.loaders.weights import bundled_gguf
    from tests.fakes.gguf_files import write_gguf
    if bundled_gguf() is None:
        pytest.skip("the bundled model (whose tokenizer the GGUFs borrow) is not installed")
    env = {"HOME": tmp_path / "home", "HF_HUB_CACHE": tmp_path / "hf", "OLLAMA_MODELS": tmp_path / "ollama",
           "LLAMA_CACHE": tmp_path / "llamacpp", "PHASESCOPE_CONFIG_DIR": tmp_path / "config"}
    for key, value in env.items():
        value.mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(key, str(value))
    torch.manual_seed(0)
    # the Hugging Face cache: a Llama snapshot with its safetensors
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(vocab_size=128, **SMALL)).eval()
    snapshot = env["HF_HUB_CACHE"] / "models--someone--tiny-llama" / "snapshots" / "abc123"
    llama.save_pretrained(snapshot, safe_serialization=True)
    # Ollama: a manifest naming its model layer's blob, a Qwen3 GGUF without a suffix
    qwen3 = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(
        vocab_size=49152, head_dim=32, tie_word_embeddings=True, **SMALL)).eval()
    blobs = env["OLLAMA_MODELS"] / "blobs"
    blobs.mkdir()
    write_gguf(blobs / "sha256-0123abcd", "qwen3", qwen3, bundled_gguf())
    manifest = env["OLLAMA_MODELS"] / "manifests" / "registry.ollama.ai" / "library" / "qwen3-tiny" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:ff"},
                                               {"mediaType": discover.OLLAMA_MODEL_LAYER, "digest": "sha256:0123abcd"}]}))
    # LM Studio: the same Qwen3 file under PUBLISHER/REPO
    studio = env["HOME"] / ".lmstudio" / "models" / "pub" / "qwen3-tiny-GGUF"
    studio.mkdir(parents=True)
    (studio / "qwen3-tiny-F32.gguf").write_bytes((blobs / "sha256-0123abcd").read_bytes())
    # llama.cpp's cache: an architecture this engine does not run
    w = gguf.GGUFWriter(str(env["LLAMA_CACHE"] / "deepseek-tiny.gguf"), "deepseek2")
    w.add_tensor("token_embd.weight", torch.zeros(16, 8).numpy())
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    # an added folder: a StarCoder2 config (an architecture not run here) beside its weights
    mine = tmp_path / "mine" / "starcoder-tiny"
    mine.mkdir(parents=True)
    (mine / "config.json").write_text(json.dumps({"architectures": ["Starcoder2ForCausalLM"], "vocab_size": 128, **SMALL}))
    save_file({"model.embed_tokens.weight": torch.zeros(128, 64, dtype=torch.bfloat16)}, str(mine / "model.safetensors"))
    discover.add_folder(str(tmp_path / "mine"))
    return env


