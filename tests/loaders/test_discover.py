"""`models --local`: the models on this disk, found where the tools users run keep them (fake homes
of real small files: a safetensors folder, GGUFs, an Ollama manifest and blob), and whether each runs."""
import subprocess
import sys
from pathlib import Path

import pytest

from backend.loaders import discover
from tests.fakes.model_homes import SMALL, homes  # noqa: F401

transformers = pytest.importorskip("transformers")
ROOT = Path(__file__).resolve().parents[2]


def test_the_models_on_the_disk_are_found_with_what_they_are_and_whether_they_run(homes):
    found = {m.name: m for m in discover.find_models(free_bytes=10**12)}
    assert set(found) == {"someone/tiny-llama", "pub/qwen3-tiny-GGUF/qwen3-tiny-F32.gguf", "qwen3-tiny:latest",
                          "deepseek-tiny.gguf", "starcoder-tiny"}, found.keys()
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
    starcoder = found["starcoder-tiny"]
    assert (starcoder.where, starcoder.format) == ("added folder", "safetensors BF16")
    assert starcoder.reason == "architecture Starcoder2ForCausalLM is not supported yet" and not starcoder.runs
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
