"""Device and dtype choice: auto picks what exists, the rest is refused in one line."""
import pytest
import torch

from backend.device import (available_devices, available_dtypes, device_name, dtype_name, resolve_device,
                            resolve_dtype, synchronize)
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
