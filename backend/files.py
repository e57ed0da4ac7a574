"""Writing files so that a failure (a full disk) leaves nothing half-written and nothing replaced;
the user's configuration folder (profiles, remembered model folders); reading a config.json."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from backend.errors import InputError, RunError


def read_config_json(path: Path) -> dict:
    """A transformers config.json's top-level object; one line for a file that is not one."""
    import json
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not a readable config.json ({exc})") from None
    if not isinstance(config, dict):
        raise InputError(f"{path}: not a config.json (its top level is not an object)")
    return config


class WriteError(RunError):
    """A file could not be written: `path`, and the system's `reason` (e.g. No space left on device)."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"cannot write {path}: {reason}")
        self.path = path
        self.reason = reason


def write_files(folder: Path, contents: dict[str, str | Path], fsync: bool = False) -> None:
    """Write every file to a temporary beside it, then rename them all: never a half-written file.

    A content is the file's text, or a Path whose file is copied. A failure (a full disk)
    leaves no temporary behind and every file already in the folder as it was: nothing is
    renamed until all of them are written; it raises WriteError. With fsync, each text is
    on the disk before its rename (a file that must survive a power cut: a profile).
    """
    staged: list[tuple[str, Path]] = []
    target = folder
    try:
        for name, content in contents.items():
            target = folder / name
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
            staged.append((tmp, target))
            if isinstance(content, Path):
                os.close(fd)
                shutil.copyfile(content, tmp)
                continue
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
                f.write(content)
                if fsync:
                    f.flush()
                    os.fsync(f.fileno())
        for tmp, target in staged:
            os.replace(tmp, target)
    except OSError as exc:
        raise WriteError(target, exc.strerror or str(exc)) from None
    finally:
        for tmp, _ in staged:
            Path(tmp).unlink(missing_ok=True)   # already renamed, unless something failed


def config_dir() -> Path:
    """$PHASESCOPE_CONFIG_DIR, else $XDG_CONFIG_HOME/phasescope, else ~/.config/phasescope."""
    if os.environ.get("PHASESCOPE_CONFIG_DIR"):
        return Path(os.environ["PHASESCOPE_CONFIG_DIR"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "phasescope"


def data_home() -> Path:
    """$XDG_DATA_HOME, else ~/.local/share: where the window keeps a run stopped at shutdown and
    where a desktop entry and its icon are installed."""
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
