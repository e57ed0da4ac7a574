"""The window's engine process, started before the window is built, with the model it will ask for.

A later start of the app spends most of its first seconds importing: the window's process its
Qt, pyqtgraph and torch, the engine process its torch and the engine, then reading the model.
Started one after the other, the first decode step came after both (5 s here); started at
once, on two cores, they overlap. So the program's start (gui/app.py) starts the engine process
before it imports anything of the window's, and asks it to load the model the window's last run
used, which the window restores as its setting; its Run then finds the model loaded.

What the last run used is kept by the engine process itself, in one small JSON file beside the
window's settings (backend.files.config_dir): the model (name, device, dtype, prefill math) and
the threads of its last Run or Warm that loaded a model, or nothing when that was a simulation,
a remote server's run or a model that failed to load (then nothing is preloaded). A guess that
turns out wrong costs only the time it took: the Run on another model starts a fresh process,
as it always has.
"""
from __future__ import annotations

import json

from backend.config import ModelChoice, RunConfig
from backend.files import WriteError, config_dir, write_files

FILE = "engine-model.json"
_FIELDS = ("name", "device", "dtype", "prefill_math")


def remember(config: RunConfig | None) -> None:
    """Keep the model of this config for the next start's preload (None: preload nothing); a
    failure to write costs the next start its head start, nothing else."""
    kept = None if config is None else {"model": {f: getattr(config.model, f) for f in _FIELDS},
                                        "threads": config.threads}
    text = json.dumps({"preload": kept}, indent=1)
    folder = config_dir()
    try:
        if (folder / FILE).read_text(encoding="utf-8") == text:
            return
    except (OSError, UnicodeDecodeError):
        pass
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_files(folder, {FILE: text})
    except (OSError, WriteError):
        pass


def recall(model: str | None = None) -> RunConfig | None:
    """The settings to preload: the last kept ones (with `model`'s name instead, where the command line
    names one), the window's defaults where none were ever kept, None where the last run loaded nothing."""
    from backend.engine.threads import window_default_threads
    kept: object = {"model": {}, "threads": window_default_threads()}   # a first start: the window's defaults
    try:
        kept = json.loads((config_dir() / FILE).read_text(encoding="utf-8"))["preload"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        pass
    if kept is None:
        return None
    try:
        fields = {f: v for f, v in kept["model"].items() if f in _FIELDS and isinstance(v, str)}
        threads = kept.get("threads")
    except (AttributeError, KeyError, TypeError):   # a file that is not ours: the defaults
        fields, threads = {}, window_default_threads()
    if model:
        fields["name"] = model
    threads = threads if isinstance(threads, int) and not isinstance(threads, bool) and threads > 0 else None
    return RunConfig(model=ModelChoice(**fields), threads=threads)
