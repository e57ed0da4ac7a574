"""The wheel works: built from a copy of the checkout, installed into a fresh virtual environment
outside it, the `phasescope` command lists models and profiles and runs `tiny`.

Offline: the wheel is built without build isolation where this interpreter has setuptools>=68, and
installed with --no-deps --no-index. The fresh environment reaches this one's dependencies
through a plain path in a .pth file, which does not run this environment's own .pth files, so
the checkout's editable install (a .pth and a finder) cannot leak in; the test checks that the
`backend`, `gui` and `profiles` it imports are the installed ones.
"""
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Not part of the source the wheel is built from: environments, build outputs, run outputs, caches.
NOT_SOURCE = (".git", ".venv", "venv", "build", "dist", "*.egg-info", "__pycache__", "runs", ".pytest_cache",
              ".hypothesis", "*.partial", "*.pyc")
KERNEL_SOURCES = sorted(p.name for p in (ROOT / "backend" / "kernels").glob("*.[ch]"))
SHIPPED_PROFILES = sorted(p.stem for p in (ROOT / "profiles").glob("*.toml"))
SHIPPED_WORKLOADS = sorted(p.stem for p in (ROOT / "profiles" / "workloads").glob("*.toml"))

# Run inside the fresh environment: where each package comes from, what it finds, and what the
# console script's entry point sets up.
PROBE = r"""
import json, os, sys, sysconfig
from importlib import metadata
os.environ.pop("OMP_WAIT_POLICY", None)
dist = metadata.distribution("phasescope")
(script,) = [ep for ep in dist.entry_points if ep.group == "console_scripts" and ep.name == "phasescope"]
script.load()
omp = os.environ.get("OMP_WAIT_POLICY")
import backend, gui, profiles
import gui.main_window   # the window's modules import (no window is opened)
from backend import kernels
from backend.roofline.profiles import SHIPPED_DIR, list_profiles
from backend.workload.spec import WORKLOAD_DIR, list_workloads, load_workload
print(json.dumps({
    "site": sysconfig.get_paths()["purelib"],
    "backend": backend.__file__, "gui": gui.main_window.__file__, "profiles": profiles.__file__,
    "dist": str(dist.locate_file("")), "requires": dist.requires or [],
    "entry_point": script.value, "omp": omp,
    "kernel_dir": str(kernels.HERE), "kernel_sources": sorted(p.name for p in kernels.HERE.glob("*.[ch]")),
    "kernels_loaded": kernels.load() is not None, "kernels_reason": kernels.reason(),
    "shipped_dir": str(SHIPPED_DIR), "profiles_found": [p.key for p in list_profiles()],
    "workload_dir": str(WORKLOAD_DIR), "workloads_found": [n for n in list_workloads() if load_workload(n)],
}))
"""


def _setuptools_major() -> int:
    try:
        return int(metadata.version("setuptools").split(".")[0])
    except (metadata.PackageNotFoundError, ValueError):
        return 0


