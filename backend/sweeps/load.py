"""`sweep rate` and `sweep concurrency`: the same workload at each arrival rate (or number of
closed-loop users), through any target: the local engine, the simulator or a remote server.

Each point is one whole `load` run. What it records is the trade serving engineers plot:
throughput per device (output tokens/s over the devices) against throughput per user (the
tokens/s one request sees while it decodes, 1000 / its median TPOT). A point is on the Pareto
front when no other point is better on both; with SLOs, each point's goodput (requests/s that
meet them) is recorded and the best marked. Each point's records are written to
OUT/rate-R (or OUT/users-N); OUT/sweep.csv holds one row per point.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

from backend.config import RunConfig, RunKind, SweepKind, config_dict
from backend.errors import InputError
from backend.events import Emit, LoadPoint, Progress, RunFinished, Target
from backend.records import RunData, new_run_id
from backend.results.export import ensure_writable
from backend.run_info import sweep_info
from backend.summary import Summary, figure
from backend.sweeps.points import write_points


def point_from_summary(kind: SweepKind, x: float, s: Summary, num_devices: int = 1) -> LoadPoint:
    nan = math.nan
    tpot = figure(s.tpot_p50_ms)
    point = LoadPoint(kind, x, int(s.num_finished or 0), int(s.num_rejected or 0), figure(s.duration_s),
                      figure(s.requests_per_s), figure(s.output_tokens_per_s) / num_devices,
                      1000.0 / tpot if tpot and tpot == tpot else nan, figure(s.ttft_p50_ms),
                      figure(s.ttft_p99_ms), tpot, figure(s.tpot_p99_ms), figure(s.itl_p99_ms),
                      figure(s.goodput_requests_per_s), figure(s.slo_attainment),
                      figure(s.cost_per_m_output_usd))
    device, user = s.bands.get("output_tokens_per_s"), s.bands.get("tpot_p50_ms")
    if device is not None and user is not None and user.low > 0:   # a simulated point: its band
        point.per_device_low, point.per_device_high = device.low / num_devices, device.high / num_devices
        point.per_user_low, point.per_user_high = 1000.0 / user.high, 1000.0 / user.low
    return point


def mark_front(points: list[LoadPoint]) -> None:
    """Set each point's pareto and best_goodput flags (NaN figures are never on the front)."""
    def ok(p):
        return p.tokens_per_s_per_device == p.tokens_per_s_per_device and p.tokens_per_s_per_user == p.tokens_per_s_per_user
    for p in points:
        p.pareto = ok(p) and not any(
            ok(q) and q is not p and q.tokens_per_s_per_device >= p.tokens_per_s_per_device
            and q.tokens_per_s_per_user >= p.tokens_per_s_per_user
            and (q.tokens_per_s_per_device > p.tokens_per_s_per_device or q.tokens_per_s_per_user > p.tokens_per_s_per_user)
            for q in points)
    scored = [p for p in points if p.goodput_requests_per_s == p.goodput_requests_per_s]
    if scored:
        max(scored, key=lambda p: p.goodput_requests_per_s).best_goodput = True


def point_folder(kind: SweepKind, x: float) -> str:
    return f"rate-{x:g}" if kind == SweepKind.RATE else f"users-{int(x)}"


def _point_workload(w, kind: SweepKind, x: float):
    """The workload of one point: at rate x (a trace: sped up or slowed to a mean rate of x), or x users."""
    if kind != SweepKind.RATE:
        return replace(w, arrival="closed", concurrency=int(x))
    if w.trace is not None:
        return replace(w, trace_speed=w.trace_speed * float(x) / w.rate, rate=float(x))
    return replace(w, arrival="poisson" if w.arrival in ("closed", "burst") else w.arrival, rate=float(x))


def run_load_sweep(config: RunConfig, emit: Emit, should_stop: Callable[[], bool], target: Target) -> RunFinished:
    """Every point of config.sweep (kind rate or concurrency) through `target`, one load run each."""
    spec = config.sweep_spec
    if config.workload is None:
        raise InputError("a load sweep needs a workload (--workload or the workload flags)")
    values = spec.rates if spec.kind is SweepKind.RATE else spec.concurrencies
    traced = config.workload.trace is not None
    if traced and (spec.kind is not SweepKind.RATE or not config.workload.rate):
        raise InputError("a trace replays its own arrivals: sweep it by rate (each rate sets --trace-speed to scale "
                         "the trace's mean rate to it), and only a trace whose requests do not all arrive at once")
    out = ensure_writable(config.out_dir) if config.out_dir else None
    points: list[LoadPoint] = []
    note, last, info = "", None, None
    for i, x in enumerate(values):
        if should_stop():
            note = "stopped by user"
            break
        emit(Progress(f"sweep {spec.kind}: {x:g}", i / len(values)))
        workload = _point_workload(config.workload, spec.kind, x)
        one = replace(config, mode=RunKind.LOAD, sweep=None, workload=workload, repeats=1,
                      out_dir=str(out / point_folder(spec.kind, x)) if out is not None else None)
        last = target(one, lambda event: emit(event) if isinstance(event, Progress) else None, should_stop)
        if last.error:
            note = f"stopped at {spec.kind} {x:g}: {last.error}"
            break
        if last.stopped:
            note = "stopped by user"
            break
        point = point_from_summary(spec.kind, x, last.summary)
        points.append(point)
        info = last.data.info if last.data else None
        emit(point)
    mark_front(points)
    emit(Progress(f"sweep {spec.kind} done", 1.0))
    summary = Summary(kind=spec.kind, num_points=len(points), note=note,
                      pareto=",".join(f"{p.x:g}" for p in points if p.pareto))
    best = next((p for p in points if p.best_goodput), None)
    if best is not None:
        summary.best_goodput_at = best.x
        summary.best_goodput_requests_per_s = best.goodput_requests_per_s
    info = sweep_info(info, [point_folder(spec.kind, p.x) for p in points])
    run_id = new_run_id()
    data = RunData(run_id, config_dict(config), info, [], [], [], summary)
    if out is not None:
        write_points(out, spec.kind, points, data)
    return RunFinished(run_id, summary, note == "stopped by user", None, data)
