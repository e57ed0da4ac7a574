"""Build and install llama-cpp-python, the peer this project measures against, so that it runs here.

Why not pip's default build: llama-cpp-python builds llama.cpp with `GGML_NATIVE=ON`, which on a
CPU with AMX (every Intel Xeon since Sapphire Rapids) compiles llama.cpp's AMX matrix path, and
that path segfaults on the first prompt of two or more tokens with every quantized GGUF
(ggml-org/llama.cpp issue 20824). So the build names its instruction sets explicitly: each one
this CPU reports (/proc/cpuinfo), AMX never. On an AMD or AVX2-only CPU that is the same code the
native build makes; elsewhere (ARM, macOS) the native build has no AMX to avoid and is kept.

The wheel is built once per (version, flags) into the user's cache, so a second venv on the same
machine installs in seconds, and a cached wheel of another machine's flags is never reused.
After installing, a probe (a two-token prompt of the bundled Q4_1 GGUF, in a child process)
checks that the build runs; a probe that dies is one line naming the signal, and exit 1.

    python tools/llama_cpp_peer.py              # build if needed, install, probe
    python tools/llama_cpp_peer.py --print      # the CMAKE_ARGS this machine gets, and why
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

# the app is installed before the peer (Makefile): the bundled model is found as the app finds it
from backend.loaders.weights import bundled_gguf

VERSION = "0.3.36"
RECORD = "phasescope-build.json"   # written beside the installed llama_cpp package: how it was built

# ggml's CMake switch for each instruction set, and the /proc/cpuinfo flags it needs (all of them).
ISA = [
    ("GGML_SSE42", ("sse4_2",)),
    ("GGML_AVX", ("avx",)),
    ("GGML_AVX2", ("avx2",)),
    ("GGML_FMA", ("fma",)),
    ("GGML_F16C", ("f16c",)),
    ("GGML_BMI2", ("bmi2",)),
    ("GGML_AVX_VNNI", ("avx_vnni",)),
    # ggml's AVX512 switch compiles with -mavx512f -mavx512cd -mavx512vl -mavx512dq -mavx512bw
    ("GGML_AVX512", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
    ("GGML_AVX512_VBMI", ("avx512vbmi",)),
    ("GGML_AVX512_VNNI", ("avx512_vnni",)),
    ("GGML_AVX512_BF16", ("avx512_bf16",)),
]
AMX = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")


def cpu_flags(cpuinfo: str | None = None) -> set[str] | None:
    """The CPU's feature flags from /proc/cpuinfo's text (None where there is none: not Linux)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return None


def cmake_args(flags: set[str] | None, machine: str | None = None) -> tuple[list[str], str]:
    """(the CMake definitions, why) for an x86-64 CPU with these flags; ([], why) keeps the native build."""
    machine = (machine or platform.machine()).lower()
    if machine not in ("x86_64", "amd64") or flags is None:
        return [], f"native build ({machine}: no AMX path to avoid)"
    args = ["-DGGML_NATIVE=OFF"]
    on = []
    for switch, needs in ISA:
        enabled = all(f in flags for f in needs)
        args.append(f"-D{switch}={'ON' if enabled else 'OFF'}")
        if enabled:
            on.append(switch.removeprefix("GGML_"))
    args += [f"-D{switch}=OFF" for switch in AMX]
    has_amx = "amx_tile" in flags
    why = (f"explicit instruction sets from this CPU ({', '.join(on) or 'none'}), AMX "
           + ("off: this CPU has AMX, and llama.cpp's AMX path crashes on quantized GGUFs (llama.cpp issue 20824)"
              if has_amx else "off (this CPU has none)"))
    return args, why


