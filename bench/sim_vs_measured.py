"""The simulator against measurement: fit the cost model on one set of runs of the bundled model,
check it on others (other batch sizes, contexts, prompt lengths, and another Poisson workload).

Every run is measured in this one process with the model loaded once, and the fit and check
runs alternate, so the machine's drifting memory bandwidth weighs on both alike. The fit's
profile starts from this machine's calibrated one (or a fresh calibration) and is written to a
temporary file: the user's own profile is not touched.

Reported: the step-time MAPE and worst case by phase and batch size on the check runs, for the
fitted model and for the un-fitted placeholders; and the check workload's TTFT and TPOT p50 and
p99, measured against the same workload simulated with each.

    python -m bench.sim_vs_measured [--readme]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from backend.config import EngineConfig, ModelChoice, RunConfig, SweepSpec
from backend.fitting import poisson, standard_runs
from backend.loaders.cache import ModelCache
from backend.roofline.profiles import load_profile, local_profile_path
from backend.session import execute
from backend.sim.fit import fit_cost_model, step_errors
from backend.sim.step_time import CostModel
from bench.common import add_readme_flag, log, measured_line, publish
MODEL = ModelChoice("smollm2-135m", "cpu", "float32")


CHECK_RUNS = [   # other batch sizes and contexts, other prompt lengths, another Poisson workload
    ("chk-batch", RunConfig(mode="sweep-batch", sweep=SweepSpec("batch", batches=[2, 8, 32], context=512))),
    ("chk-prompt", RunConfig(mode="sweep-prompt", sweep=SweepSpec("prompt", lengths=[64, 256, 1024]))),
    ("chk-load", RunConfig(mode="load", workload=poisson(7, 1.0, "64:384", "24:64", 40),
                           engine=EngineConfig(max_batch=8))),
]
# (name, role, config): the runs `calibrate --fit` measures by itself, alternating with the checks
PLAN = [run for (name, fit), check in zip(standard_runs(), CHECK_RUNS)
        for run in ((f"fit-{name}", "fit", fit), (check[0], "check", check[1]))]


def probe_bandwidth() -> float:
    """Bytes/s of a 256 MiB read right now: the machine's bandwidth drifts, so it is shown beside each run."""
    import torch
    from backend.roofline.calibrate import read_bandwidth
    return read_bandwidth(torch, torch.device("cpu"), 256, 0.5, lambda: None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_readme_flag(parser)
    parser.add_argument("--out", help="keep the run folders here (default: a temporary folder)")
    args = parser.parse_args()
    from backend.fitting import read_measured
    from bench.engine_vs_hf import machine_extras
    base = Path(args.out or tempfile.mkdtemp(prefix="sim-vs-measured-"))
    if local_profile_path().is_file():
        profile = load_profile(local_profile_path(), measured=True)
    else:
        from backend.roofline.calibrate import calibrate
        log("calibrating this machine (no calibrated profile yet)")
        profile = calibrate("cpu")
    models = ModelCache()
    folders: dict[str, Path] = {}
    configs: dict[str, RunConfig] = {}
    bandwidth: dict[str, float] = {}
    for name, _, config in PLAN:
        bandwidth[name] = probe_bandwidth()
        log(f"measuring {name} (memory read at {bandwidth[name] / 1e9:.0f} GB/s just before)")
        config = replace(config, model=MODEL, sampling=replace(config.sampling, ignore_eos=True),
                         out_dir=str(base / name))
        finished = execute(config, lambda e: None, lambda: False, retain_records=False, models=models)
        if finished.error:
            raise SystemExit(f"{name}: {finished.error}")
        folders[name], configs[name] = base / name, config
    # the noise floor: the check sweeps measured again, each point against its first measurement
    from backend.sweeps.points import read_points
    repeat_gaps = []
    for name in ("chk-batch", "chk-prompt"):
        log(f"measuring {name} again (the machine's own spread)")
        again = execute(replace(configs[name], out_dir=str(base / f"{name}-again")), lambda e: None, lambda: False,
                        retain_records=False, models=models)
        if again.error:
            raise SystemExit(f"{name} again: {again.error}")
        first, second = read_points(folders[name])[1], read_points(base / f"{name}-again")[1]
        repeat_gaps += [abs(b.step_ms - a.step_ms) / a.step_ms * 100 for a, b in zip(first, second)]
    fit_runs = [read_measured(str(folders[n]))[0] for n, role, _ in PLAN if role == "fit"]
    check_runs = [read_measured(str(folders[n]))[0] for n, role, _ in PLAN if role == "check"]
    placeholder = CostModel.for_profile(replace(profile, simulation={}))
    fitted = fit_cost_model(fit_runs, profile).with_source("fitted by bench/sim_vs_measured.py")
    models_by_label = {"fitted": fitted, "placeholders": placeholder}
    reports = {label: step_errors(m, check_runs, profile) for label, m in models_by_label.items()}

    # the check workload, simulated with each model on a profile holding its terms
    from backend.results.export import read_run
    from backend.roofline.profiles import profile_to_toml
    measured = read_run(folders["chk-load"]).summary.to_json()   # figures by name
    simulated = {}
    for label, m in models_by_label.items():
        path = base / f"profile-{label}.toml"
        path.write_text(profile_to_toml(replace(profile, simulation={**m.terms(), "source": m.source or label})))
        sim = replace(configs["chk-load"], simulate=True, profile=str(path), out_dir=None,
                      model=ModelChoice("smollm2-135m", "auto", "float32"))
        simulated[label] = execute(sim, lambda e: None, lambda: False).summary.to_json()

    lines = [measured_line(*machine_extras()), "",
             f"The bundled model at float32, all cores; profile {profile.key} ({profile.bandwidth_gbs:g} GB/s, "
             f"fp32 {profile.tflops.get('fp32', 0):g} TFLOP/s as calibrated).", "",
             "Fitted on: a batch sweep (1, 4, 16 at context 256), a prompt sweep (32, 128, 512) and a Poisson "
             "workload (30 requests at 1.5/s, prompts 32-256, outputs 16-48, max batch 8). Checked on: batches 2, 8, 32 "
             "at context 512, prompts 64, 256, 1024, and another Poisson workload (40 requests at 1/s, prompts "
             "64-384, outputs 24-64, seed 7). Fit and check runs alternated in one process.", "",
             f"Fitted terms: matmuls at {fitted.mfu:.3f} of the calibrated peak, attention {fitted.afu:.3f}, memory "
             f"{fitted.mbu:.3f} of the calibrated bandwidth; {fitted.step_ms:.3f} ms per step, {fitted.token_ms:.4f} ms "
             f"per token, {fitted.request_ms:.3f} ms per request.", "",
             "Memory read just before each run: " + ", ".join(f"{n} {b / 1e9:.0f} GB/s" for n, b in bandwidth.items())
             + ".", "",
             f"The machine's own spread: the check sweeps measured a second time differ from the first by "
             f"{sum(repeat_gaps) / len(repeat_gaps):.1f}% per point on average, {max(repeat_gaps):.1f}% at worst.", "",
             "**Step time on the check runs** (MAPE, worst, bias; target MAPE <= 10% for each phase):", "",
             "| phase | batch | steps | fitted MAPE | fitted worst | fitted bias | placeholder MAPE |",
             "|---|---|---|---|---|---|---|"]
    for row, base_row in zip(reports["fitted"].rows, reports["placeholders"].rows):
        lines.append(f"| {row.phase} | {row.batch} | {row.num_steps} | {row.mape:.1f}% | {row.worst:.1f}% | "
                     f"{row.bias:+.1f}% | {base_row.mape:.1f}% |")
    lines += ["", "**The check workload, measured and simulated** (target: within 10%):", "",
              "| metric | measured | fitted | error | placeholders | error |", "|---|---|---|---|---|---|"]
    verdicts = []
    for key, label in (("ttft_p50_ms", "TTFT p50"), ("ttft_p99_ms", "TTFT p99"), ("tpot_p50_ms", "TPOT p50"),
                       ("tpot_p99_ms", "TPOT p99")):
        m, f, p = measured[key], simulated["fitted"][key], simulated["placeholders"][key]
        verdicts.append(abs(f - m) / m <= 0.10)
        lines.append(f"| {label} | {m:,.1f} ms | {f:,.1f} ms | {(f - m) / m * 100:+.1f}% | {p:,.1f} ms | "
                     f"{(p - m) / m * 100:+.1f}% |")
    step_ok = all(reports["fitted"].overall(ph).mape <= 10 for ph in ("prefill", "decode")
                  if reports["fitted"].overall(ph) is not None)
    lines += ["", f"Targets: step-time MAPE <= 10% {'met' if step_ok else 'MISSED'}; workload percentiles within "
              f"10% {'met' if all(verdicts) else 'MISSED'} ({sum(verdicts)} of {len(verdicts)})."]
    return publish("sim_vs_measured", lines, args.readme)


if __name__ == "__main__":
    sys.exit(main())
