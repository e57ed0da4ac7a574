"""One run from settings to records: choose the target that runs it, and run it.

`execute` is what the CLI and the window's engine process call. Every target has the same
signature (`events.Target`: config, emit, should_stop -> RunFinished) and streams the same
events (Progress, ModelLoaded, RequestsArrived, a RecordBatch per step); nothing imports back
from here.

Two tables say who runs what. RUNNERS maps each RunKind to what builds its target: `run` and
`load` go to one target; a batch-size, prompt-length or precision sweep (`sweeps.steps`) runs a
few `run`s a point, a rate or concurrency sweep (`sweeps.load`) one `load` a point, each through
the target that runs it; `sweep pd-ratio` (`sweeps.pd_ratio`) one simulated disaggregated `load`
a split; `sweep depth` (`sweeps.depth`) pairs of requests at each context depth, straight to a
server or each a `run` through the engine. TARGETS maps each TargetKind (`target_kind` picks it from the settings) to its target:
the local engine (`targets.local`), the simulator (`sim.target`: the real scheduler, each
step priced on `config.profile` by a cost model, on a virtual clock), a remote OpenAI-compatible
server (`targets.remote`), prefill and decode engine processes (`targets.disaggregated`) or
their simulation with a KV link between the devices (`sim.disaggregated`).

With `config.repeats` N > 1 the same target runs N times back to back on one ModelCache (the
model loaded once; each run still warms up before its timed steps), each repeat announced by a
RepeatStarted and its events streamed as they come; the last repeat's RunFinished comes back
with `repeats` holding every repeat's figures and their intervals (and, with an output folder,
repeat-K folders beside repeats.csv and repeats.json: backend.results.repeats).
"""
from __future__ import annotations

from dataclasses import replace
from enum import Enum
from functools import partial
from typing import Callable

from backend.config import STEP_SWEEPS, RunConfig, RunKind, config_dict
from backend.engine.threads import apply_threads
from backend.errors import InputError
from backend.events import Emit, PrecisionPoint, Progress, RepeatStarted, RunFinished, SweepPoint, Target
from backend.loaders.cache import ModelCache
from backend.records import RecordBatch
from backend.run_info import RunInfo
from backend.results.export import ensure_writable
from backend.results.repeats import repeat_figures, repeat_folder, summarize_repeats, write_repeats
from backend.roofline.profiles import find_profile
from backend.sweeps.depth import run_depth_sweep
from backend.sweeps.load import run_load_sweep
from backend.sweeps.pd_ratio import run_pd_ratio_sweep
from backend.sweeps.steps import run_step_sweep
from backend.targets.disaggregated.coordinator import run_disaggregated
from backend.sim.disaggregated import run_simulated_disaggregated
from backend.targets.local import run_local
from backend.targets.remote.target import run_remote
from backend.sim.target import run_simulated


def execute(config: RunConfig, emit: Emit, should_stop: Callable[[], bool], retain_records: bool = True,
            models: ModelCache | None = None) -> RunFinished:
    """Run `config` to the end (or until should_stop), emitting events; InputError for bad settings.

    With retain_records=False the returned RunData holds the request records only: steps and
    tokens go to `emit` and to the output folder as they happen, so memory stays flat however
    long the run. `models` keeps the model loaded for the next run.
    """
    repeats = config.repeats
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise InputError(f"--repeats must be a positive whole number, got {repeats!r}")
    if config.profile:
        find_profile(config.profile)   # a malformed profile file is refused before anything loads
    target = target_for(config, models or ModelCache(), retain_records)   # a kind without its settings: refused here
    apply_threads(config.threads)
    if repeats == 1:
        return target(config, emit, should_stop)
    return execute_repeats(config, target, emit, should_stop)


def execute_repeats(config: RunConfig, target: Target, emit: Emit, should_stop: Callable[[], bool]) -> RunFinished:
    """`target` run config.repeats times; a repeat that fails or is stopped ends the series and
    is left out of the figures (its folder keeps what it wrote)."""
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


class TargetKind(Enum):
    """What executes one `run` or `load`."""

    LOCAL = "local"                                       # the engine in this process
    SIMULATED = "simulated"                               # the scheduler, each step priced by a cost model
    REMOTE = "remote"                                     # an OpenAI-compatible server
    DISAGGREGATED = "disaggregated"                       # prefill and decode engine processes
    SIMULATED_DISAGGREGATED = "simulated disaggregated"   # prefill and decode devices with a KV link


def target_kind(config: RunConfig) -> TargetKind:
    """Which target runs one `run` or `load`. The disaggregated policy takes a load run that names no
    server (a batch or a server's run under it is refused by the target that gets it); then
    --simulate, then --endpoint; the local engine otherwise."""
    if config.engine.policy == "disaggregated" and config.endpoint is None and config.mode == RunKind.LOAD:
        return TargetKind.SIMULATED_DISAGGREGATED if config.simulate else TargetKind.DISAGGREGATED
    if config.simulate:
        return TargetKind.SIMULATED
    if config.endpoint is not None:
        return TargetKind.REMOTE
    return TargetKind.LOCAL


