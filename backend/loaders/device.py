"""Which devices and dtypes this machine can run, and the names shown for them."""
from __future__ import annotations

import contextlib
import platform
import re

import torch

from backend.errors import InputError

DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}


def _mps_available() -> bool:
    return hasattr(torch.backends, "mps") and torch.backends.mps.is_available()


def available_devices() -> list[str]:
    """What the pickers offer: auto, cpu, each CUDA device, mps."""
    devices = ["auto", "cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if _mps_available():
        devices.append("mps")
    return devices


def resolve_device(spec: str) -> torch.device:
    """auto | cpu | cuda | cuda:N | mps -> a device this machine has."""
    spec = spec.strip().lower()
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("mps") if _mps_available() else torch.device("cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if spec == "mps":
        if not _mps_available():
            raise InputError("device 'mps' is not available on this machine; available: " + ", ".join(available_devices()))
        return torch.device("mps")
    m = re.fullmatch(r"cuda(?::(\d+))?", spec)
    if m is None:
        raise InputError(f"unknown device {spec!r}; use one of: {', '.join(available_devices())}")
    if not torch.cuda.is_available():
        raise InputError(f"device {spec!r} is not available (this torch build or machine has no CUDA); "
                         f"available: {', '.join(available_devices())}")
    index = int(m.group(1)) if m.group(1) else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise InputError(f"device {spec!r} does not exist: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return torch.device("cuda", index)


def available_dtypes(device: torch.device) -> list[str]:
    """The float dtypes this device computes in (what --dtype may name besides the quantized precisions)."""
    if device.type == "cuda":
        return ["float32", "float16"] + (["bfloat16"] if torch.cuda.is_bf16_supported() else [])
    if device.type == "mps":
        try:  # bfloat16 on MPS depends on the macOS version
            torch.zeros(1, dtype=torch.bfloat16, device=device)
            return ["float32", "float16", "bfloat16"]
        except (RuntimeError, TypeError):
            return ["float32", "float16"]
    return ["float32", "bfloat16", "float16"]


def available_precisions(device: torch.device) -> list[str]:
    """Every --dtype this device runs: its float dtypes, the GGUF block formats where the CPU kernels
    are built or can be (CPU only: kernels.can_have, which compiles nothing), and int8 weight-only but
    on CUDA (precision.int8_refusal)."""
    from backend import kernels
    from backend.precision import BLOCK_FORMATS, int8_refusal
    blocks = list(BLOCK_FORMATS) if device.type == "cpu" and kernels.can_have() else []
    return [*available_dtypes(device), *blocks, *(["int8"] if int8_refusal(device.type) is None else [])]


def resolve_dtype(spec: str, device: torch.device) -> torch.dtype:
    """auto -> bfloat16 on CUDA where it is native (float16 below: auto_cuda_dtype), float16 on MPS,
    float32 on CPU."""
    spec = spec.strip().lower()
    if spec == "auto":
        if device.type == "cuda":
            return auto_cuda_dtype(torch.cuda.get_device_capability(device))
        return torch.float16 if device.type == "mps" else torch.float32
    if spec not in DTYPES:
        raise InputError(f"unknown dtype {spec!r}; use one of: auto, float32, bfloat16, float16")
    dtype = DTYPES[spec]
    if dtype_name(dtype) not in available_dtypes(device):
        raise InputError(f"dtype {spec} cannot run on {device}; available: {', '.join(available_dtypes(device))}")
    return dtype


BF16_NATIVE = (8, 0)   # the first compute capability (Ampere) whose tensor cores compute in bfloat16


def auto_cuda_dtype(capability: tuple[int, int]) -> torch.dtype:
    """--dtype auto on a CUDA device of this compute capability: bfloat16 from Ampere (8.0) on, float16
    below. Not torch.cuda.is_bf16_supported(): it counts emulation, and a T4 (7.5) or a V100 (7.0)
    runs bfloat16 emulated, many times slower than its native float16 (and the T4 profile has no bf16 peak)."""
    return torch.bfloat16 if tuple(capability) >= BF16_NATIVE else torch.float16


def run_dtype_name(device_spec: str, dtype_spec: str) -> str | None:
    """The dtype (or quantized precision) a run with these settings runs at ("auto" resolved as a run
    resolves it, before the checkpoint is read); None where the device or the dtype would be refused."""
    from backend.precision import canonical
    try:
        device = resolve_device(device_spec)
        name = canonical(dtype_spec)
        if name != "auto" and name not in available_dtypes(device):
            return name if name in available_precisions(device) else None
        return dtype_name(resolve_dtype(dtype_spec, device))
    except InputError:
        return None


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def device_scope(device: torch.device):
    """A context in which `device` is the current CUDA device (torch.cuda.device), so that what uses the
    current device -- a new stream, a graph capture, its pool -- is on it and not on device 0; a no-op
    context elsewhere. The runner is built, warmed up, captured and stepped inside it."""
    if device.type == "cuda":
        return torch.cuda.device(device)
    return contextlib.nullcontext()


def synchronize(device: torch.device) -> None:
    """Wait for queued device work, so that a clock read after it measures the work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return f"Apple GPU (MPS, {platform.machine()})"
    return cpu_name()


def cpu_name() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what the platform reports."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"
