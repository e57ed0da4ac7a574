"""The local engine's memory check: what a runner allocates (the allocator's figures injected, so it is
tested on the CPU), the free figure with the caching allocator's unused blocks, and an out-of-memory
error while building or warming up a runner refused in one line. The tests named *cuda* need a GPU."""
from types import SimpleNamespace

import pytest
import torch

import backend.loaders.weights as weights
from backend.config import SamplingConfig
from backend.engine import runner as runner_module
from backend.engine.memory_fit import CUDA_HEADROOM, MASK_ALIGN, aligned, runner_memory, shortfall
from backend.errors import DoesNotFit
from backend.loaders.weights import cuda_free_bytes, load_model
from backend.models.shapes import SHAPES
from backend.targets.local import check_kv_fits

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
LLAMA_1B = SHAPES["llama-1b"]
GiB = 2**30


def test_the_free_figure_adds_what_the_allocator_holds_unused():
    # a first runner released 6 GiB to torch's caching allocator: the driver no longer counts it free
    assert cuda_free_bytes(driver_free=2 * GiB, reserved=7 * GiB, allocated=1 * GiB) == 8 * GiB
    assert cuda_free_bytes(driver_free=2 * GiB, reserved=0, allocated=0) == 2 * GiB
    assert cuda_free_bytes(driver_free=2 * GiB, reserved=1 * GiB, allocated=1 * GiB) == 2 * GiB


def test_the_cache_is_counted_as_the_graph_runner_allocates_it():
    per_token = LLAMA_1B.kv_bytes_per_token(2)
    plain = runner_memory(LLAMA_1B, 8, 1000, 2, "cuda", graphs=False, step_tokens=512)
    graphs = runner_memory(LLAMA_1B, 8, 1000, 2, "cuda", graphs=True, step_tokens=512)
    assert plain.kv == 8 * 1008 * per_token and plain.graph_pool == 0   # whole blocks of 16 tokens
    assert aligned(1000) == 1008 and aligned(1008) == 1008 and 1008 % MASK_ALIGN == 0
    assert graphs.kv == 9 * 1008 * per_token       # the scratch slot, the aligned length
    assert graphs.graph_pool > 0 and graphs.total > plain.total
    assert plain.logits == 8 * LLAMA_1B.vocab_size * 4 and plain.headroom == CUDA_HEADROOM
    assert plain.workspace > runner_memory(LLAMA_1B, 8, 1000, 2, "cuda", False, 16).workspace
    assert graphs.describe().startswith("KV cache ") and "CUDA graphs" in graphs.describe()


def test_off_cuda_only_the_cache_is_counted():
    need = runner_memory(LLAMA_1B, 8, 1000, 4, "cpu", graphs=False, step_tokens=512)
    assert need.total == need.kv == 8 * 1008 * LLAMA_1B.kv_bytes_per_token(4)   # whole blocks of 16 tokens
    assert not shortfall(need, None) and shortfall(need, need.kv - 1) and not shortfall(need, need.kv)


def fake_loaded(device: str, shape=LLAMA_1B, dtype=torch.bfloat16):
    return SimpleNamespace(device=torch.device(device), shape=shape, dtype=dtype)


def test_a_cuda_fit_counts_more_than_the_cache_and_names_the_parts(monkeypatch):
    need = runner_memory(LLAMA_1B, 16, 2048, 2, "cuda", graphs=True, step_tokens=512)
    cache_alone = 16 * 2048 * LLAMA_1B.kv_bytes_per_token(2)
    monkeypatch.setattr(weights, "free_memory", lambda device: cache_alone + 2**20)   # the old check passed this
    with pytest.raises(DoesNotFit) as refused:
        check_kv_fits(fake_loaded("cuda"), 16, 2048, 512)
    line = str(refused.value)
    assert "\n" not in line and f"needs {need.total / GiB:,.2f} GiB (KV cache " in line
    assert "headroom 0.50 GiB" in line and "is free on cuda" in line
    monkeypatch.setattr(weights, "free_memory", lambda device: need.total)
    check_kv_fits(fake_loaded("cuda"), 16, 2048, 512)   # exactly enough: no refusal


def test_a_second_runner_fits_in_what_the_first_left_to_the_allocator(monkeypatch):
    """The device after a first runner was dropped: its memory is reserved by torch, not free to the driver."""
    need = runner_memory(LLAMA_1B, 16, 2048, 2, "cuda", graphs=True, step_tokens=512)
    figures = SimpleNamespace(driver_free=need.total // 4, reserved=need.total, allocated=0)
    monkeypatch.setattr(weights, "free_memory",
                        lambda device: cuda_free_bytes(figures.driver_free, figures.reserved, figures.allocated))
    check_kv_fits(fake_loaded("cuda"), 16, 2048, 512)
    figures.allocated = figures.reserved    # the first runner still alive: now it does not fit
    with pytest.raises(DoesNotFit):
        check_kv_fits(fake_loaded("cuda"), 16, 2048, 512)


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny", device="cpu", dtype="float32")


@pytest.mark.parametrize("stage", ["build", "warmup"])
def test_out_of_memory_while_building_or_warming_up_is_one_line(tiny, monkeypatch, stage):
    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")
    if stage == "build":
        monkeypatch.setattr(runner_module, "KVCache", out_of_memory)
    else:
        monkeypatch.setattr(runner_module.Runner, "warmup", out_of_memory)
    with pytest.raises(DoesNotFit) as refused:
        runner_module.build_runner(tiny, 2, 64, SamplingConfig())
    line = str(refused.value)
    where = "allocating the KV cache" if stage == "build" else "warming up"
    assert line == (f"out of memory on cpu while {where} for 2 sequences of 64 tokens (CUDA out of memory. "
                    f"Tried to allocate 2.00 GiB): lower the batch size or the lengths")


def test_other_errors_while_building_are_not_called_out_of_memory(tiny, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("not a memory problem")
    monkeypatch.setattr(runner_module.Runner, "warmup", broken)
    with pytest.raises(ValueError, match="not a memory problem"):
        runner_module.build_runner(tiny, 2, 64, SamplingConfig())


# ---- on a GPU --------------------------------------------------------------------------------------

@requires_cuda
def test_cuda_a_second_runner_fits_after_the_first_is_dropped():
    """A runner at 60% of the free memory, dropped, then a second one: the fit check must pass."""
    loaded = load_model("tiny", device="cuda", dtype="float32")
    per_slot = 2048 * loaded.shape.kv_bytes_per_token(4)
    slots = max(1, int(0.6 * weights.free_memory(loaded.device)) // per_slot)
    first = runner_module.build_runner(loaded, slots, 2048, SamplingConfig(), use_cuda_graphs=False)
    del first
    check_kv_fits(loaded, slots, 2048, 16)   # the allocator's unused blocks count as free
    second = runner_module.build_runner(loaded, slots, 2048, SamplingConfig(), use_cuda_graphs=False)
    assert second.cache.num_slots == slots


@requires_cuda
def test_cuda_an_oversized_batch_is_refused_in_one_line():
    loaded = load_model("tiny", device="cuda", dtype="float32")
    free = weights.free_memory(loaded.device)
    slots = 2 * free // (2048 * loaded.shape.kv_bytes_per_token(4)) + 1
    with pytest.raises(DoesNotFit) as refused:
        check_kv_fits(loaded, slots, 2048, 16)
    assert "\n" not in str(refused.value) and "lower the batch size" in str(refused.value)
