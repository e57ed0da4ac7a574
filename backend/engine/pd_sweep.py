"""`sweep pd-ratio --total-devices N`: every prefill:decode split of N devices, simulated on one workload.

For P = 1 .. N-1 prefill devices (D = N - P decode devices) the simulated disaggregated policy
(backend/engine/simulate_disagg.py) runs the same requests; each split is reported by its
goodput (requests a second meeting the TTFT and TPOT objectives), its output tokens a second
and that per device, its TTFT and ITL percentiles, and the mean KV transfer.

The best split: the most goodput (without SLOs, output tokens a second). At a rate that several
splits sustain, their goodput is the arrival rate give or take the last requests' timing, so
every split within TIE of the most counts as tied, and of those the best is the one with the
most headroom: the least p99 TTFT / TTFT objective + p99 ITL / TPOT objective (without SLOs,
the least p99 TTFT and ITL relative to the tied splits' own least).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Callable

from backend.config import RunConfig
from backend.errors import InputError
from backend.events import Emit, Progress


@dataclass(slots=True)
class PDPoint:
    prefill_devices: int
    decode_devices: int
    num_finished: int
    goodput_rps: float              # NaN without SLOs
    slo_attainment: float           # NaN without SLOs
    output_tokens_per_s: float
    tokens_per_s_per_device: float
    goodput_per_device: float       # NaN without SLOs
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    kv_transfer_mean_ms: float
    best: bool = False

    @property
    def split(self) -> str:
        return f"{self.prefill_devices}P:{self.decode_devices}D"


def sweep_pd_ratio(config: RunConfig, total_devices: int, emit: Emit = lambda e: None,
                   should_stop: Callable[[], bool] = lambda: False, cost_model=None) -> list[PDPoint]:
    """One point per split, the best marked."""
    from backend.engine.pd_summary import disaggregated_figures
    from backend.engine.simulate_disagg import DisaggregatedSim, prepare
    from backend.io.summary import summarize
    if isinstance(total_devices, bool) or not isinstance(total_devices, int) or total_devices < 2:
        raise InputError(f"--total-devices must be at least 2 (one prefill and one decode device), got {total_devices!r}")
    if config.workload is None:
        raise InputError("sweep pd-ratio needs a workload (--workload)")
    points: list[PDPoint] = []
    for p in range(1, total_devices):
        if should_stop():
            break
        engine = replace(config.engine, policy="disaggregated", prefill_workers=p, decode_workers=total_devices - p)
        one = replace(config, engine=engine, mode="load", simulate=True)
        shape, prec, profile, model, link = prepare(one, cost_model)
        emit(Progress(f"simulating {p} prefill + {total_devices - p} decode {profile.key} (KV over {link.name})",
                      (p - 1) / (total_devices - 1)))
        sim = DisaggregatedSim(one, shape, prec, profile, model, link, should_stop=should_stop)
        sim.run()
        s = summarize(sim.steps, sim.requests, sim.tokens, config.slo_ttft_ms, config.slo_tpot_ms)
        split = disaggregated_figures(sim.requests)
        goodput = s.get("goodput_requests_per_s", math.nan)
        points.append(PDPoint(p, total_devices - p, int(s["num_finished"]), goodput, s.get("slo_attainment", math.nan),
                              s["output_tokens_per_s"], s["output_tokens_per_s"] / total_devices,
                              goodput / total_devices, s["ttft_p50_ms"], s["ttft_p99_ms"], s["itl_p50_ms"],
                              s["itl_p99_ms"], split["split_kv_transfer_mean_ms"]))
    mark_best(points, config.slo_ttft_ms, config.slo_tpot_ms)
    return points


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


def points_csv(points: list[PDPoint]) -> str:
    import csv
    import io
    buf = io.StringIO()
    names = [*asdict(points[0]).keys()] if points else []
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["split", *names])
    for pt in points:
        writer.writerow([pt.split, *asdict(pt).values()])
    return buf.getvalue()
