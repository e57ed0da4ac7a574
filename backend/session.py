"""One run from settings to records: choose the target that runs it, and run it.

`execute` is what the CLI and the window's engine process call. Every target has the same
signature (`events.Target`: config, emit, should_stop -> RunFinished) and streams the same
events (Progress, ModelLoaded, RequestsArrived, a RecordBatch per step); nothing imports back
from here:

- the local engine (`engine.local.run_local`) for `run` and `load`;
- a batch-size or prompt-length sweep over the same model (`engine.sweep.run_sweep`), or the
  same steps at each weight precision (`engine.precision_sweep.run_precision_sweep`);
- a remote OpenAI-compatible server (`remote.target.run_remote`) when the config names one.
"""
from __future__ import annotations

from functools import partial
from typing import Callable

from backend.config import RunConfig
from backend.errors import InputError
from backend.events import Emit, RunFinished, Target
from backend.loaders.cache import ModelCache

SWEEP_MODES = ("sweep-batch", "sweep-prompt", "sweep-precision")
LOCAL_MODES = ("batch", "load")


def execute(config: RunConfig, emit: Emit, should_stop: Callable[[], bool], retain_records: bool = True,
            models: ModelCache | None = None) -> RunFinished:
    """Run `config` to the end (or until should_stop), emitting events; InputError for bad settings.

    With retain_records=False the returned RunData holds the request records only: steps and
    tokens go to `emit` and to the output folder as they happen, so memory stays flat however
    long the run. `models` keeps the model loaded for the next run.
    """
    from backend.engine.threads import apply_threads
    if config.profile:
        from backend.roofline.profiles import find_profile
        find_profile(config.profile)   # a malformed profile file is refused before anything loads
    apply_threads(config.threads)
    return target_for(config, models or ModelCache(), retain_records)(config, emit, should_stop)


def target_for(config: RunConfig, models: ModelCache, retain_records: bool) -> Target:
    """The target that runs this config."""
    if config.endpoint is not None:
        from backend.remote.target import run_remote
        return run_remote
    if config.mode == "sweep-precision":
        from backend.engine.precision_sweep import run_precision_sweep
        return partial(run_precision_sweep, models=models)
    if config.mode in SWEEP_MODES:
        from backend.engine.sweep import run_sweep
        return partial(run_sweep, models=models)
    if config.mode in LOCAL_MODES:
        from backend.engine.local import run_local
        return partial(run_local, retain_records=retain_records, models=models)
    raise InputError(f"unknown run mode {config.mode!r}: use batch, load, sweep-batch, sweep-prompt or sweep-precision")
