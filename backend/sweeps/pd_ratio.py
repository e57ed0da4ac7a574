"""`sweep pd-ratio --total-devices N`: every prefill:decode split of N devices, simulated on one workload.

For P = 1 .. N-1 prefill devices (D = N - P decode devices) the simulated disaggregated policy
(backend/sim/disaggregated.py) runs the same requests; each split is reported by its
goodput (requests a second meeting the TTFT and TPOT objectives), its output tokens a second
and that per device, its TTFT and ITL percentiles, the mean KV transfer, and with `--spec` the
tokens each verification emitted (the decode devices guess and verify, priced as on a simulated run).

The best split: the most goodput (without SLOs, output tokens a second). At a rate that several
splits sustain, their goodput is the arrival rate give or take the last requests' timing, so
every split within TIE of the most counts as tied, and of those the best is the one with the
most headroom: the least p99 TTFT / TTFT objective + p99 ITL / TPOT objective (without SLOs,
the least p99 TTFT and ITL relative to the tied splits' own least).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

from backend.config import RunConfig, RunKind, SweepKind, config_dict
from backend.errors import InputError
from backend.events import Emit, PDPoint, Progress, RunFinished, Target
from backend.records import RunData, new_run_id
from backend.results.export import ensure_writable
from backend.run_info import sweep_info
from backend.summary import Summary, figure
from backend.sweeps.points import write_points


def point_folder(p: int, d: int) -> str:
    return f"split-{p}p{d}d"


def run_pd_ratio_sweep(config: RunConfig, emit: Emit, should_stop: Callable[[], bool], target: Target) -> RunFinished:
    """Every split of config.sweep.total_devices through `target` (the simulated disaggregated
    policy), one load run each, the best marked; with an output folder, each split's records in
    OUT/split-PpDd and the points in OUT/sweep.csv (kind pd-ratio)."""
    total = config.sweep_spec.total_devices
    if isinstance(total, bool) or not isinstance(total, int) or total < 2:
        raise InputError(f"--total-devices must be at least 2 (one prefill and one decode device), got {total!r}")
    if config.workload is None:
        raise InputError("sweep pd-ratio needs a workload (--workload)")
    if not config.profile:
        raise InputError("sweep pd-ratio needs --profile NAME (see `profiles`): the devices it simulates")
    out = ensure_writable(config.out_dir) if config.out_dir else None
    points: list[PDPoint] = []
    note, info = "", None
    for p in range(1, total):
        if should_stop():
            note = "stopped by user"
            break
        engine = replace(config.engine, policy="disaggregated", prefill_workers=p, decode_workers=total - p)
        one = replace(config, engine=engine, mode=RunKind.LOAD, sweep=None, simulate=True, repeats=1,
                      out_dir=str(out / point_folder(p, total - p)) if out is not None else None)
        emit(Progress(f"simulating {p} prefill + {total - p} decode {config.profile}", (p - 1) / (total - 1)))
        finished = target(one, lambda event: None, should_stop)
        if finished.stopped:
            note = "stopped by user"
            break
        s = finished.summary
        goodput = figure(s.goodput_requests_per_s)
        point = PDPoint(p, total - p, int(s.num_finished), goodput, figure(s.slo_attainment),
                        s.output_tokens_per_s, s.output_tokens_per_s / total, goodput / total,
                        s.ttft_p50_ms, s.ttft_p99_ms, s.itl_p50_ms, s.itl_p99_ms,
                        figure(s.split_kv_transfer_mean_ms),
                        spec_mean_acceptance_length=s.spec_mean_acceptance_length, tpot_p50_ms=figure(s.tpot_p50_ms))
        points.append(point)
        info = finished.data.info if finished.data else info
        emit(point)
    best = mark_best(points, config.slo_ttft_ms, config.slo_tpot_ms)
    emit(Progress("sweep pd-ratio done", 1.0))
    summary = Summary(kind="pd-ratio", num_points=len(points), note=note, total_devices=total,
                      best_split=best.split if best else None)
    info = sweep_info(info, [point_folder(pt.prefill_devices, pt.decode_devices) for pt in points])
    run_id = new_run_id()
    data = RunData(run_id, config_dict(config), info, [], [], [], summary)
    if out is not None:
        write_points(out, SweepKind.PD_RATIO, points, data)
    return RunFinished(run_id, summary, note == "stopped by user", None, data)


TIE = 0.02   # goodputs within 2% of the most are tied


def mark_best(points: list[PDPoint], slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None) -> PDPoint | None:
    def num(x, bad=-math.inf):
        return bad if x is None or math.isnan(x) else x
    if not points:
        return None
    with_slo = any(not math.isnan(pt.goodput_rps) for pt in points)
    score = [num(pt.goodput_rps) if with_slo else num(pt.output_tokens_per_s) for pt in points]
    top = max(score)
    tied = [pt for pt, sc in zip(points, score) if sc >= top - TIE * abs(top)] if top > -math.inf else list(points)
    ttft_scale = slo_ttft_ms or min(num(pt.ttft_p99_ms, math.inf) for pt in tied) or 1.0
    itl_scale = slo_tpot_ms or min(num(pt.itl_p99_ms, math.inf) for pt in tied) or 1.0
    best = min(tied, key=lambda pt: num(pt.ttft_p99_ms, math.inf) / ttft_scale + num(pt.itl_p99_ms, math.inf) / itl_scale)
    best.best = True
    return best
