"""`calibrate --fit RUN_DIR ...`: fit the simulator's cost model to this machine's measured steps.

The fitted efficiencies and overheads go into this machine's profile ([simulation] in
this-machine.toml), so `--simulate --profile this-machine` prices steps as this machine ran
them. The error is reported on runs the fit did not see: the `--check` runs, or else each run
in turn left out of a fit on the others. The placeholder model's error on the same runs is
printed beside it, so the value of fitting shows.
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from backend.config import EngineConfig, ModelChoice, RunConfig
from backend.errors import InputError, RunError
from backend.roofline.fit import ErrorReport, MeasuredRun, fit_cost_model, step_errors
from backend.roofline.step_time import CostModel


def read_measured(folder: str) -> tuple[MeasuredRun, dict]:
    """A run folder's measured steps and its run.json info; one line refusing a simulated or remote run, or one without steps."""
    from backend.results.export import read_run
    from backend.shape import ModelShape
    from backend.precision import from_info
    run = read_run(folder)
    info = run.info
    if info.get("target") == "simulated":
        raise InputError(f"{folder}: a simulated run; fit on runs measured on this machine")
    if info.get("target") == "remote" or not info.get("shape"):
        raise InputError(f"{folder}: a remote run has no engine steps of this machine to fit on")
    prec = from_info(info)
    if prec is None:
        raise InputError(f"{folder}: run.json does not record the run's dtype")
    steps = [s for s in run.steps if s.duration_ms > 0]
    if not steps:
        raise InputError(f"{folder}: no timed steps")
    from backend.roofline.roofs import math_from_info
    return MeasuredRun(Path(folder).name or str(folder), ModelShape(**info["shape"]), prec, steps,
                       math_from_info(info)), info


STANDARD_MODEL = "smollm2-135m"


def poisson(seed: int, rate: float, prompt: str, output: str, requests: int):
    """A Poisson workload of synthetic prompts (no tokenizer needed, lengths exact)."""
    from backend.workload.spec import workload_from_dict
    return workload_from_dict({"arrival": "poisson", "rate": rate, "num_requests": requests, "prompt_len": prompt,
                               "output_len": output, "prompt_source": "synthetic", "seed": seed}, f"poisson-{seed}")


def standard_runs() -> list[tuple[str, RunConfig]]:
    """What `calibrate --fit` measures when given no run folders: a batch sweep, a prompt sweep and a
    Poisson workload of the bundled model at float32, each full-length (as bench/sim_vs_measured.py fits on)."""
    from backend.config import SweepSpec
    return [("batch", RunConfig(mode="sweep-batch", sweep=SweepSpec("batch", batches=[1, 4, 16], context=256))),
            ("prompt", RunConfig(mode="sweep-prompt", sweep=SweepSpec("prompt", lengths=[32, 128, 512]))),
            ("load", RunConfig(mode="load", workload=poisson(1, 1.5, "32:256", "16:48", 30),
                               engine=EngineConfig(max_batch=8)))]


def measure_standard_runs(folder: Path, device: str, threads: int | None) -> list[str]:
    """The standard runs measured into folder/batch, folder/prompt, folder/load, the model loaded once."""
    from backend.loaders.cache import ModelCache
    from backend.session import execute
    models, folders = ModelCache(), []
    for name, config in standard_runs():
        print(f"... measuring {name} into {folder / name}", flush=True)
        config = replace(config, model=ModelChoice(STANDARD_MODEL, device, "float32"), threads=threads,
                         sampling=replace(config.sampling, ignore_eos=True), out_dir=str(folder / name))
        finished = execute(config, lambda e: None, lambda: False, retain_records=False, models=models)
        if finished.error:
            raise RunError(f"measuring {name}: {finished.error}")
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


def run_fit(args) -> int:
    """The `calibrate --fit` command: fit, report, write the profile."""
    from backend.cli.report import print_table
    from backend.roofline.calibrate import write_profile
    from backend.roofline.profiles import describes, load_profile, local_profile_path
    target = Path(args.out) if args.out else local_profile_path()
    if not args.fit:   # `--fit` alone: measure the standard runs first
        from backend.engine.threads import apply_threads
        apply_threads(args.threads)
        runs_dir = Path(args.runs or "calibration-runs")
        args.fit = measure_standard_runs(runs_dir, "cpu" if args.device == "auto" else args.device, args.threads)
    folders = [*args.fit, *args.check]
    read = [read_measured(f) for f in folders]
    runs, infos = [r for r, _ in read], [i for _, i in read]
    if target.is_file():
        profile = load_profile(target, measured=True)
    else:
        from backend.roofline.calibrate import calibrate
        print(f"{target} does not exist yet: measuring this machine's peaks first", flush=True)
        profile = calibrate(args.device, lambda m, f: print(f"... {m} ({f * 100:.0f}%)", flush=True), quick=args.quick)
    for folder, info in zip(folders, infos):
        if not describes(profile, info.get("device_name", "")):
            raise InputError(f"{folder} was measured on {info.get('device_name')!r}, not on {profile.name!r}: "
                             f"fit a profile on runs of its own device")
    model, held_out = fit_profile(runs[:len(args.fit)], runs[len(args.fit):], profile)
    dtypes = sorted({info.get("dtype", "?") for info in infos})
    source = (f"fitted by phasescope calibrate --fit on {time.strftime('%Y-%m-%d')} to {len(args.fit)} measured "
              f"run(s) at {', '.join(dtypes)}: {', '.join(Path(f).name for f in args.fit)}")
    model = model.with_source(source)
    print(f"fitted on {len(args.fit)} run(s), priced on {profile.key} "
          f"({profile.bandwidth_gbs:,.1f} GB/s, {', '.join(f'{k} {v:g} TFLOP/s' for k, v in profile.tflops.items())}):")
    print(f"  matmuls at {model.mfu:.3f} of the peak, attention at {model.afu:.3f}, memory at {model.mbu:.3f} "
          f"of the bandwidth; {model.step_ms:.3f} ms per step, {model.token_ms:.4f} ms per token, "
          f"{model.request_ms:.3f} ms per request")
    print("  (efficiencies are fractions of the profile's peaks; a calibrated peak is one measured matmul, "
          "which tuned kernels can pass)")
    if not held_out:
        print("\nno held-out error: give --check RUN_DIR ..., or two or more runs to --fit (each is then left out in turn)")
    for name, fitted, placeholder in held_out:
        print(f"\nstep-time error on {name}:")
        rows = [("phase", "batch", "steps", "MAPE", "worst", "bias", "placeholder MAPE")]
        for row, base in zip(fitted.rows, placeholder.rows):
            rows.append((row.phase, row.batch, row.num_steps, f"{row.mape:.1f}%", f"{row.worst:.1f}%",
                         f"{row.bias:+.1f}%", f"{base.mape:.1f}%"))
        print_table(rows)
    simulation = {**model.terms(), "fitted": True, "source": source}
    path = write_profile(replace(profile, simulation=simulation), target)
    name = profile.key if target == local_profile_path() else str(target)
    print(f"\nwritten to {path}: `--simulate --profile {name}` now prices steps with these terms")
    return 0
