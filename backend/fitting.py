"""`calibrate --fit` as one job: the runs measured (or read), the cost model fitted, the profile written.

The fitted efficiencies and overheads go into this machine's profile ([simulation] in
this-machine.toml), so `--simulate --profile this-machine` prices steps as this machine ran
them. The error is reported on runs the fit did not see: the check runs, or else each run in
turn left out of a fit on the others, with the placeholder model's error on the same runs
beside it, so the value of fitting shows. The command line prints the FitReport
(backend/cli/fit.py); the window's engine process sends it back and the window shows it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from backend.config import EngineConfig, ModelChoice, RunConfig, RunKind, SweepKind
from backend.run_info import RunInfo
from backend.errors import InputError, RunError
from backend.sim.fitted import KERNELS, FittedOn, fit_roofs
from backend.sim.fit import ErrorReport, MeasuredRun, fit_cost_model, step_errors
from backend.sim.step_time import CostModel

STANDARD_MODEL = "smollm2-135m"
Say = Callable[[str], None]   # one progress line


@dataclass(slots=True)
class FitReport:
    """What a fit found and where it went: the terms, and each held-out set's error."""

    path: str                                  # the profile written
    profile_key: str
    profile_text: str                          # "key (bandwidth, peaks)" as the fit priced on it
    num_runs: int
    model: CostModel
    # (name, the fitted model's error, the placeholder terms' error) per held-out set
    held_out: list[tuple[str, ErrorReport, ErrorReport]] = field(default_factory=list)
    fit_folders: list[str] = field(default_factory=list)


def read_measured(folder: str) -> tuple[MeasuredRun, RunInfo]:
    """A run folder's measured steps and its run.json info; one line refusing a simulated or remote run, or one without steps."""
    from backend.results.export import read_run
    from backend.shape import ModelShape
    from backend.precision import from_info
    run = read_run(folder)
    info = run.info
    if info.is_simulated:
        raise InputError(f"{folder}: a simulated run; fit on runs measured on this machine")
    if info.is_remote or not info.shape:
        raise InputError(f"{folder}: a remote run has no engine steps of this machine to fit on")
    prec = from_info(info)
    if prec is None:
        raise InputError(f"{folder}: run.json does not record the run's dtype")
    steps = [s for s in run.steps if s.duration_ms > 0]
    if not steps:
        raise InputError(f"{folder}: no timed steps")
    from backend.roofline.roofs import math_from_info
    return MeasuredRun(Path(folder).name or str(folder), ModelShape(**info.shape), prec, steps,
                       math_from_info(info)), info


def poisson(seed: int, rate: float, prompt: str, output: str, requests: int):
    """A Poisson workload of synthetic prompts (no tokenizer needed, lengths exact)."""
    from backend.workload.spec import workload_from_dict
    return workload_from_dict({"arrival": "poisson", "rate": rate, "num_requests": requests, "prompt_len": prompt,
                               "output_len": output, "prompt_source": "synthetic", "seed": seed}, f"poisson-{seed}")


def standard_runs() -> list[tuple[str, RunConfig]]:
    """What `calibrate --fit` measures when given no run folders: a batch sweep, a prompt sweep and a
    Poisson workload of the bundled model at float32, each full-length (as bench/sim_vs_measured.py fits on)."""
    from backend.config import SweepSpec
    return [("batch", RunConfig(mode=RunKind.SWEEP_BATCH, sweep=SweepSpec(SweepKind.BATCH, batches=[1, 4, 16],
                                                                          context=256))),
            ("prompt", RunConfig(mode=RunKind.SWEEP_PROMPT, sweep=SweepSpec(SweepKind.PROMPT, lengths=[32, 128, 512]))),
            ("load", RunConfig(mode=RunKind.LOAD, workload=poisson(1, 1.5, "32:256", "16:48", 30),
                               engine=EngineConfig(max_batch=8)))]


def measure_standard_runs(folder: Path, device: str, threads: int | None, say: Say,
                          should_stop: Callable[[], bool] = lambda: False) -> list[str]:
    """The standard runs measured into folder/batch, folder/prompt, folder/load, the model loaded once."""
    from backend.loaders.cache import ModelCache
    from backend.session import execute
    models, folders = ModelCache(), []
    for name, config in standard_runs():
        say(f"measuring {name} into {folder / name}")
        config = replace(config, model=ModelChoice(STANDARD_MODEL, device, "float32"), threads=threads,
                         sampling=replace(config.sampling, ignore_eos=True), out_dir=str(folder / name))
        finished = execute(config, lambda e: None, should_stop, retain_records=False, models=models)
        if finished.error:
            raise RunError(f"measuring {name}: {finished.error}")
        if finished.stopped:
            raise RunError(f"stopped while measuring {name}: nothing was fitted")
        folders.append(str(folder / name))
    return folders