def _run(args, cwd, env, timeout=300):
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _check(proc, what):
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv folder, its site-packages, environment for its processes, the wheel), once per module."""
    tmp = tmp_path_factory.mktemp("wheel")
    src, wheels, venv = tmp / "src", tmp / "wheels", tmp / "venv"
    # A copy, so that a build/ left in the checkout (stale files) or a concurrent build cannot change the wheel.
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(*NOT_SOURCE), symlinks=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "VIRTUAL_ENV"}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", QT_QPA_PLATFORM="offscreen")
    # Offline with this environment's setuptools (the test extra has it); else pip fetches the build backend.
    isolation = ["--no-build-isolation"] if _setuptools_major() >= 68 else []
    _check(_run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-w", str(wheels), str(src)],
                tmp, env), "building the wheel")
    (wheel,) = wheels.glob("phasescope-*.whl")

    _check(_run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp, env), "creating the venv")
    python = venv / "bin" / "python"
    # Installed before the dependencies' path is added, so pip sees no other phasescope to replace.
    _check(_run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                 "--no-compile", str(wheel)], tmp, env), "installing the wheel")
    purelib = Path(_check(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               tmp, env), "asking the venv").stdout.strip())
    # This environment's site folders as plain paths: their packages importable, their .pth files not run.
    ours = [*site.getsitepackages(), site.getusersitepackages(), sysconfig.get_paths()["purelib"],
            sysconfig.get_paths()["platlib"]]
    deps = [p for p in dict.fromkeys(ours) if Path(p).is_dir()]
    (purelib / "_phasescope_test_deps.pth").write_text("".join(f"{p}\n" for p in deps))
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return venv, purelib, env, wheel


def test_wheel_holds_the_kernel_sources_and_the_shipped_profiles(installed):
    *_, wheel = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in KERNEL_SOURCES:
        assert f"backend/kernels/{name}" in names
    for name in SHIPPED_PROFILES:
        assert f"profiles/{name}.toml" in names
    for name in SHIPPED_WORKLOADS:
        assert f"profiles/workloads/{name}.toml" in names
    assert "profiles/links/interconnects.toml" in names   # the simulated devices' links
    assert "profiles/models/llama-3.1-70b.json" in names   # the simulator's shipped model configs
    assert "profiles/workloads/traces/azure-conv-200.csv" in names   # the azure-trace preset's trace
    assert "profiles/bands.csv" in names   # every simulated figure's band (backend/sim/bands.py)
    assert "gui/icons/phasescope.svg" in names   # the window's icon and the desktop entry's
    # Every package of the checkout is in the wheel (a sub-package that discovery missed fails here).
    for init in [*ROOT.glob("backend/**/__init__.py"), *ROOT.glob("gui/**/__init__.py"), ROOT / "profiles/__init__.py"]:
        assert init.relative_to(ROOT).as_posix() in names
    assert not [n for n in names if n.startswith(("tests/", "bench/", "docs/"))]


def test_installed_package_is_the_one_imported_and_finds_its_data(installed, tmp_path):
    venv, purelib, env, _ = installed
    proc = _check(_run([str(venv / "bin" / "python"), "-c", PROBE], tmp_path, env), "the probe")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(found["site"]).resolve() == purelib.resolve()
    for key in ("backend", "gui", "profiles", "dist", "kernel_dir", "shipped_dir", "workload_dir"):
        path = Path(found[key]).resolve()
        assert path.is_relative_to(purelib.resolve()), f"{key} comes from {path}, not the fresh venv"
        assert not path.is_relative_to(ROOT.resolve()), f"{key} comes from the checkout: {path}"
    assert found["kernel_sources"] == KERNEL_SOURCES
    assert set(SHIPPED_PROFILES) <= set(found["profiles_found"]), found["profiles_found"]
    assert sorted(found["workloads_found"]) == SHIPPED_WORKLOADS
    # The installed script sets what main.py sets, before torch loads.
    assert found["entry_point"] == "gui.app:main"
    assert found["omp"] == "PASSIVE"
    # transformers is an extra, not a requirement.
    assert not [r for r in found["requires"] if r.startswith("transformers") and "extra ==" not in r]
    # The kernels build from the installed sources wherever they build from the checkout's.
    from backend import kernels
    assert found["kernels_loaded"] == (kernels.load() is not None), found["kernels_reason"]


def test_phasescope_command_lists_and_runs(installed, tmp_path):
    venv, _, env, _ = installed
    phasescope = str(venv / "bin" / "phasescope")
    models = _check(_run([phasescope, "models"], tmp_path, env), "phasescope models")
    assert "tiny" in models.stdout
    listed = _check(_run([phasescope, "profiles"], tmp_path, env), "phasescope profiles")
    missing = [key for key in SHIPPED_PROFILES if key not in listed.stdout]
    assert not missing, f"`phasescope profiles` lacks {missing}:\n{listed.stdout}"
    run = _check(_run([phasescope, "run", "--model", "tiny", "--prompt-len", "8", "--output-len", "4"],
                      tmp_path, env), "phasescope run")
    assert "tiny" in run.stdout and "TTFT" in run.stdout, run.stdout
