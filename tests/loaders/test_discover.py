"""`models --local`: the models on this disk, found where the tools users run keep them (fake homes
of real small files: a safetensors folder, GGUFs, an Ollama manifest and blob), and whether each runs."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from backend.loaders import discover

transformers = pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=256, rms_norm_eps=1e-5)


@pytest.fixture
def homes(tmp_path, monkeypatch):
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
        value.mkdir(parents=True)
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
    # an added folder: a Gemma 2 config (not run yet) beside its weights
    mine = tmp_path / "mine" / "gemma-tiny"
    mine.mkdir(parents=True)
    (mine / "config.json").write_text(json.dumps({"architectures": ["Gemma2ForCausalLM"], "vocab_size": 128, **SMALL}))
    save_file({"model.embed_tokens.weight": torch.zeros(128, 64, dtype=torch.bfloat16)}, str(mine / "model.safetensors"))
    discover.add_folder(str(tmp_path / "mine"))
    return env


def test_the_models_on_the_disk_are_found_with_what_they_are_and_whether_they_run(homes):
    found = {m.name: m for m in discover.find_models(free_bytes=10**12)}
    assert set(found) == {"someone/tiny-llama", "pub/qwen3-tiny-GGUF/qwen3-tiny-F32.gguf", "qwen3-tiny:latest",
                          "deepseek-tiny.gguf", "gemma-tiny"}, found.keys()
    llama = found["someone/tiny-llama"]
    assert (llama.where, llama.arch, llama.format, llama.runs) == ("Hugging Face cache", "LlamaForCausalLM",
                                                                   "safetensors F32", True)
    assert llama.params == sum(p.numel() for p in transformers.LlamaForCausalLM(
        transformers.LlamaConfig(vocab_size=128, **SMALL)).parameters())
    assert llama.bits_per_weight == 32.0 and llama.fits
    ollama = found["qwen3-tiny:latest"]
    assert (ollama.where, ollama.arch, ollama.format, ollama.runs) == ("Ollama", "qwen3", "GGUF F32", True)
    assert found["pub/qwen3-tiny-GGUF/qwen3-tiny-F32.gguf"].where == "LM Studio"
    assert found["deepseek-tiny.gguf"].reason == "architecture deepseek2 is not supported yet"
    gemma = found["gemma-tiny"]
    assert (gemma.where, gemma.format) == ("added folder", "safetensors BF16")
    assert gemma.reason == "architecture Gemma2ForCausalLM is not supported yet" and not gemma.runs
    assert not discover.find_models(free_bytes=1)[0].fits   # nothing fits in one byte


def test_a_found_model_runs_from_the_path_listed(homes):
    from backend.loaders.weights import load_model
    ollama = next(m for m in discover.find_models() if m.where == "Ollama")
    loaded = load_model(ollama.path, "cpu", "float32")   # an Ollama blob: a GGUF without the suffix
    assert loaded.shape.qk_norm and loaded.shape.num_layers == 2


def test_models_local_prints_the_table(homes):
    import os
    done = subprocess.run([sys.executable, "main.py", "models", "--local"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["model", "where", "arch", "params"]
    assert any("deepseek-tiny.gguf" in line and "no: architecture deepseek2 is not supported yet" in line for line in lines)
    assert any(line.startswith("qwen3-tiny:latest") and " yes" in line for line in lines)
    bad = subprocess.run([sys.executable, "main.py", "models", "--add-folder", "/no/such/folder"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip() == "error: /no/such/folder: not a folder"
