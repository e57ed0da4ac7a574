"""One run from settings to records: choose the target that runs it, and run it.

`execute` is what the CLI and the window's engine process call. Every target has the same
signature (`events.Target`: config, emit, should_stop -> RunFinished) and streams the same
events (Progress, ModelLoaded, RequestsArrived, a RecordBatch per step); nothing imports back
from here:

- the local engine (`targets.local.run_local`) for `run` and `load`;
- a remote OpenAI-compatible server (`targets.remote.target.run_remote`) when the config names one;
- the simulator (`targets.simulated.run_simulated`) with `config.simulate`: the real scheduler,
  each step priced on `config.profile` by a cost model, on a virtual clock;
- the disaggregated policy: prefill and decode engine processes (`targets.disaggregated`), or
  prefill and decode devices with a KV link between them, simulated
  (`targets.disaggregated.simulated`);
- a batch-size, prompt-length or precision sweep (`sweeps.steps.run_step_sweep`): each point a
  few `run` and `load` configs through whichever of these targets runs them (measured or simulated);
- a load sweep (`sweeps.load.run_load_sweep`, `sweep rate|concurrency`): one `load` run per
  point through whichever of these targets runs `load` for the config; `sweep pd-ratio`
  (`sweeps.pd_ratio.run_pd_ratio_sweep`): one simulated disaggregated `load` per split.

With `config.repeats` N > 1 the same target runs N times back to back on one ModelCache (the
model loaded once; each run still warms up before its timed steps), each repeat announced by a
RepeatStarted and its events streamed as they come; the last repeat's RunFinished comes back
with `repeats` holding every repeat's figures and their intervals (and, with an output folder,
repeat-K folders beside repeats.csv and repeats.json: backend.results.repeats).
"""
from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Callable

from backend.config import RunConfig, config_dict
from backend.errors import InputError
from backend.events import Emit, PrecisionPoint, Progress, RepeatStarted, RunFinished, SweepPoint, Target
from backend.records import RecordBatch
from backend.loaders.cache import ModelCache

SWEEP_MODES = ("sweep-batch", "sweep-prompt", "sweep-precision")
LOCAL_MODES = ("batch", "load")
LOAD_SWEEP_MODES = ("sweep-rate", "sweep-concurrency")


def execute(config: RunConfig, emit: Emit, should_stop: Callable[[], bool], retain_records: bool = True,
            models: ModelCache | None = None) -> RunFinished:
    """Run `config` to the end (or until should_stop), emitting events; InputError for bad settings.

    With retain_records=False the returned RunData holds the request records only: steps and
    tokens go to `emit` and to the output folder as they happen, so memory stays flat however
    long the run. `models` keeps the model loaded for the next run.
    """
    from backend.engine.threads import apply_threads
    repeats = config.repeats
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise InputError(f"--repeats must be a positive whole number, got {repeats!r}")
    if config.profile:
        from backend.roofline.profiles import find_profile
        find_profile(config.profile)   # a malformed profile file is refused before anything loads
    apply_threads(config.threads)
    target = target_for(config, models or ModelCache(), retain_records)
    if repeats == 1:
        return target(config, emit, should_stop)
    return execute_repeats(config, target, emit, should_stop)


def execute_repeats(config: RunConfig, target: Target, emit: Emit, should_stop: Callable[[], bool]) -> RunFinished:
    """`target` run config.repeats times; a repeat that fails or is stopped ends the series and
    is left out of the figures (its folder keeps what it wrote)."""
    from backend.results.export import ensure_writable
    from backend.results.repeats import repeat_figures, repeat_folder, summarize_repeats, write_repeats
    from backend.run_info import RunInfo
    out = ensure_writable(config.out_dir) if config.out_dir else None
    figures: list[dict] = []
    run_ids: list[str] = []
    folders: list[str] = []
    finished, note = None, ""
    for k in range(1, config.repeats + 1):
        if should_stop():
            note = f"stopped before repeat {k}"
            break
        emit(RepeatStarted(k, config.repeats))
        emit(Progress(f"repeat {k} of {config.repeats}", (k - 1) / config.repeats))
        one = replace(config, out_dir=str(repeat_folder(out, k)) if out is not None else None)
        durations: dict[str, list[float]] = {}
        points: list = []

        def capture(event, durations=durations, points=points) -> None:
            if isinstance(event, RecordBatch):
                for step in event.steps:
                    durations.setdefault(step.phase.value, []).append(step.duration_ms)
            elif isinstance(event, (SweepPoint, PrecisionPoint)):
                points.append(event)
            emit(event)
        finished = target(one, capture, should_stop)
        if finished.error or finished.stopped:
            note = f"repeat {k} {'failed' if finished.error else 'was stopped'}: left out of the figures"
            break
        figures.append(repeat_figures(finished.summary, durations, points))
        run_ids.append(finished.run_id)
        folders.append(one.out_dir or "")
    if finished is None:
        return RunFinished("", stopped=True)
    summary = summarize_repeats(figures, config.repeats, run_ids, folders if out is not None else [], note)
    if out is not None and figures:
        write_repeats(out, summary, config_dict(config), finished.data.info if finished.data else RunInfo())
    finished.repeats = summary
    return finished


def target_for(config: RunConfig, models: ModelCache, retain_records: bool) -> Target:
    """The target that runs this config."""
    if config.engine.policy == "disaggregated" and config.endpoint is None and config.mode == "load":
        if config.simulate:
            from backend.targets.disaggregated.simulated import run_simulated_disaggregated
            return partial(run_simulated_disaggregated, retain_records=retain_records)
        from backend.targets.disaggregated.coordinator import run_disaggregated
        return partial(run_disaggregated, retain_records=retain_records)
    if config.mode == "sweep-pd-ratio":   # each split a load run through the simulated disaggregated policy
        from backend.sweeps.pd_ratio import run_pd_ratio_sweep
        inner = target_for(replace(config, mode="load", sweep=None, simulate=True,
                                   engine=replace(config.engine, policy="disaggregated")), models, retain_records=False)
        return partial(run_pd_ratio_sweep, target=inner)
    if config.mode in LOAD_SWEEP_MODES:   # each point a load run through the target that runs `load`
        from backend.sweeps.load import run_load_sweep
        inner = target_for(replace(config, mode="load", sweep=None), models, retain_records=False)
        return partial(run_load_sweep, target=inner)
    if config.mode in SWEEP_MODES:   # each point a few `run` and `load` configs through the target that runs them
        from backend.sweeps.steps import run_step_sweep
        inner = target_for(replace(config, mode="batch", sweep=None, repeats=1), models, retain_records=True)
        return partial(run_step_sweep, target=inner)
    if config.simulate:
        from backend.targets.simulated import run_simulated
        return partial(run_simulated, retain_records=retain_records)
    if config.endpoint is not None:
        from backend.targets.remote.target import run_remote
        return run_remote
    if config.mode in LOCAL_MODES:
        from backend.targets.local import run_local
        return partial(run_local, retain_records=retain_records, models=models)
    raise InputError(f"unknown run mode {config.mode!r}: use batch, load, sweep-batch, sweep-prompt, sweep-precision, "
                     f"sweep-rate, sweep-concurrency or sweep-pd-ratio")
