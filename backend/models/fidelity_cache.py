"""The bfloat16 fidelity probe's verdict, kept per model file and arithmetic: the next start of the
same model skips the probe (two prefills of 96 tokens: half a second for the bundled model, far more
for a large one). Kept in the kernels' cache folder, beside their builds, as one small JSON file."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from backend.files import WriteError, write_files

FILE = "fidelity.json"
MAX_ENTRIES = 64   # the oldest verdicts go first


def file_identity(name: str) -> str | None:
    """The weights' files as (path, size, modification time), or None where there are none to name
    (a hub id not yet resolved, a synthetic shape: the source string identifies those)."""
    from backend.loaders.weights import BUNDLED, bundled_gguf
    path = bundled_gguf() if name == BUNDLED else Path(name).expanduser()
    if path is None or not path.exists():
        return None
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    return ";".join(f"{f.resolve()}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files) or None


def key_of(name: str, source: str, precision: str, unit: str, kernels_build: str, tokens: int) -> str:
    """What the verdict depends on: the weights (their files, or the source string of random ones),
    their format, the bfloat16 unit, the kernels' build (their sources' digest) and the probe's length."""
    what = [file_identity(name) or source, precision, unit, kernels_build, str(tokens)]
    return hashlib.sha256("\n".join(what).encode()).hexdigest()[:24]


def _path(folder: Path | None) -> Path:
    from backend.kernels import cache_folder
    return (folder or cache_folder()) / FILE


def _read(folder: Path | None) -> dict:
    try:
        kept = json.loads(_path(folder).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}     # none yet, or unreadable: the probe runs and writes a fresh file
    return kept if isinstance(kept, dict) else {}


def recall(key: str, folder: Path | None = None):
    """The Fidelity kept for `key`, or None."""
    from backend.models.fidelity import Fidelity
    entry = _read(folder).get(key)
    try:
        return Fidelity(**entry) if isinstance(entry, dict) else None
    except TypeError:   # an older version's fields
        return None


def remember(key: str, found, folder: Path | None = None) -> None:
    """Keep `found` for `key` (a cache: a failure to write it costs the next start a probe, nothing else)."""
    kept = _read(folder)
    kept.pop(key, None)
    kept[key] = dataclasses.asdict(found)
    while len(kept) > MAX_ENTRIES:
        kept.pop(next(iter(kept)))
    try:
        write_files(_path(folder).parent, {FILE: json.dumps(kept, indent=1)})
    except (OSError, WriteError):
        pass
