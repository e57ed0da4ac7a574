"""Device and dtype choice: auto picks what exists, the rest is refused in one line."""
import pytest
import torch

from backend.loaders.device import (available_devices, available_dtypes, device_name, dtype_name, resolve_device,
                            resolve_dtype, run_dtype_name, synchronize)
from backend.errors import InputError


def test_auto_and_cpu():
    cpu = resolve_device("cpu")
    assert cpu.type == "cpu" and "cpu" in available_devices()
    assert resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype("bf16", cpu) == torch.bfloat16 and dtype_name(torch.bfloat16) == "bfloat16"
    assert set(available_dtypes(cpu)) == {"float32", "bfloat16", "float16"}
    assert device_name(cpu)
    synchronize(cpu)
    if not torch.cuda.is_available():
        assert resolve_device("auto").type in ("cpu", "mps")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_missing_cuda_is_an_input_error():
    with pytest.raises(InputError, match="'cuda:1' is not available"):
        resolve_device("cuda:1")


def test_unknown_names_are_input_errors():
    with pytest.raises(InputError, match="unknown device 'tpu'"):
        resolve_device("tpu")
    with pytest.raises(InputError, match="unknown dtype 'float64'"):
        resolve_dtype("float64", torch.device("cpu"))


def test_the_dtype_a_run_will_use_is_resolved_as_the_run_resolves_it(monkeypatch):
    """What the window predicts with before a run: "auto" is bfloat16 on CUDA (float16 without
    bf16), float16 on MPS, float32 on a CPU (the window used to guess float32 for a CUDA machine's
    "auto" device, bfloat16 on a CUDA without bf16, and float32 on MPS)."""
    import backend.loaders.device as device
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert run_dtype_name("cuda:0", "auto") == "bfloat16"
    assert run_dtype_name("auto", "auto") == "bfloat16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    assert run_dtype_name("cuda", "auto") == "float16"
    assert run_dtype_name("cuda", "float32") == "float32"
    assert run_dtype_name("cuda", "bfloat16") is None   # a run would refuse it
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device, "_mps_available", lambda: True)
    assert run_dtype_name("mps", "auto") == "float16"
    assert run_dtype_name("cpu", "auto") == "float32"
    assert run_dtype_name("tpu", "auto") is None


@pytest.mark.parametrize("capability, dtype", [((7, 0), torch.float16), ((7, 5), torch.float16),
                                               ((8, 0), torch.bfloat16), ((8, 6), torch.bfloat16),
                                               ((9, 0), torch.bfloat16)])
def test_auto_on_cuda_is_bfloat16_only_where_it_is_native(capability, dtype):
    """V100 (7.0) and T4 (7.5) emulate bfloat16 (torch.cuda.is_bf16_supported says yes): auto gives float16."""
    from backend.loaders.device import auto_cuda_dtype
    assert auto_cuda_dtype(capability) == dtype


def test_auto_on_a_faked_t4_resolves_to_float16_even_though_torch_counts_bf16_emulation(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    assert resolve_dtype("auto", torch.device("cuda", 0)) == torch.float16
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert resolve_dtype("auto", torch.device("cuda", 0)) == torch.bfloat16


def test_the_t4_profile_prices_float16_and_says_it_has_no_bf16_peak():
    """auto's float16 on a T4 is priced; an explicit bfloat16 run there is given no bound, in words."""
    from backend.results.text import roofline_lines
    from backend.roofline.profiles import find_profile
    t4 = find_profile("t4")
    assert t4.has_peak("float16") and not t4.has_peak("bfloat16")
    from backend.models.shapes import SHAPES
    from backend.roofline.cost import PhaseTotals
    decode = PhaseTotals(steps=10, tokens=10, pairs=1000.0, context_tokens=1000, logit_rows=10, time_ms=50.0)
    assert roofline_lines(SHAPES["llama-1b"], "float16", "cuda:0", "Tesla T4", {"decode": decode}, t4)[0][1] \
        .startswith("NVIDIA T4 datasheet profile (run `calibrate` for this device's measured figures): fp16 ")
    lines = roofline_lines(SHAPES["llama-1b"], "bfloat16", "cuda:0", "Tesla T4", {"decode": decode}, t4)
    assert lines == [("roofline", "NVIDIA T4 datasheet profile (run `calibrate` for this device's measured "
                                  "figures) has no bf16 peak, so no bound is given")]


def test_the_device_scope_makes_the_device_current_on_cuda_and_is_nothing_elsewhere(monkeypatch):
    """torch.cuda.device faked: what the runner's build, capture and steps run inside (cuda:1 must not
    capture on device 0)."""
    from backend.loaders.device import device_scope
    entered = []

    class FakeDevice:
        def __init__(self, device):
            self.device = device

        def __enter__(self):
            entered.append(self.device)

        def __exit__(self, *exc):
            entered.append("exit")
    monkeypatch.setattr(torch.cuda, "device", FakeDevice)
    with device_scope(torch.device("cuda", 1)):
        assert entered == [torch.device("cuda", 1)]
    assert entered[-1] == "exit"
    entered.clear()
    with device_scope(torch.device("cpu")):
        pass
    assert entered == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_auto_dtype_follows_the_compute_capability():
    device = resolve_device("cuda")
    native = torch.cuda.get_device_capability(device) >= (8, 0)
    assert resolve_dtype("auto", device) == (torch.bfloat16 if native else torch.float16)