def installed_record() -> dict | None:
    """How the installed llama_cpp was built by this script (None: not installed, or not by it)."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        return None
    try:
        return json.loads((Path(spec.origin).parent / RECORD).read_text())
    except (OSError, ValueError):
        return None


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache")
    return Path(base) / "phasescope" / "llama-cpp-wheels"


def _pip(*args: str, env: dict | None = None) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True, env=env)


def build_wheel(version: str, args: list[str]) -> Path:
    """The wheel of llama-cpp-python `version` built with `args`, from the cache or built now (minutes)."""
    key = hashlib.sha256(" ".join([version, *args]).encode()).hexdigest()[:12]
    folder = _cache_dir() / f"{version}-{key}"
    wheels = sorted(folder.glob("llama_cpp_python-*.whl"))
    if wheels:
        return wheels[-1]
    folder.parent.mkdir(parents=True, exist_ok=True)
    print(f"building llama-cpp-python {version} from source (about 5 minutes on 2 cores): CMAKE_ARGS={' '.join(args)}",
          flush=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        env = {**os.environ, "CMAKE_ARGS": " ".join(args)}
        # --no-cache-dir: pip's own wheel cache is keyed by the source, not by CMAKE_ARGS
        _pip("wheel", "--no-deps", "--no-cache-dir", "--no-binary", "llama-cpp-python",
             f"llama-cpp-python=={version}", "-w", tmp, env=env)
        built = sorted(Path(tmp).glob("llama_cpp_python-*.whl"))
        if not built:
            raise SystemExit("llama-cpp-python: pip wheel made no wheel")
        Path(tmp).rename(folder)   # atomic: a concurrent build never sees half a folder
    return folder / built[-1].name


PROBE = ("import sys, llama_cpp; m = llama_cpp.Llama(model_path=sys.argv[1], n_threads=1, n_ctx=256, verbose=False); "
         "out = m('Hello there', max_tokens=2); print(len(out['choices'][0]['text']) >= 0)")


def probe(gguf: Path) -> str:
    """'' when a two-token prompt of `gguf` runs in a child process; else how the child ended."""
    try:
        done = subprocess.run([sys.executable, "-c", PROBE, str(gguf)], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "did not answer a two-token prompt within 300 s"
    if done.returncode == 0:
        return ""
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        return f"died with signal {-done.returncode} ({name}) on a two-token prompt of {gguf.name}"
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return f"exited with status {done.returncode} on a two-token prompt of {gguf.name}: {last}"


def install(version: str = VERSION) -> int:
    args, why = cmake_args(cpu_flags())
    print(f"llama-cpp-python {version}: {why}", flush=True)
    record = {"version": version, "cmake_args": args, "why": why}
    current = installed_record()
    try:
        installed = importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if current != record or installed != version:
        if args:
            wheel = build_wheel(version, args)
            _pip("install", "--force-reinstall", "--no-deps", str(wheel))
        else:
            _pip("install", "--force-reinstall", "--no-deps", f"llama-cpp-python=={version}")
        importlib.invalidate_caches()
        spec = importlib.util.find_spec("llama_cpp")
        (Path(spec.origin).parent / RECORD).write_text(json.dumps(record, indent=1) + "\n")
    _pip("install", f"llama-cpp-python[server]=={version}")   # the server's own dependencies; the build stays
    gguf = bundled_gguf()
    if gguf is None:
        print("llama-cpp-python: installed; not probed (the bundled model is not installed)")
        return 0
    failure = probe(gguf)
    if failure:
        print(f"llama-cpp-python {version} built with {' '.join(args) or 'native flags'} {failure}", file=sys.stderr)
        return 1
    print("llama-cpp-python: installed, and a two-token prompt of the bundled Q4_1 GGUF runs")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="print the CMAKE_ARGS this CPU gets, and why")
    parser.add_argument("--version", default=VERSION)
    opts = parser.parse_args(argv)
    if opts.print:
        args, why = cmake_args(cpu_flags())
        print(" ".join(args) or "(native)")
        print(why)
        return 0
    return install(opts.version)


if __name__ == "__main__":
    sys.exit(main())
