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

from backend.errors import InputError
from backend.roofline.fit import ErrorReport, MeasuredRun, fit_cost_model, step_errors
from backend.roofline.step_time import CostModel


def read_measured(folder: str) -> tuple[MeasuredRun, dict]:
    """A run folder's measured steps and its run.json info; one line refusing a simulated or remote run, or one without steps."""
    from backend.io.export import read_run
    from backend.models.base import ModelShape
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
    return MeasuredRun(Path(folder).name or str(folder), ModelShape(**info["shape"]), prec, steps), info


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
