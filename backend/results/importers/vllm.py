"""vLLM `bench serve --save-result` JSON (vllm/benchmarks/serve.py, `benchmark()` and `main_async()`).

The file is one flat object: the setup (`date`, `backend`, `model_id`, `num_prompts`, `request_rate`,
...), the run's figures (`duration`, `completed`, `total_output_tokens`, `output_throughput`,
`mean_ttft_ms`, `median_ttft_ms`, `p99_ttft_ms`, the same for `tpot`, `itl`, `e2el`) and, only with
`--save-detailed`, one list entry per request: `input_lens`, `output_lens`, `ttfts` (s), `itls` (a
list of gaps per request, s), `latencies` (s), `start_times` (s, perf_counter), `errors` ("" when it
succeeded). The file names no vLLM version.

vLLM's definitions (calculate_metrics): TTFT to the first streamed chunk with content; TPOT per request
= (latency - ttft) / (output_len - 1), the latency running to the stream's end and output_len from the
server's usage; ITL = every gap between streamed chunks, pooled; throughputs over `duration`, the
benchmark's whole wall time.
"""
from __future__ import annotations

from pathlib import Path

import re

from backend.results.importers.common import (Check, Imported, imported_run, number, request_from_times, require,
                                              stats, tokens_from_gaps)

TOOL = "vllm-bench-serve"
SUMMARY_KEYS = ["duration", "completed", "total_input_tokens", "total_output_tokens", "output_throughput"]
DETAIL_KEYS = ["input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors"]


def is_vllm(data) -> bool:
    """Its keys say it (the file names no format): the run's duration and count beside vLLM's setup keys or
    its figures (--percentile-metrics may leave TTFT out)."""
    return isinstance(data, dict) and "duration" in data and "completed" in data and \
        any(k in data for k in ("endpoint_type", "backend", "mean_ttft_ms", "mean_e2el_ms"))


def read_vllm(data: dict, path: Path) -> Imported:
    require(data, SUMMARY_KEYS, path, "a vLLM bench serve result")
    detailed = all(k in data for k in DETAIL_KEYS)
    requests, tokens = [], []
    ttfts, tpots, itls, latencies = [], [], [], []
    if detailed:
        n = len(data["ttfts"])
        if any(len(data[k]) != n for k in DETAIL_KEYS):
            from backend.errors import InputError
            raise InputError(f"{path}: the per-request lists ({', '.join(DETAIL_KEYS)}) are not all {n} long")
        t0 = min(data["start_times"]) if n else 0.0
        for i in range(n):
            ok = not data["errors"][i]
            arrival = (data["start_times"][i] - t0) * 1000.0
            ttft, latency, gaps = data["ttfts"][i], data["latencies"][i], data["itls"][i] or []
            output_len = int(data["output_lens"][i])
            first = arrival + ttft * 1000.0
            gaps_ms = [g * 1000.0 for g in gaps]
            last = first + sum(gaps_ms)
            requests.append(request_from_times(i, ok, int(data["input_lens"][i]), output_len, arrival,
                                               first, last, arrival + latency * 1000.0,
                                               "" if ok else str(data["errors"][i])[:200]))
            if not ok:
                continue
            tokens.extend(tokens_from_gaps(i, first, gaps_ms))
            ttfts.append(ttft)
            latencies.append(latency)
            itls.extend(gaps)
            if output_len > 1:
                tpots.append((latency - ttft) / (output_len - 1))
    run = imported_run(TOOL, None, [path], str(data.get("model_id") or ""), requests, tokens,
                       {k: data.get(k) for k in ("backend", "num_prompts", "request_rate", "burstiness",
                                                 "max_concurrency", "label")},
                       created=_created(data.get("date")), device="remote")
    imported = Imported(run, _checks(data, detailed, ttfts, tpots, itls, latencies, run))
    if not detailed:
        imported.notes.append("saved without --save-detailed: no per-request data, so no requests, and the "
                              "figures cannot be recomputed")
    return imported


def _checks(data, detailed, ttfts, tpots, itls, latencies, run) -> list[Check]:
    s = run.summary
    # vLLM writes one p{q}_ttft_ms per --metric-percentiles entry (default 99)
    percentiles = sorted({float(m.group(1)) for k in data if (m := re.fullmatch(r"p([\d.]+)_ttft_ms", k))}) or [99.0]
    checks: list[Check] = []
    ours = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}
    why = {
        "tpot": "vLLM's TPOT runs from the first token to the stream's end ([DONE] included) and divides by the "
                "server's count of output tokens less one; this tool's runs from the first to the last token",
        "itl": "vLLM's ITL pools the gaps between streamed chunks: a chunk carrying several tokens is one gap "
               "(vLLM #27485); this tool's ITL is one gap per token record",
    }
    series = {"ttft": ttfts, "tpot": tpots, "itl": itls, "e2el": latencies}
    for name, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E")):
        if f"mean_{name}_ms" not in data:
            continue
        mine = stats([v * 1000.0 for v in series[name]], (50, *percentiles)) if detailed else None
        for stat, key in (("mean", f"mean_{name}_ms"), ("p50", f"median_{name}_ms"),
                          *((f"p{q:g}", f"p{q:g}_{name}_ms") for q in percentiles)):
            ours_key = f"{ours[name]}_{'mean' if stat == 'mean' else stat}_ms"
            ours_value = getattr(s, ours_key, None) if detailed and hasattr(s, ours_key) else None
            checks.append(Check(f"{label} {'median' if stat == 'p50' else stat} (ms)", number(data, key),
                                mine[stat] if mine else None, ours_value, 2, why.get(name, "")))
    duration = number(data, "duration")
    for label, key, total, ours_value in (
            ("output throughput (tok/s)", "output_throughput", number(data, "total_output_tokens"),
             s.output_tokens_per_s),
            ("request throughput (req/s)", "request_throughput", number(data, "completed"), s.requests_per_s)):
        recomputed = total / duration if duration and total is not None else None
        checks.append(Check(label, number(data, key), recomputed, ours_value if detailed else None, 2,
                            "vLLM divides by the benchmark's whole wall time (from before the first request to "
                            "after the last returned); this tool by the first request's start to the last finish"))
    return checks


def _created(date) -> str:
    """vLLM's `date` ("20261204-101530", local time) as run.json's `created`."""
    import time
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.strptime(str(date), "%Y%m%d-%H%M%S"))
    except ValueError:
        return ""

