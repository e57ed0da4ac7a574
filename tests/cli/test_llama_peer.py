"""tools/llama_cpp_peer.py: the llama.cpp peer is built with the instruction sets the CPU reports, AMX never.

The CPU reports are faked (the flags lines of the CPUs users have), so the path an AMX Xeon takes
is checked on any machine; the probe runs for real on the installed peer.
"""
import signal
import sys

import pytest

from tools import llama_cpp_peer as peer

SAPPHIRE_RAPIDS = ("flags\t\t: fpu sse4_2 avx f16c fma bmi2 avx2 avx512f avx512dq avx512cd avx512bw avx512vl "
                   "avx512vbmi avx512_vnni avx512_bf16 avx_vnni amx_bf16 amx_tile amx_int8\n")
ZEN4 = ("flags\t\t: fpu sse4_2 avx f16c fma bmi2 avx2 avx512f avx512dq avx512cd avx512bw avx512vl avx512vbmi "
        "avx512_vnni avx512_bf16\n")
HASWELL = "flags\t\t: fpu sse4_2 avx f16c fma bmi2 avx2\n"


def switches(args):
    return {a.removeprefix("-D").split("=")[0]: a.split("=")[1] for a in args}


def test_an_amx_xeon_gets_every_instruction_set_it_has_but_amx():
    args, why = peer.cmake_args(peer.cpu_flags(SAPPHIRE_RAPIDS), "x86_64")
    on = switches(args)
    assert on["GGML_NATIVE"] == "OFF"   # native would compile the AMX path
    assert {k for k, v in on.items() if v == "ON"} == {
        "GGML_SSE42", "GGML_AVX", "GGML_AVX2", "GGML_FMA", "GGML_F16C", "GGML_BMI2", "GGML_AVX_VNNI", "GGML_AVX512",
        "GGML_AVX512_VBMI", "GGML_AVX512_VNNI", "GGML_AVX512_BF16"}
    assert on["GGML_AMX_TILE"] == on["GGML_AMX_INT8"] == on["GGML_AMX_BF16"] == "OFF"
    assert "this CPU has AMX" in why and "20824" in why


def test_amd_and_avx2_machines_keep_what_native_would_give_them():
    zen4 = switches(peer.cmake_args(peer.cpu_flags(ZEN4), "x86_64")[0])
    assert zen4["GGML_AVX512"] == zen4["GGML_AVX512_BF16"] == "ON" and zen4["GGML_AVX_VNNI"] == "OFF"
    haswell, why = peer.cmake_args(peer.cpu_flags(HASWELL), "x86_64")
    on = switches(haswell)
    assert on["GGML_AVX2"] == on["GGML_FMA"] == on["GGML_F16C"] == "ON"
    assert on["GGML_AVX512"] == on["GGML_AVX512_VNNI"] == "OFF"   # it would not run there
    assert "AMX off (this CPU has none)" in why


def test_other_machines_keep_the_native_build():
    assert peer.cmake_args({"neon", "asimd"}, "aarch64") == ([], "native build (aarch64: no AMX path to avoid)")
    assert peer.cmake_args(None, "x86_64")[0] == []   # no /proc/cpuinfo: nothing to read the flags from
    assert peer.cpu_flags("processor : 0\n") is None


def test_an_amx_machine_takes_the_flags_path_and_its_own_wheel(monkeypatch, tmp_path):
    """install() on a faked AMX report: the wheel is built with those flags, in a cache folder of their own."""
    amx = peer.cpu_flags(SAPPHIRE_RAPIDS)
    monkeypatch.setattr(peer, "cpu_flags", lambda: amx)
    monkeypatch.setattr(peer, "installed_record", lambda: None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    built, pips = [], []
    monkeypatch.setattr(peer, "build_wheel", lambda version, args: built.append(args) or tmp_path / "x.whl")
    monkeypatch.setattr(peer, "_pip", lambda *args, env=None: pips.append(args))
    monkeypatch.setattr(peer, "bundled_gguf", lambda: None)
    monkeypatch.setattr(peer.importlib.util, "find_spec", lambda name: type("S", (), {"origin": str(tmp_path / "i.py")}))
    assert peer.install() == 0
    assert len(built) == 1 and "-DGGML_AMX_INT8=OFF" in built[0] and "-DGGML_NATIVE=OFF" in built[0]
    assert pips[0] == ("install", "--force-reinstall", "--no-deps", str(tmp_path / "x.whl"))
    assert (tmp_path / peer.RECORD).exists()   # how it was built, beside the package


def test_the_installed_peer_runs_the_probe(tmp_path):
    pytest.importorskip("llama_cpp", reason='llama.cpp not installed (pip install "llama-cpp-python[server]")')
    gguf = peer.bundled_gguf()
    if gguf is None:
        pytest.skip("the bundled model is not installed")
    assert peer.probe(gguf) == ""


def test_a_probe_that_dies_names_the_signal(monkeypatch, tmp_path):
    monkeypatch.setattr(peer, "PROBE", f"import os, signal; os.kill(os.getpid(), signal.{signal.SIGSEGV.name})")
    model = tmp_path / "m.gguf"
    assert peer.probe(model) == "died with signal 11 (SIGSEGV) on a two-token prompt of m.gguf"
    monkeypatch.setattr(peer, "PROBE", "import sys; sys.exit('no such file')")
    assert peer.probe(model) == "exited with status 1 on a two-token prompt of m.gguf: no such file"


def test_make_builds_the_peer_this_way_before_the_test_extras():
    import subprocess
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    stamp = root / ".venv" / ".installed-test"
    done = subprocess.run(["make", "-n", "-W", "tools/llama_cpp_peer.py", str(stamp.relative_to(root))],
                          cwd=root, capture_output=True, text=True, timeout=60)
    lines = done.stdout.splitlines()
    peer_line = next(i for i, line in enumerate(lines) if "tools/llama_cpp_peer.py" in line)
    extras_line = next(i for i, line in enumerate(lines) if '-e ".[test]"' in line)
    assert peer_line < extras_line, done.stdout
    assert sys.executable  # the Makefile's python, not this one: make -n only prints
