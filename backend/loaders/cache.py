"""Loading a model for a run, announced, and keeping it for the next run on the same settings."""
from __future__ import annotations

import gc

from backend.config import RunConfig
from backend.events import Emit, Progress


def load(config: RunConfig, emit: Emit):
    """Load the model the config names, announcing it; (the loaded model, its device's name)."""
    from backend.loaders.device import device_name, resolve_device
    from backend.loaders.weights import load_model
    from backend.models import fidelity
    if resolve_device(config.model.device).type == "cpu":
        build_kernels(emit)
    emit(Progress(f"loading {config.model.name}", None))
    # A model loaded before, now dropped, is collected like any garbage. A process's first load
    # has none to drop: what lives then (its imports, ~180,000 objects, in which a collection here
    # found no garbage) leaves the collector's sight at once, so the collection below walks only
    # what the load made (0.15 s less of a later start's load on this machine).
    # Where the automatic collector is off, a window's thread collects (gui/collector.py, while a run
    # runs in a thread of the window's process): a collection here could free Qt objects on this
    # thread and stop both threads for good (seen in the suite, the GIL held), so this one neither
    # collects nor freezes, and the window's collector sees everything.
    owned = gc.isenabled()
    if gc.get_freeze_count():
        gc.unfreeze()
        if owned:
            gc.collect()
    elif owned:
        gc.freeze()
    loaded = load_model(config.model.name, config.model.device, config.model.dtype)
    loaded.math = fidelity.choose(loaded, config.model.prefill_math, weights_identity(config.model.name, loaded),
                                  lambda line: emit(Progress(line, None)))
    loaded.math = fidelity.with_decode(loaded.math, config.model.decode_math)
    # Everything loaded so far (the model's modules, the tokenizer's tables: about 200,000
    # objects) leaves the cyclic collector's sight, so that its collections during the run's
    # steps do not walk it: they were about 5% of a batch-1 decode step's samples (perf).
    if owned:
        gc.collect()
        gc.freeze()
    return loaded, device_name(loaded.device)


def weights_identity(name: str, loaded) -> str:
    """The weights' files as path, size and modification time (a file rewritten is new weights);
    where there is no file (random weights of a synthetic shape), the loaded model's source string."""
    from pathlib import Path
    from backend.loaders.weights import BUNDLED, bundled_gguf
    path = bundled_gguf() if name == BUNDLED else Path(name).expanduser()
    if path is None or not path.exists():
        return loaded.source
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    return ";".join(f"{f.resolve()}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files) or loaded.source


def build_kernels(emit: Emit) -> None:
    """The CPU kernels, compiled now where this machine has no build of them yet, and said so: the
    compiler's one-time cost (seconds to tens of seconds) is a stage of its own, not part of a load."""
    from backend import kernels
    if kernels.build_state() == "to build":
        emit(Progress("compiling the CPU kernels for this CPU (first use only; the build is kept)", None))
        kernels.load()


class ModelCache:
    """Keeps the last model loaded, so that the next run on the same model, device and dtype
    starts at once (the window's engine process holds one; a headless run needs none)."""

    def __init__(self) -> None:
        self._key: tuple | None = None
        self._loaded = None

    @staticmethod
    def _key_of(config: RunConfig) -> tuple:
        choice = config.model
        return choice.name, choice.device, choice.dtype, choice.prefill_math, choice.decode_math

    def holds(self, config: RunConfig) -> bool:
        """Whether the model a run of `config` needs is the one kept here (a local run's: loaded)."""
        return not config.simulate and config.endpoint is None and self._key == self._key_of(config)

    def get(self, config: RunConfig, emit: Emit):
        """(the loaded model, its device's name, whether it was already loaded)."""
        key = self._key_of(config)
        if key == self._key:
            return (*self._loaded, True)
        self._key = self._loaded = None   # the old model's memory goes before the new one is loaded
        self._loaded = load(config, emit)
        self._key = key
        return (*self._loaded, False)

