"""The Compare-policies folders under the cache (compare_root), kept to a bounded
size: each new series first removes the oldest series until the rest fit in COMPARE_CACHE_BYTES
($PHASESCOPE_COMPARE_CACHE_MB to change it), and File > Clear Compare-policies cache removes them
all. A series still shown as references is never removed under the window's feet: its folders are
in use. (prune_series and clear_series need no Qt; CompareCache applies them for the window.)"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

from PySide6 import QtCore

COMPARE_CACHE_BYTES = 512 * 1024 * 1024


def compare_root() -> Path:
    """Where the series' folders go: $XDG_CACHE_HOME/phasescope/compare, else ~/.cache/phasescope/compare."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "phasescope" / "compare"


def cache_limit() -> int:
    """The bound in bytes: $PHASESCOPE_COMPARE_CACHE_MB when set (a whole number), else 512 MiB."""
    text = os.environ.get("PHASESCOPE_COMPARE_CACHE_MB", "").strip()
    return int(text) * 1024 * 1024 if text.isdigit() else COMPARE_CACHE_BYTES


def folder_bytes(folder: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(folder):
        for name in files:
            try:
                total += (Path(dirpath) / name).stat().st_size
            except OSError:   # removed while we counted
                pass
    return total


def series_folders(root: Path) -> list[Path]:
    """The series' folders, oldest first (their names start with the time they were made)."""
    if not root.is_dir():
        return []
    folders = [p for p in root.iterdir() if p.is_dir()]
    return sorted(folders, key=lambda p: (p.stat().st_mtime, p.name))


def prune_series(root: Path, limit: int, keep: tuple[Path, ...] = ()) -> list[Path]:
    """Remove the oldest series until the others total at most `limit` bytes; the folders in `keep`
    (and anything under them) stay whatever their size. The folders removed."""
    folders = series_folders(root)
    sizes = {p: folder_bytes(p) for p in folders}
    total = sum(sizes.values())
    kept = {Path(k).resolve() for k in keep}
    removed = []
    for folder in folders:
        if total <= limit:
            break
        if folder.resolve() in kept:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        total -= sizes[folder]
        removed.append(folder)
    return removed


def clear_series(root: Path, keep: tuple[Path, ...] = ()) -> tuple[int, int]:
    """Remove every series but those in `keep`: (folders removed, bytes freed)."""
    kept = {Path(k).resolve() for k in keep}
    count = freed = 0
    for folder in series_folders(root):
        if folder.resolve() in kept:
            continue
        freed += folder_bytes(folder)
        shutil.rmtree(folder, ignore_errors=True)
        count += 1
    return count, freed


class CompareCache(QtCore.QObject):
    """The cache as the window uses it: `references` (the ReferenceSet) and `series_folder()` (the
    folder of the series under way, or None) name the folders in use."""

    message = QtCore.Signal(str)

    def __init__(self, references, series_folder: Callable[[], Path | None], parent: QtCore.QObject | None = None):
        super().__init__(parent)
        self.references = references
        self.series_folder = series_folder

    def series_in_use(self) -> tuple[Path, ...]:
        """The series folders the window uses: the one under way and those its references come from."""
        root = compare_root().resolve()
        current = self.series_folder()
        used = {current} if current is not None else set()
        for ref in self.references.items:
            folder = Path(getattr(ref, "folder", "") or "").resolve()
            if folder.is_relative_to(root) and folder != root:
                used.add(root / folder.relative_to(root).parts[0])
        return tuple(used)

    def prune(self) -> list[Path]:
        return prune_series(compare_root(), cache_limit(), self.series_in_use())

    def clear(self) -> tuple[int, int]:
        root = compare_root()
        count, freed = clear_series(root, self.series_in_use())
        self.message.emit(f"Removed {count} Compare-policies folder{'s' if count != 1 else ''} "
                          f"({freed / 1e6:,.1f} MB) from {root}"
                          + ("; the ones in use as references are kept" if self.series_in_use() else ""))
        return count, freed
