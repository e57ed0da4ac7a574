"""`sweep pd-ratio`: its flags, and the table of every prefill:decode split of N simulated devices,
the best marked (the sweep itself runs through session: backend/sweeps/pd_ratio.py)."""
from __future__ import annotations

import math
import sys

from backend.config import SweepKind


def add_pd_ratio_parser(kinds, model_flags) -> None:
    from backend.cli.load import load_flags
    d = kinds.add_parser(SweepKind.PD_RATIO, help="simulated: every prefill:decode split of N devices under the "
                         "disaggregated policy: goodput under the SLOs, throughput per device, TTFT and ITL; the best split marked")
    load_flags(d, model_flags)
    d.add_argument("--total-devices", type=int, default=8, help="devices to split between prefill and decode")


def print_points(config, points, total: int, out=None) -> None:
    from backend.cli.report import print_table
    from backend.sim.links import resolve_link
    from backend.roofline.profiles import find_profile
    out = out or sys.stdout
    w = config.workload
    link = resolve_link(config, find_profile(config.profile))
    slo = []
    if config.slo_ttft_ms is not None:
        slo.append(f"TTFT <= {config.slo_ttft_ms:g} ms")
    if config.slo_tpot_ms is not None:
        slo.append(f"TPOT <= {config.slo_tpot_ms:g} ms")
    rate = f"{w.rate:g}/s" if w.rate else "one moment"   # a trace whose requests all arrive at once has no rate
    print(f"{config.model.name} on {total} x {config.profile}, KV over {link.describe()}; workload {w.name}: "
          f"{w.num_requests} requests, {w.arrival} at {rate}, prompts {w.prompt_len.describe()} tokens, "
          f"outputs {w.output_len.describe()} tokens; "
          f"SLO {' and '.join(slo) if slo else 'none (best by tokens/s per device)'}", file=out)

    def f(x, fmt="{:,.1f}"):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt.format(x)
    spec = config.spec.is_on   # the decode devices guess: each split's tokens a verification
    rows = [("split", "goodput req/s", "SLO met", "tok/s", "tok/s/device", "TTFT p50", "TTFT p99", "TPOT p50",
             "ITL p50", "ITL p99", "KV transfer", *(("tok/verification",) if spec else ()), "")]
    for pt in points:
        rows.append((pt.split, f(pt.goodput_rps, "{:,.2f}"), f(pt.slo_attainment, "{:.0%}"), f(pt.output_tokens_per_s),
                     f(pt.tokens_per_s_per_device), f(pt.ttft_p50_ms, "{:,.0f} ms"), f(pt.ttft_p99_ms, "{:,.0f} ms"),
                     f(pt.tpot_p50_ms, "{:,.1f} ms"), f(pt.itl_p50_ms, "{:,.1f} ms"), f(pt.itl_p99_ms, "{:,.1f} ms"),
                     f(pt.kv_transfer_mean_ms, "{:,.2f} ms"),
                     *((f(pt.spec_mean_acceptance_length, "{:.2f}"),) if spec else ()), "<- best" if pt.best else ""))
    print_table(rows, out=out)
