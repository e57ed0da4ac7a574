"""`calibrate --from RUN ...`: a server's own profile, fitted on remote runs against it (backend/sim/server_fit.py).

The runs must be one server's (one endpoint, one served model) at several loads or lengths; the profile
written is the named device's (`--profile`: the GPU the server runs on, or a CPU profile for llama.cpp's
server) with the fitted terms, the fit's facts (model, precision) and its own cross-validated band in
[simulation]. `--simulate --profile PATH` then prices other loads, lengths, batch limits and layouts.
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from backend.errors import InputError


def read_server_runs(folders: list[str]):
    """The runs' ServerRuns and their one server's (endpoint, served model, model name); one line for a run
    that is not remote, or runs against different servers or models."""
    from backend.results.export import read_run
    from backend.sim.server_fit import server_run
    runs, servers = [], set()
    for folder in folders:
        data = read_run(folder)
        info = data.info
        if not info.is_remote or info.remote is None:
            raise InputError(f"{folder}: not a remote run (`load --endpoint URL`): --from fits a server on runs "
                             f"against it; runs measured here are fitted with --fit")
        servers.add((info.remote.endpoint, info.remote.served_model or info.model))
        runs.append(server_run(Path(folder).name or str(folder), data.requests))
    if len(servers) > 1:
        listed = "; ".join(f"{model} at {endpoint}" for endpoint, model in sorted(servers, key=str))
        raise InputError(f"the runs were measured against different servers or models ({listed}): fit one "
                         f"server's profile on runs against it")
    return runs, servers.pop() if servers else ("", "")


def run_fit_from(args) -> int:
    from backend.roofline.calibrate import write_profile
    from backend.roofline.profiles import find_profile
    from backend.sim.model import resolve_model, resolve_precision
    from backend.sim.server_fit import MIN_RUNS, Pricing, band, check_runs, cross_validate, fit_server
    from backend.sim.step_time import CostModel
    if args.fit is not None:
        raise InputError("give --fit (runs measured here) or --from (remote runs against a server), not both")
    if len(args.from_runs) < MIN_RUNS:
        raise InputError(f"calibrate --from needs at least {MIN_RUNS} runs against the server (several loads or "
                         f"lengths), got {len(args.from_runs)}: each is left out in turn for the band")
    if not args.profile:
        raise InputError("calibrate --from needs --profile NAME: the device the server runs on (a GPU profile, "
                         "or cpu / this-machine for llama.cpp's server on a CPU; see `profiles`)")
    runs, (endpoint, served) = read_server_runs(list(args.from_runs))
    check_runs(runs)
    base = find_profile(args.profile)
    name = args.model or served
    try:
        shape = resolve_model(name)
    except InputError:
        raise InputError(f"the served model {name!r} is no shape the simulator knows: give --model NAME "
                         f"(a known shape or a config.json) for what the server runs") from None
    prec = resolve_precision(args.dtype, base)
    pricing = Pricing(shape, prec, base, args.max_batch)
    # from the device's own terms (a shipped GPU's published fit: its layer and link costs kept), else placeholders
    start = CostModel.for_profile(base, prec)
    print(f"... fitting {len(runs)} run(s) of {served} at {endpoint} on {base.key} ({name}, {prec.name}, "
          f"{args.max_batch} request(s) at once)", flush=True)
    model = fit_server(runs, pricing, start)
    print("... cross-validating: each run left out in turn", flush=True)
    held = cross_validate(runs, pricing, start)
    ttft_band, tpot_band = band([h.ttft_error for h in held]), band([h.tpot_error for h in held])
    source = (f"fitted by phasescope calibrate --from on {time.strftime('%Y-%m-%d')} to {len(runs)} remote runs "
              f"of {served} at {endpoint} ({', '.join(r.name for r in runs)}), {args.max_batch} request(s) at once")
    table = {**model.terms(), "fitted": True, "source": source, "model": name, "dtype": prec.name,
             "band_ttft_p50": round(ttft_band, 4), "band_tpot_p50": round(tpot_band, 4), "band_runs": len(runs)}
    target = Path(args.out or f"{base.key}-server.toml")
    path = write_profile(replace(base, simulation=table), target)
    print(f"fitted: matmuls at {model.mfu:.3f} of the peak, attention at {model.afu:.3f}, memory at {model.mbu:.3f} "
          f"of the bandwidth, {model.step_ms:.3f} ms per step")
    from backend.cli.report import print_table
    rows = [("left out", "TTFT p50 error", "TPOT p50 error")]
    rows += [(h.name, f"{h.ttft_error * 100:+.1f}%", f"{h.tpot_error * 100:+.1f}%") for h in held]
    print()
    print_table(rows)
    print(f"\nband (each run left out of a fit on the others): TTFT p50 within ±{ttft_band * 100:.0f}%, "
          f"TPOT p50 within ±{tpot_band * 100:.0f}%")
    print(f"written to {path}: `load --simulate --profile {path} --model {name}` now prices this server")
    return 0