# each target with what it is given besides (config, emit, should_stop): the loaded models, and
# whether it keeps the step records in memory (else they go to the emit and the folder only)
TARGETS: dict[TargetKind, Callable[[ModelCache, bool], Target]] = {
    TargetKind.LOCAL: lambda models, retain: partial(run_local, retain_records=retain, models=models),
    TargetKind.SIMULATED: lambda models, retain: partial(run_simulated, retain_records=retain),
    TargetKind.REMOTE: lambda models, retain: run_remote,
    TargetKind.DISAGGREGATED: lambda models, retain: partial(run_disaggregated, retain_records=retain),
    TargetKind.SIMULATED_DISAGGREGATED: lambda models, retain: partial(run_simulated_disaggregated,
                                                                       retain_records=retain),
}


def one_run(config: RunConfig, models: ModelCache, retain_records: bool) -> Target:
    """`run` and `load`: the target of the table."""
    return TARGETS[target_kind(config)](models, retain_records)


def step_sweep(config: RunConfig, models: ModelCache, retain_records: bool) -> Target:
    """A batch-size, prompt-length or precision sweep: each point a few `run`s through their target."""
    inner = one_run(replace(config, mode=RunKind.BATCH, sweep=None, repeats=1), models, retain_records=True)
    return partial(run_step_sweep, target=inner)


def load_sweep(config: RunConfig, models: ModelCache, retain_records: bool) -> Target:
    """A rate or concurrency sweep: each point a `load` through the target that runs it."""
    inner = one_run(replace(config, mode=RunKind.LOAD, sweep=None), models, retain_records=False)
    return partial(run_load_sweep, target=inner)


def pd_ratio_sweep(config: RunConfig, models: ModelCache, retain_records: bool) -> Target:
    """A prefill:decode split sweep: each split a `load` under the simulated disaggregated policy."""
    inner = one_run(replace(config, mode=RunKind.LOAD, sweep=None, simulate=True,
                            engine=replace(config.engine, policy="disaggregated")), models, retain_records=False)
    return partial(run_pd_ratio_sweep, target=inner)


def depth_sweep(config: RunConfig, models: ModelCache, retain_records: bool) -> Target:
    """A context-depth sweep: pairs of requests straight to the server, or each request a `run` through
    the engine (or the simulator) that runs one."""
    if config.endpoint is not None:
        return run_depth_sweep
    inner = one_run(replace(config, mode=RunKind.BATCH, sweep=None, repeats=1), models, retain_records=True)
    return partial(run_depth_sweep, target=inner)


Runner = Callable[[RunConfig, ModelCache, bool], Target]
# each kind of run with what builds its target from (config, models, retain_records)
RUNNERS: dict[RunKind, Runner] = {
    RunKind.BATCH: one_run,
    RunKind.LOAD: one_run,
    RunKind.SWEEP_BATCH: step_sweep,
    RunKind.SWEEP_PROMPT: step_sweep,
    RunKind.SWEEP_PRECISION: step_sweep,
    RunKind.SWEEP_RATE: load_sweep,
    RunKind.SWEEP_CONCURRENCY: load_sweep,
    RunKind.SWEEP_PD_RATIO: pd_ratio_sweep,
    RunKind.SWEEP_DEPTH: depth_sweep,
}


def target_for(config: RunConfig, models: ModelCache, retain_records: bool) -> Target:
    """The target that runs this config; InputError for an unknown kind or a kind without its settings."""
    config.check_kind()
    check_spec_target(config)
    return RUNNERS[RunKind.parse(config.mode)](config, models, retain_records)


def check_spec_target(config: RunConfig) -> None:
    """Speculative decoding runs on the local engine (and the disaggregated policy's decode workers), in `run`,
    `load` and the load sweeps, and on the simulator (its replicas and disaggregated pools too); one line elsewhere."""
    if not config.spec.is_on:
        return
    config.spec.validate()
    kind = RunKind.parse(config.mode)
    if kind in STEP_SWEEPS:
        raise InputError(f"--spec: `{kind.command}` times fixed steps, which do not speculate; use `run` or `load`")
    target = target_kind(replace(config, mode=RunKind.LOAD if kind.needs_workload else RunKind.BATCH))
    if target is TargetKind.REMOTE:
        raise InputError("--spec runs on the local engine and the simulator only: a server speculates by its own "
                         "settings (its counters are read from /metrics)")
    spec = config.spec
    if target in (TargetKind.LOCAL, TargetKind.DISAGGREGATED) and (
            spec.acceptance is not None or spec.draft_cost is not None or spec.spec_from):
        raise InputError("--spec-acceptance, --spec-draft-cost and --spec-from price the simulator's guesses "
                         "(--simulate); the local engine measures its own")
