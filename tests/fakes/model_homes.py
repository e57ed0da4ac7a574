"""A fake home with models where the tools users run keep them: real small files (a safetensors
folder in the Hugging Face cache, GGUFs in LM Studio's folder and llama.cpp's cache, an Ollama
manifest and blob, an added folder), for `models --local` and the window's model list."""
import json
import shutil
from pathlib import Path

import pytest
import torch

from backend.loaders import discover

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=256, rms_norm_eps=1e-5)


_TEMPLATE: list[Path] = []   # the home's files, written once per test process (see homes)
FOLDERS = {"HOME": "home", "HF_HUB_CACHE": "hf", "OLLAMA_MODELS": "ollama", "LLAMA_CACHE": "llamacpp",
           "PHASESCOPE_CONFIG_DIR": "config"}


@pytest.fixture
def homes(tmp_path, monkeypatch, tmp_path_factory):
    """A home with models in the Hugging Face cache, LM Studio, Ollama, llama.cpp's cache and an added folder.

    The files are written once per test process (building the models is most of a test's time) and
    copied into each test's own folder, which the test may change as it likes."""
    pytest.importorskip("transformers")
    from backend.loaders.weights import bundled_gguf
    if bundled_gguf() is None:
        pytest.skip("the bundled model (whose tokenizer the GGUFs borrow) is not installed")
    if not _TEMPLATE:
        _TEMPLATE.append(_write_home(tmp_path_factory.mktemp("model-homes")))
    shutil.copytree(_TEMPLATE[0], tmp_path, dirs_exist_ok=True)
    env = {key: tmp_path / name for key, name in FOLDERS.items()}
    for key, value in env.items():
        value.mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(key, str(value))
    discover.add_folder(str(tmp_path / "mine"))   # into this test's configuration folder
    return env


def _write_home(base: Path) -> Path:
    import gguf
    import transformers
    from safetensors.torch import save_file
    from backend.loaders.weights import bundled_gguf
    from tests.fakes.gguf_files import write_gguf
    env = {key: base / name for key, name in FOLDERS.items()}
    for value in env.values():
        value.mkdir(parents=True, exist_ok=True)
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
    mine = base / "mine" / "starcoder-tiny"
    mine.mkdir(parents=True)
    (mine / "config.json").write_text(json.dumps({"architectures": ["Starcoder2ForCausalLM"], "vocab_size": 128, **SMALL}))
    save_file({"model.embed_tokens.weight": torch.zeros(128, 64, dtype=torch.bfloat16)}, str(mine / "model.safetensors"))
    return base
