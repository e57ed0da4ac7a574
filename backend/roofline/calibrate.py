"""Calibration: measure this machine's matrix-multiply FLOP/s per dtype and its memory bandwidth.

The result is a GpuProfile marked measured, written as `this-machine.toml` in the user's
configuration folder, so every profile list offers it beside the datasheet profiles. torch
is imported inside the functions that need it: `backend.roofline.profiles` stays light.

On a CPU the bf16 figure is the matrix unit's (oneDNN multiplies bfloat16 on AMX tiles or
AVX512-BF16 dot products, where the CPU has them; without either it widens to float32), and the
profile names which (`bf16_unit`). Beside torch's square matmuls it times the project's own
kernels' product of KERNEL_PRODUCT in float32 and in bfloat16 ([kernels_tflops]): what the
engine's prefill can reach on each roof.
"""
from __future__ import annotations

import datetime
import os
import platform
import statistics
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from backend.errors import InputError, RunError
from backend.files import WriteError, write_files
from backend.roofline.profiles import LOCAL_KEY, GpuProfile, local_profile_path, parse_profile, profile_to_toml

MIN_SAMPLE_S = 0.01    # fast kernels are looped until one timed sample lasts this long (sync cost amortized)
MAX_REPEATS = 30
MIN_MATMUL = 256       # a slow dtype shrinks its matmul down to this size, not below
# (rows, in, out) of the kernels' probe: the bundled model's MLP up-projection in a 512-token prefill
KERNEL_PRODUCT = (512, 576, 1536)


@dataclass(slots=True)
class _Plan:
    """Sizes and time budgets for one device kind."""

    matmul_n: int
    matmul_budget_s: float     # per dtype, for the timed repeats
    copy_mib: int
    copy_budget_s: float
    kernels_budget_s: float = 0.0   # per arithmetic, the CPU kernels' product (0: not timed)


def _plan(kind: str, quick: bool) -> _Plan:
    if kind == "cpu":
        # the copy must be far larger than the last-level cache to measure DRAM, not cache
        return _Plan(512, 0.4, 64, 0.3, 0.3) if quick else _Plan(2048, 5.0, 256, 2.0, 1.5)
    return _Plan(4096, 0.3, 256, 0.2) if quick else _Plan(8192, 1.5, 1024, 1.0)


def _synchronizer(torch, dev) -> Callable[[], None]:
    """Waits for queued device work, so the clock reads the work's end, not its launch."""
    if dev.type == "cuda":
        return lambda: torch.cuda.synchronize(dev)
    if dev.type == "mps":
        return torch.mps.synchronize
    return lambda: None


def _time_once(run: Callable[[], object], sync: Callable[[], None]) -> float:
    sync()
    start = time.perf_counter()
    run()
    sync()
    return time.perf_counter() - start


def _median_seconds(run: Callable[[], object], sync: Callable[[], None], once_s: float, budget_s: float) -> float:
    """Median seconds per call over repeats; the caller has already warmed `run` up."""
    inner = max(1, min(100, int(MIN_SAMPLE_S / max(once_s, 1e-9))))
    repeats = max(3, min(MAX_REPEATS, int(budget_s / (once_s * inner))))
    samples = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(inner):
            run()
        sync()
        samples.append((time.perf_counter() - start) / inner)
    seconds = statistics.median(samples)
    if not seconds > 0:
        raise RunError("calibration: the clock did not advance during a timed run")
    return seconds


def _runs(torch, dev, dtype) -> bool:
    """A tiny matmul as a probe: some devices lack kernels for some dtypes."""
    try:
        a = torch.ones(64, 64, device=dev, dtype=dtype)
        torch.mm(a, a)
    except (RuntimeError, TypeError):
        return False
    return True


def matmul_flops(torch, dev, dtype, n: int, budget_s: float, sync) -> tuple[float, int]:
    """FLOP/s of an n x n matmul (2 n^3 FLOPs), shrinking n while one run eats the budget."""
    while True:
        a = torch.randn(n, n, device=dev, dtype=dtype)
        b = torch.randn(n, n, device=dev, dtype=dtype)
        out = torch.empty(n, n, device=dev, dtype=dtype)

        def run():
            torch.mm(a, b, out=out)

        _time_once(run, sync)             # warm-up: library init and kernel choice stay out
        once = _time_once(run, sync)
        if once <= budget_s / 4 or n <= MIN_MATMUL:
            break
        n //= 2
    return 2 * n**3 / _median_seconds(run, sync, once, budget_s), n


