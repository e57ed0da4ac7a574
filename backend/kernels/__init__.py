"""The project's own CPU kernels (C, in this folder), built for this machine on first use.

`ops` passes torch tensors to them. `load()` compiles every `*.c` here into one shared library with the system C compiler, tuned
for this CPU (`-march=native`), caches it under the user's cache folder keyed by the sources,
compiler and machine, loads it with ctypes and checks it against torch on a small product. On
a machine without a compiler, or where the check fails, `load()` returns None and `reason()`
says why; callers then use torch's kernels. PHASESCOPE_KERNELS=0 turns them off;
PHASESCOPE_KERNELS_ARCH replaces -march=native (e.g. "-march=x86-64-v3" builds for AVX2 machines,
"-march=x86-64" for the portable C paths, which the tests check against the native build). On ARM
the build tries -mcpu=native first (arm.py: not every ARM compiler takes -march=native).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from backend.kernels import arm

HERE = Path(__file__).parent
_lib: ctypes.CDLL | None = None
_reason = "not loaded yet"
_tried = False
# gnu11, not c11: strict ISO C turns off fused multiply-add contraction (-ffp-contract=off).
FLAGS = ["-O3", "-shared", "-fPIC", "-pthread", "-std=gnu11", "-ffp-contract=fast"]


def load() -> ctypes.CDLL | None:
    """The kernels' library, built on first use; None where it cannot be had (see reason())."""
    global _lib, _reason, _tried
    if not _tried:
        _tried = True
        if os.environ.get("PHASESCOPE_KERNELS", "1") == "0":
            _reason = "turned off (PHASESCOPE_KERNELS=0)"
        else:
            try:
                _lib = _declare(ctypes.CDLL(str(build())))
                _reason = ""
            except (OSError, RuntimeError, subprocess.SubprocessError) as e:
                _reason = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
    return _lib


def build_state() -> str:
    """Where the kernels stand on this machine, compiling nothing: "off" (PHASESCOPE_KERNELS=0), "no
    compiler", "kept" (a build for these sources, compiler and CPU is in the cache) or "to build"."""
    if os.environ.get("PHASESCOPE_KERNELS", "1") == "0":
        return "off"
    try:
        return "kept" if library_path().exists() else "to build"
    except RuntimeError:   # no C compiler
        return "no compiler"


def can_have() -> bool:
    """Whether load() can give the kernels, without compiling them now: loaded already, a build kept
    for this machine (loaded now, in milliseconds), or a C compiler to build them with (a run's first
    stage then compiles them: backend/loaders/cache.py). The window's dtype list asks this, so that its
    first start does not compile for seconds in the window's thread before it shows."""
    if _tried:
        return _lib is not None
    state = build_state()
    return state == "to build" or (state == "kept" and load() is not None)


def reason() -> str:
    """Why load() gave None ('' when the kernels are loaded)."""
    return _reason


def library_path(cache_dir: Path | None = None) -> Path:
    """Where the build for these sources, compiler and machine is cached (it may not exist yet)."""
    compiler = _compiler()
    digest = hashlib.sha256()
    for f in sorted(HERE.glob("*.[ch]")):
        digest.update(f.name.encode() + f.read_bytes())
    digest.update(" ".join([*compiler, *compile_flags(compiler), *sum(_arches(), []), platform.machine(),
                            platform.processor(), _cpu_flags()]).encode())
    return (cache_dir or cache_folder()) / f"phasescope-kernels-{digest.hexdigest()[:16]}.so"


def build(cache_dir: Path | None = None) -> Path:
    """Compile the sources into a cached shared library (once per sources, compiler and machine)."""
    sources = sorted(HERE.glob("*.c"))
    compiler = _compiler()
    arches = _arches()
    target = library_path(cache_dir)
    folder = target.parent
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        out = Path(tmp) / target.name
        base = [*compiler, *compile_flags(compiler), *map(str, sources), "-o", str(out)]
        errors = ""
        for arch in arches:
            done = subprocess.run(base[:len(compiler)] + arch + base[len(compiler):],
                                  capture_output=True, text=True, timeout=300)
            if done.returncode == 0:
                _flags_file(target).write_text(" ".join(arch))   # which of the arches the compiler took
                out.replace(target)   # atomic: a concurrent build never sees half a file
                return target
            errors = done.stderr
        raise RuntimeError(f"compiling the CPU kernels failed: {errors.strip() or 'no output'}")