def fit_profile(fit_runs: list[MeasuredRun], check_runs: list[MeasuredRun],
                profile) -> tuple[CostModel, list[tuple[str, ErrorReport, ErrorReport]]]:
    """The model fitted on `fit_runs`, and per held-out set (name, fitted's error, placeholders' error)."""
    placeholder = CostModel.for_profile(replace(profile, simulation={}))
    model = fit_cost_model(fit_runs, profile)
    held_out = []
    if check_runs:
        held_out.append(("the --check runs", step_errors(model, check_runs, profile),
                         step_errors(placeholder, check_runs, profile)))
    elif len(fit_runs) >= 2:   # each run left out of a fit on the others
        for i, run in enumerate(fit_runs):
            others = fit_runs[:i] + fit_runs[i + 1:]
            held_out.append((f"{run.name} (fitted on the other {len(others)})",
                             step_errors(fit_cost_model(others, profile), [run], profile),
                             step_errors(placeholder, [run], profile)))
    return model, held_out


def fit_and_write(fit_folders: list[str], check_folders: list[str], target: Path, device: str = "auto",
                  quick: bool = False, say: Say = lambda line: None) -> FitReport:
    """Fit on `fit_folders` (checked on `check_folders`, else each left out in turn) and write the
    terms into the profile at `target` (its peaks measured first when it does not exist yet)."""
    from backend.roofline.calibrate import calibrate, write_profile
    from backend.roofline.profiles import describes, load_profile
    folders = [*fit_folders, *check_folders]
    read = [read_measured(f) for f in folders]
    runs, infos = [r for r, _ in read], [i for _, i in read]
    if target.is_file():
        profile = load_profile(target, measured=True)
    else:
        say(f"{target} does not exist yet: measuring this machine's peaks first")
        profile = calibrate(device, lambda m, f: say(f"{m} ({f * 100:.0f}%)"), quick=quick)
    for folder, info in zip(folders, infos):
        if not describes(profile, info.device_name):
            raise InputError(f"{folder} was measured on {info.device_name!r}, not on {profile.name!r}: "
                             f"fit a profile on runs of its own device")
    # priced on the roofs of the units the runs ran on (the C kernels' rates where they ran on them), and
    # those facts kept beside the terms so a simulated run prices the same way (backend/sim/fitted.py)
    facts = FittedOn.of_runs(infos[:len(fit_folders)], profile)
    roofs = fit_roofs(profile, facts)
    model, held_out = fit_profile(runs[:len(fit_folders)], runs[len(fit_folders):], roofs)
    dtypes = sorted({info.dtype or "?" for info in infos})
    source = (f"fitted by phasescope calibrate --fit on {time.strftime('%Y-%m-%d')} to {len(fit_folders)} measured "
              f"run(s) at {', '.join(dtypes)}: {', '.join(Path(f).name for f in fit_folders)}; priced "
              f"{facts.text()}")
    model = model.with_source(source)
    path = write_profile(replace(profile, simulation={**model.terms(), "fitted": True, "source": source,
                                                      **facts.terms()}), target)
    peaks = ", ".join(f"{k} {v:g} TFLOP/s" for k, v in roofs.tflops.items())
    where = " the C kernels' rates" if facts.peaks == KERNELS else ""
    return FitReport(str(path), profile.key, f"{profile.key} ({profile.bandwidth_gbs:,.1f} GB/s,{where} {peaks})",
                     len(fit_folders), model, held_out, list(fit_folders))


def measure_and_fit(runs_dir: str, device: str, threads: int | None, say: Say,
                    should_stop: Callable[[], bool] = lambda: False) -> FitReport:
    """A bare `calibrate --fit` into this machine's profile: the standard runs measured into runs_dir,
    then fitted, each left out in turn for the held-out error (the window's Fit…)."""
    from backend.engine.threads import apply_threads
    from backend.roofline.profiles import local_profile_path
    apply_threads(threads)
    folders = measure_standard_runs(Path(runs_dir), "cpu" if device == "auto" else device, threads, say, should_stop)
    say("fitting the cost model")
    return fit_and_write(folders, [], local_profile_path(), device, say=say)
