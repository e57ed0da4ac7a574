"""A test's own cache folder (XDG_CACHE_HOME) that keeps this machine's build of the CPU kernels.

Tests that must not write into the user's cache (compare series, fitted profiles) point
XDG_CACHE_HOME at a temporary folder; an engine started under it would otherwise compile the
kernels again (10-20 s a test). The build is linked in, as it is: the same sources, compiler and
CPU, so the same library the user's cache holds."""
from __future__ import annotations

import os
from pathlib import Path


def private_cache_home(monkeypatch, folder: Path) -> Path:
    from backend import kernels
    built = kernels.library_path()
    if kernels.load() is not None and built.exists():
        ours = folder / "phasescope"
        ours.mkdir(parents=True, exist_ok=True)
        os.symlink(built, ours / built.name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder))
    return folder
