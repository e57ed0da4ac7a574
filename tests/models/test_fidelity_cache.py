"""The bfloat16 fidelity probe's verdict is kept per model file and arithmetic, and the next start
of the same model reads it instead of probing again; anything else about the weights probes anew."""
import os

import pytest

from backend.kernels import matmath
from backend.models import fidelity, fidelity_cache

UNIT, WHY_NO_UNIT = matmath.bf16_unit()


def test_a_verdict_is_kept_and_read_back_and_an_unreadable_file_is_no_verdict(tmp_path):
    found = {"kl_mean": 0.0002, "kl_max": 0.003, "top1": 0.99, "tokens": 96}
    assert fidelity_cache.recall("k1", tmp_path) is None            # nothing kept yet
    fidelity_cache.remember("k1", found, tmp_path)
    assert fidelity_cache.recall("k1", tmp_path) == found
    assert fidelity_cache.recall("k2", tmp_path) is None
    (tmp_path / fidelity_cache.FILE).write_text("{not json")
    assert fidelity_cache.recall("k1", tmp_path) is None            # probes again, and writes a fresh file
    fidelity_cache.remember("k1", found, tmp_path)
    assert fidelity_cache.recall("k1", tmp_path) == found


def test_the_oldest_verdicts_go_first(tmp_path):
    for i in range(fidelity_cache.MAX_ENTRIES + 3):
        fidelity_cache.remember(f"k{i}", {"tokens": i}, tmp_path)
    assert fidelity_cache.recall("k0", tmp_path) is None and fidelity_cache.recall("k2", tmp_path) is None
    assert fidelity_cache.recall(f"k{fidelity_cache.MAX_ENTRIES + 2}", tmp_path) == {
        "tokens": fidelity_cache.MAX_ENTRIES + 2}


def test_the_key_follows_the_weights_their_format_the_unit_and_the_kernels_build():
    key = fidelity_cache.key_of("m.gguf:1000:1", "q4_1", "AMX", "build-1", 96)
    assert key == fidelity_cache.key_of("m.gguf:1000:1", "q4_1", "AMX", "build-1", 96)
    others = [fidelity_cache.key_of("m.gguf:1000:2", "q4_1", "AMX", "build-1", 96),   # the file rewritten
              fidelity_cache.key_of("m.gguf:1000:1", "q8_0", "AMX", "build-1", 96),
              fidelity_cache.key_of("m.gguf:1000:1", "q4_1", "AVX512-BF16", "build-1", 96),
              fidelity_cache.key_of("m.gguf:1000:1", "q4_1", "AMX", "build-2", 96),
              fidelity_cache.key_of("m.gguf:1000:1", "q4_1", "AMX", "build-1", 64)]
    assert key not in others and len(set(others)) == 5


def test_the_weights_identity_is_their_files_size_and_time_or_the_source_of_random_ones(tmp_path):
    from types import SimpleNamespace
    from backend.loaders.cache import weights_identity
    weights = tmp_path / "m.gguf"
    weights.write_bytes(b"GGUF" + b"\0" * 60)
    random = SimpleNamespace(source="random weights (seed 0), synthetic shape llama-1b")
    first = weights_identity(str(weights), random)
    assert first.startswith(f"{weights.resolve()}:64:")
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))   # the file was rewritten
    assert weights_identity(str(weights), random) != first
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "model-00001.safetensors").write_bytes(b"x" * 10)
    (folder / "model-00002.safetensors").write_bytes(b"y" * 20)
    assert weights_identity(str(folder), random).count(".safetensors:") == 2
    assert weights_identity("llama-1b", random) == random.source      # no file: the source string


@pytest.mark.skipif(UNIT is None, reason=f"no bfloat16 unit here: {WHY_NO_UNIT}")
def test_the_second_choice_on_the_same_model_reads_the_kept_verdict(smollm2, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    said = []
    weights = "the bundled file:1:1"
    first = fidelity.choose(smollm2, "auto", weights, said.append)
    assert said == [f"probing bfloat16 fidelity on {UNIT} ({fidelity.PROBE_TOKENS} tokens; once per model file)"]
    assert (tmp_path / "phasescope" / fidelity_cache.FILE).is_file()
    said.clear()
    second = fidelity.choose(smollm2, "auto", weights, said.append)
    assert said == [f"bfloat16 fidelity on {UNIT}: kept from an earlier start"]
    assert second == first and second.fidelity.tokens == fidelity.PROBE_TOKENS
    said.clear()
    fidelity.choose(smollm2, "auto", None, said.append)    # no weights' identity to key on: probes every time
    assert said[0].startswith("probing")
