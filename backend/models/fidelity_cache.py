"""The bfloat16 fidelity probe's verdict, kept per model file and arithmetic: the next start of the
same model skips the probe (two prefills of 96 tokens: half a second for the bundled model, far more
for a large one). Kept in the kernels' cache folder, beside their builds, as one small JSON file."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from backend.files import WriteError, write_files

FILE = "fidelity.json"
MAX_ENTRIES = 64   # the oldest verdicts go first


def key_of(weights: str, precision: str, unit: str, kernels_build: str, tokens: int) -> str:
    """What the verdict depends on: the weights (their files' identity, loaders/cache.py's
    weights_identity), their format, the bfloat16 unit, the kernels' build (their sources' digest)
    and the probe's length."""
    what = [weights, precision, unit, kernels_build, str(tokens)]
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


def recall(key: str, folder: Path | None = None) -> dict | None:
    """The figures kept for `key` (fidelity.Fidelity's fields), or None."""
    entry = _read(folder).get(key)
    return entry if isinstance(entry, dict) else None


def remember(key: str, figures: dict, folder: Path | None = None) -> None:
    """Keep `figures` for `key` (a cache: a failure to write it costs the next start a probe, nothing else)."""
    kept = _read(folder)
    kept.pop(key, None)
    kept[key] = figures
    while len(kept) > MAX_ENTRIES:
        kept.pop(next(iter(kept)))
    try:
        write_files(_path(folder).parent, {FILE: json.dumps(kept, indent=1)})
    except (OSError, WriteError):
        pass