def cpu_bf16_unit() -> str:
    """The unit torch's bfloat16 matmul runs on here (oneDNN takes the best the CPU has): 'AMX',
    'AVX512-BF16', or 'none' (it widens to float32)."""
    from backend import kernels
    units = kernels.cpu_units()
    return "AMX" if units.get("AMX") else "AVX512-BF16" if units.get("AVX512-BF16") else "none"


def kernels_flops(torch, budget_s: float) -> tuple[dict[str, float], str]:
    """FLOP/s of the project's C kernels' KERNEL_PRODUCT in float32 and on the bfloat16 unit (products
    of every size on it), and in words which unit that is; ({}, why) without the kernels."""
    from backend import kernels
    from backend.kernels import matmath, ops
    from backend.models.packed import Panels
    lib = kernels.load()
    if lib is None:
        return {}, f"the C kernels are unavailable ({kernels.reason()})"
    rows, inp, out = KERNEL_PRODUCT
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, inp, generator=generator)
    panels = Panels.pack(torch.randn(out, inp, generator=generator), lib.psk_panel_width()).data
    unit, why = matmath.bf16_unit()
    maths = [("fp32", matmath.FP32)] + ([("bf16", matmath.MatMath(unit, 1))] if unit else [])

    def run():
        ops.linear(x, panels, out)

    rates = {}
    try:
        for key, math in maths:
            matmath.select(math)
            _time_once(run, lambda: None)   # warm-up: the first call sizes the scratch
            once = _time_once(run, lambda: None)
            rates[key] = 2 * rows * inp * out / _median_seconds(run, lambda: None, once, budget_s)
    finally:
        matmath.select(matmath.FP32)
    return rates, f"bf16 on {unit}" if unit else f"no bf16 unit for them ({why})"


def read_bandwidth(torch, dev, mib: int, budget_s: float, sync) -> float:
    """Bytes/s of a plain read of a large buffer: what a memory-bound decode step reads its weights at.

    On the CPU the project's C kernels read it on all threads (torch's sum reaches about two
    thirds of that here); elsewhere, and without them, torch's sum does.
    """
    from backend.kernels import ops

    src = torch.empty(mib * 2**20 // 4, device=dev, dtype=torch.float32).fill_(1.0)
    if ops.usable(dev, torch.float32):
        def run():
            ops.read(src)
    else:
        def run():
            src.sum()

    _time_once(run, sync)
    once = _time_once(run, sync)
    return src.numel() * src.element_size() / _median_seconds(run, sync, once, budget_s)


def copy_bandwidth(torch, dev, mib: int, budget_s: float, sync) -> float:
    """Bytes/s of a large copy, counting the bytes read and the bytes written."""
    src = torch.empty(mib * 2**20 // 4, device=dev, dtype=torch.float32).fill_(1.0)   # touched, so really mapped
    dst = torch.empty_like(src)

    def run():
        dst.copy_(src)

    _time_once(run, sync)                 # warm-up: first touch of dst's pages
    once = _time_once(run, sync)
    return 2 * src.numel() * src.element_size() / _median_seconds(run, sync, once, budget_s)


def _cpu_memory_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (AttributeError, ValueError, OSError):   # Windows has no sysconf
        import ctypes

        class MemoryStatus(ctypes.Structure):
            _fields_ = [("length", ctypes.c_ulong), ("load", ctypes.c_ulong), ("total_phys", ctypes.c_ulonglong),
                        ("avail_phys", ctypes.c_ulonglong), ("total_page", ctypes.c_ulonglong),
                        ("avail_page", ctypes.c_ulonglong), ("total_virtual", ctypes.c_ulonglong),
                        ("avail_virtual", ctypes.c_ulonglong), ("avail_ext", ctypes.c_ulonglong)]

        status = MemoryStatus(length=ctypes.sizeof(MemoryStatus))
        ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status))
        return status.total_phys / 1e9


def _describe(torch, dev) -> tuple[str, str, float]:
    """Display name, vendor and memory (GB) of the device."""
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        vendor = "AMD" if torch.version.hip else "NVIDIA"
        return f"This machine: {props.name}", vendor, props.total_memory / 1e9
    if dev.type == "mps":
        return f"This machine: Apple GPU ({platform.machine()})", "Apple", _cpu_memory_gb()
    from backend.loaders.device import cpu_name
    name = cpu_name()
    vendor = next((v for v in ("Intel", "AMD", "Apple", "ARM") if v.lower() in name.lower()), platform.machine() or "CPU")
    return f"This machine: {name} ({torch.get_num_threads()} threads)", vendor, _cpu_memory_gb()


def _significant(value: float) -> float:
    """Four significant digits: what repeated measurements agree on, and a readable file."""
    return float(f"{value:.4g}")


