"""`calibrate --fit RUN_DIR ...`: fit the simulator's cost model to this machine's measured steps,
and print what the fit found (the job itself: backend/fitting.py, which the window runs too)."""
from __future__ import annotations

from pathlib import Path

from backend.fitting import FitReport
from backend.results.text import error_rows, terms_text


def run_fit(args) -> int:
    """The `calibrate --fit` command: fit, report, write the profile."""
    from backend import fitting
    from backend.roofline.profiles import local_profile_path
    target = Path(args.out) if args.out else local_profile_path()

    def say(line: str) -> None:
        print(f"... {line}", flush=True)
    if not args.fit:   # `--fit` alone: measure the standard runs first
        from backend.engine.threads import apply_threads
        apply_threads(args.threads)
        runs_dir = Path(args.runs or "calibration-runs")
        args.fit = fitting.measure_standard_runs(runs_dir, "cpu" if args.device == "auto" else args.device,
                                                 args.threads, say)
    report = fitting.fit_and_write(list(args.fit), list(args.check), target, args.device, args.quick, say)
    print_report(report, default_target=target == local_profile_path())
    return 0


def print_report(report: FitReport, default_target: bool) -> None:
    from backend.cli.report import print_table
    print(f"fitted on {report.num_runs} run(s), priced on {report.profile_text}:")
    print(f"  {terms_text(report)}")
    print("  (efficiencies are fractions of the profile's peaks; a calibrated peak is one measured matmul, "
          "which tuned kernels can pass)")
    if not report.held_out:
        print("\nno held-out error: give --check RUN_DIR ..., or two or more runs to --fit (each is then left out in turn)")
    for name, rows in error_rows(report):
        print(f"\nstep-time error on {name}:")
        print_table(rows)
    name = report.profile_key if default_target else report.path
    print(f"\nwritten to {report.path}: `--simulate --profile {name}` now prices steps with these terms")