def _arches() -> list[list[str]]:
    """The architecture flags to try in turn (some compilers, or CPUs, refuse -march=native)."""
    chosen = os.environ.get("PHASESCOPE_KERNELS_ARCH")
    if chosen:
        return [shlex.split(chosen)]
    return arm.arches(cpu_flags()) if arm.is_arm(cpu_flags()) else [["-march=native"], []]


def _flags_file(library: Path) -> Path:
    return library.with_name(library.name + ".flags")


def compile_flags(compiler: list[str]) -> list[str]:
    """FLAGS for this compiler. Clang's -ffp-contract=fast fuses even where a pragma turns contraction
    off (quant.c's K-quant searches, whose bytes then differ from llama.cpp's: seen on aarch64, and on
    x86 with FMA); clang's -ffp-contract=on fuses within statements, the kernels' a * b + c, and obeys it."""
    if not _is_clang(tuple(compiler)):
        return FLAGS
    return ["-ffp-contract=on" if flag == "-ffp-contract=fast" else flag for flag in FLAGS]


@functools.cache
def _is_clang(compiler: tuple[str, ...]) -> bool:
    """Whether the compiler is a clang (Apple's "cc" is)."""
    try:
        done = subprocess.run([*compiler, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "clang" in done.stdout.lower()


def _compiler() -> list[str]:
    cc = os.environ.get("CC") or (sysconfig.get_config_var("CC") or "").strip() or "cc"
    words = shlex.split(cc)
    if not words or shutil.which(words[0]) is None:
        raise RuntimeError(f"no C compiler found ({cc!r}); set CC to one")
    return words


def cache_folder() -> Path:
    """The user's cache folder for phasescope (the kernels' builds, the fidelity verdicts)."""
    base = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache")
    folder = Path(base) / "phasescope"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if os.access(folder, os.W_OK):
            return folder
    except OSError:
        pass
    return Path(tempfile.gettempdir()) / f"phasescope-{os.getuid() if hasattr(os, 'getuid') else 'user'}"


def _cpu_flags() -> str:
    """The CPU's feature flags (Linux), so a cache shared by two machines keeps one build per CPU."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return arm.darwin_features_line() or sys.platform


def cpu_flags() -> set[str]:
    """The CPU's feature flags as the kernel reports them (empty where there is no /proc/cpuinfo)."""
    line = _cpu_flags()
    return set(line.partition(":")[2].split()) if ":" in line else set()


# What doctor reports of the CPU's vector and matrix units: (name, the flags that make it).
CPU_UNITS = [("AVX2", ("avx2", "fma")), ("AVX-512", ("avx512f", "avx512bw", "avx512vl")),
             ("AVX512-VNNI", ("avx512_vnni",)), ("AVX512-BF16", ("avx512_bf16",)),
             ("AMX", ("amx_tile", "amx_bf16", "amx_int8"))]


def cpu_units(flags: set[str] | None = None) -> dict[str, bool]:
    """Which of CPU_UNITS this CPU (or these flags) has; an ARM CPU's are arm.UNITS (NEON, dotprod, ...)."""
    flags = cpu_flags() if flags is None else flags
    if arm.is_arm(flags):
        return arm.units(flags)
    return {name: all(f in flags for f in needs) for name, needs in CPU_UNITS}


def isa() -> tuple[str, list[str]] | None:
    """The loaded build's instruction-set path and the features it was compiled with; None without the kernels."""
    lib = load()
    if lib is None:
        return None
    return lib.psk_isa().decode(), lib.psk_isa_features().decode().split()


def arch_flags() -> str:
    """The architecture flags the kernels are built with here: those the kept build took, else the first
    to try (PHASESCOPE_KERNELS_ARCH, else -march=native; -mcpu=native on ARM)."""
    try:
        taken = _flags_file(library_path()).read_text().strip()
    except (OSError, RuntimeError):   # not built yet, or no compiler
        taken = None
    return (taken if taken is not None else " ".join(_arches()[0])) or "the compiler's default"


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.psk_decode_attention_scaled.argtypes = [ptr, i64, ptr, i64, ptr, i64, ptr, ptr, ptr, i64, i64, i64, ptr, ptr,
                                                ptr, ptr, ptr, i64, i64, i64, i64, i64, ctypes.c_float, ctypes.c_float]
    lib.psk_decode_attention_scaled.restype = ctypes.c_int
    lib.psk_llama_decode_layers.argtypes = [i64, ptr, i64, ptr, ptr, ptr, ptr, ptr, i64, i64, i64, *[ptr] * 5,
                                            *[i64] * 5, ctypes.c_float]
    lib.psk_llama_decode_layers.restype = ctypes.c_int
    c_int = ctypes.c_int
    lib.psk_matmul.argtypes = [c_int, ptr, ptr, ptr, ptr, ptr, i64, i64, i64]
    lib.psk_matmul.restype = c_int
    lib.psk_quantize_rows.argtypes = [c_int, ptr, i64, i64, ptr]
    lib.psk_quantize_rows.restype = None
    lib.psk_dequantize_rows.argtypes = [c_int, ptr, i64, i64, ptr]
    lib.psk_dequantize_rows.restype = None
    lib.psk_quant_pack.argtypes = [c_int, ptr, i64, i64, ptr]
    lib.psk_quant_pack.restype = None
    lib.psk_quant_packed_bytes.argtypes = [c_int, i64, i64]
    lib.psk_quant_packed_bytes.restype = i64
    lib.psk_rms_norm.argtypes = [ptr, ptr, ptr, i64, i64, ctypes.c_float]
    lib.psk_rms_norm.restype = None
    lib.psk_silu_mul.argtypes = [ptr, ptr, i64, i64]
    lib.psk_silu_mul.restype = None
    lib.psk_rotary.argtypes = [ptr, i64, ptr, ptr, ptr, i64, i64, i64]
    lib.psk_rotary.restype = None
    lib.psk_read.argtypes = [ptr, i64]
    lib.psk_read.restype = ctypes.c_float
    lib.psk_set_threads.argtypes = [ctypes.c_int]
    lib.psk_set_threads.restype = ctypes.c_int
    lib.psk_threads.argtypes = []
    lib.psk_threads.restype = ctypes.c_int
    # the pool's threads kept on cores of their own (pool.c: move_off_shared), and what it counted
    lib.psk_pool_pick_cpu.argtypes = [ptr, ctypes.c_int, ptr, ctypes.c_int]
    lib.psk_pool_pick_cpu.restype = ctypes.c_int
    lib.psk_pool_spread.argtypes = [ctypes.c_int]
    lib.psk_pool_spread.restype = ctypes.c_int
    lib.psk_pool_stats.argtypes = [ptr]
    lib.psk_pool_stats.restype = None
    lib.psk_panel_width.argtypes = []
    lib.psk_panel_width.restype = ctypes.c_int
    for name in ("psk_isa", "psk_isa_features"):
        getattr(lib, name).argtypes = []
        getattr(lib, name).restype = ctypes.c_char_p
    lib.psk_prefill_attention.argtypes = [ptr, i64, ptr, ptr, ptr, ptr, *[i64] * 8, ctypes.c_float, ctypes.c_float]
    lib.psk_prefill_attention.restype = c_int
    lib.psk_kv_write.argtypes = [ptr, i64, ptr, i64, ptr, ptr, ptr, *[i64] * 6]
    lib.psk_kv_write.restype = None
    # the bfloat16 units (bf16.c)
    lib.psk_math_compiled.argtypes = []
    lib.psk_math_compiled.restype = c_int
    lib.psk_set_math.argtypes = [c_int, i64]
    lib.psk_set_math.restype = c_int
    lib.psk_amx_request.argtypes = []
    lib.psk_amx_request.restype = c_int
    # the integer decode products (qint8.c)
    lib.psk_set_decode_math.argtypes = [c_int, i64]
    lib.psk_set_decode_math.restype = c_int
    lib.psk_int8_isa.argtypes = []
    lib.psk_int8_isa.restype = ctypes.c_char_p
    lib.psk_int8_kind.argtypes = [c_int]
    lib.psk_int8_kind.restype = c_int
    lib.psk_quantize_acts.argtypes = [ptr, i64, i64, ptr, ptr, ptr]
    lib.psk_quantize_acts.restype = None
    # mixture-of-experts feed-forward (moe.c)
    lib.psk_moe.argtypes = [ptr, ptr, ptr, i64, i64, ptr, i64, ptr, i64, i64, i64, i64, ptr]
    lib.psk_moe.restype = i64
    return lib
