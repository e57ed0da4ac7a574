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
    assert run_dtype_name("cuda:0", "auto") == "bfloat16"
    assert run_dtype_name("auto", "auto") == "bfloat16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    assert run_dtype_name("cuda", "auto") == "float16"
    assert run_dtype_name("cuda", "float32") == "float32"
    assert run_dtype_name("cuda", "bfloat16") is None   # a run would refuse it
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device, "_mps_available", lambda: True)
    assert run_dtype_name("mps", "auto") == "float16"
    assert run_dtype_name("cpu", "auto") == "float32"
    assert run_dtype_name("tpu", "auto") is None