def calibrate(device: str = "auto", progress: Callable[[str, float], None] | None = None,
              quick: bool = False) -> GpuProfile:
    """Measure this machine's device; progress(message, fraction done) is called along the way."""
    import torch

    from backend.loaders.device import resolve_device

    report = progress or (lambda message, fraction: None)
    dev = resolve_device(device)
    sync = _synchronizer(torch, dev)
    plan = _plan(dev.type, quick)

    candidates = [("fp32", torch.float32), ("bf16", torch.bfloat16)]
    if dev.type != "cpu":   # CPUs have no fp16 matmul units worth a figure
        candidates.insert(1, ("fp16", torch.float16))
    report("probing dtypes", 0.0)
    dtypes = [(key, dt) for key, dt in candidates if key == "fp32" or _runs(torch, dev, dt)]

    probe_kernels = dev.type == "cpu" and plan.kernels_budget_s > 0
    steps = len(dtypes) + 1 + probe_kernels
    tflops, sizes = {}, {}
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")   # fp32 means real fp32, not TF32 on tensor cores
    try:
        for i, (key, dt) in enumerate(dtypes):
            report(f"matrix multiply, {key}", i / steps)
            flops, sizes[key] = matmul_flops(torch, dev, dt, plan.matmul_n, plan.matmul_budget_s, sync)
            tflops[key] = _significant(flops / 1e12)
    finally:
        torch.set_float32_matmul_precision(precision)
    kernel_tflops, kernel_unit = {}, ""
    if probe_kernels:
        report("the C kernels' products, fp32 and bf16", len(dtypes) / steps)
        rates, kernel_unit = kernels_flops(torch, plan.kernels_budget_s)
        kernel_tflops = {key: _significant(flops / 1e12) for key, flops in rates.items()}
    report("memory bandwidth (copy and read)", (steps - 1) / steps)
    bandwidth = max(copy_bandwidth(torch, dev, plan.copy_mib, plan.copy_budget_s / 2, sync),
                    read_bandwidth(torch, dev, plan.copy_mib, plan.copy_budget_s / 2, sync))
    report("done", 1.0)

    name, vendor, memory_gb = _describe(torch, dev)
    matmuls = ", ".join(f"{key} {n}x{n}" for key, n in sizes.items())
    bf16_unit = cpu_bf16_unit() if dev.type == "cpu" and "bf16" in tflops else ""
    on_unit = f" (bf16 on {bf16_unit})" if bf16_unit and bf16_unit != "none" else \
        " (bf16 widened to fp32: no bf16 unit)" if bf16_unit else ""
    rows, inp, out = KERNEL_PRODUCT
    if kernel_tflops:
        arithmetic = f"fp32 and {kernel_unit}" if "bf16" in kernel_tflops else f"fp32 only, {kernel_unit}"
        kernel_text = f"; the C kernels' ({rows} x {inp}) x ({inp} x {out}) product in {arithmetic} ([kernels_tflops])"
    else:
        kernel_text = f"; no kernels' figure: {kernel_unit}" if kernel_unit else ""
    source = (f"Measured by phasescope calibrate{' --quick' if quick else ''} on {datetime.date.today()} with torch "
              f"{torch.__version__} on {dev}: square matmuls ({matmuls}){on_unit}{kernel_text}; bandwidth the larger "
              f"of a {plan.copy_mib} MiB copy counting bytes read and written and a plain read of as much, each the "
              f"median of repeats after warm-up. Measured, not datasheet figures.")
    return GpuProfile(key=LOCAL_KEY, name=name, vendor=vendor, memory_gb=_significant(memory_gb),
                      bandwidth_gbs=_significant(bandwidth / 1e9), tflops=tflops, source=source, measured=True,
                      bf16_unit=bf16_unit, kernels_tflops=kernel_tflops)


def write_profile(profile: GpuProfile, path: str | os.PathLike | None = None) -> Path:
    """Write the profile's TOML atomically (temporary file in the same folder, then rename).

    The default path is this-machine.toml in the configuration folder. The text is validated
    first, so a profile that would not load is refused here, not at the next start.
    """
    target = Path(path) if path is not None else local_profile_path()
    text = profile_to_toml(profile)
    parse_profile(tomllib.loads(text), target)   # refuse before replacing a good file with a bad one
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_files(target.parent, {target.name: text}, fsync=True)
    except OSError as exc:
        raise InputError(f"cannot write profile {target}: {exc.strerror or exc}") from None
    except WriteError as exc:
        raise InputError(f"cannot write profile {target}: {exc.reason}") from None
    return target
