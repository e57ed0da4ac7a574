"""GuideLLM's `benchmarks.json` (GenerativeBenchmarksReport: src/guidellm/benchmark/schemas/generative/
report.py, benchmark.py, metrics.py; src/guidellm/schemas/request_stats.py and statistics.py).

The report: `args` and `benchmarks`, each benchmark a `type_` "generative_benchmark" with `metrics`
(each a StatusDistributionSummary: `successful`, `incomplete`, `errored`, `total`, each holding
`mean`, `median`, `percentiles` {`p50`, `p90`, `p99`, ...}, `count`) and `requests` (`successful`,
`incomplete`, `errored`: GenerativeRequestStats with `request_id`, `prompt_tokens`, `output_tokens`,
`info.timings` {`request_start`, `first_token_iteration`, `last_token_iteration`, `request_end`},
epoch seconds). One run folder per benchmark.

GuideLLM's definitions: TTFT = first token iteration - request start; ITL per request = (last - first
token) / (output_tokens - 1), its distribution weighted by output_tokens - 1 (GuideLLM #1145: a
per-request mean, not one sample per gap); TPOT per request = (last token - request start) /
output_tokens, TTFT included, weighted by output_tokens. Its percentiles are not interpolated: the
smallest value whose cumulative weight reaches the quantile (Percentiles.from_pdf).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from backend.errors import InputError
from backend.results.importers.common import Check, Imported, imported_run, request_from_times

TOOL = "guidellm"
METRICS = ["time_to_first_token_ms", "inter_token_latency_ms", "time_per_output_token_ms", "request_latency"]


def is_guidellm(data) -> bool:
    """The report's keys: `benchmarks` beside `args` (the schema read) or, in later reports, `metadata`/`config`."""
    return isinstance(data, dict) and isinstance(data.get("benchmarks"), list) \
        and any(k in data for k in ("args", "metadata", "config"))


def read_guidellm(data: dict, path: Path) -> list[Imported]:
    benchmarks = data["benchmarks"]
    if not benchmarks:
        raise InputError(f"{path}: a GuideLLM report with no benchmarks")
    version = _version(data)
    out = []
    for n, bench in enumerate(benchmarks, start=1):
        if not isinstance(bench, dict) or bench.get("type_") != "generative_benchmark" \
                or not all(m in (bench.get("metrics") or {}) for m in METRICS) or "requests" not in bench:
            raise InputError(f"{path}: benchmark {n} is not a GuideLLM generative_benchmark with metrics "
                             f"{', '.join(METRICS)} and requests (another GuideLLM version?)")
        imported = _read_benchmark(bench, path, version, data.get("args") or {})
        imported.name = f"benchmark-{n}" if len(benchmarks) > 1 else ""
        out.append(imported)
    return out


def _version(data: dict) -> str | None:
    """Later reports name GuideLLM's version and their own (`metadata.guidellm_version`, `metadata.version`)."""
    meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    tool, report = meta.get("guidellm_version"), meta.get("version")
    if tool and report is not None:
        return f"{tool} (report version {report})"
    return str(tool or report) if (tool or report) is not None else None


def _read_benchmark(bench: dict, path: Path, version: str | None, args: dict) -> Imported:
    groups = bench["requests"] or {}
    rows = [(r, True) for r in groups.get("successful") or []] + \
           [(r, False) for key in ("incomplete", "errored") for r in groups.get(key) or []]
    timings = [(r.get("info") or {}).get("timings") or {} for r, _ in rows]
    starts = [t["request_start"] for t in timings if t.get("request_start") is not None]
    t0 = min(starts) if starts else 0.0
    ms = lambda t: None if t is None else (t - t0) * 1000.0   # noqa: E731
    requests, ttft, itl, tpot, latency = [], [], [], [], []
    for i, ((r, ok), t) in enumerate(zip(rows, timings)):
        start, first, last, end = (t.get(k) for k in ("request_start", "first_token_iteration",
                                                     "last_token_iteration", "request_end"))
        n = int(r.get("output_tokens") or 0)
        ok = ok and None not in (start, first, last, end)
        requests.append(request_from_times(i, ok, int(r.get("prompt_tokens") or 0), n, ms(start) or 0.0,
                                           ms(first), ms(last), ms(end), "" if ok else "incomplete or errored"))
        if not ok:
            continue
        ttft.append((1000 * (first - start), 1.0))
        latency.append((end - start, 1.0))
        if n > 1:
            itl.append((1000 * (last - first) / (n - 1), n - 1.0))
        if n > 0:
            tpot.append((1000 * (last - start) / n, float(n)))
    model = str(args.get("model") or "")
    # GuideLLM keeps no per-token times (only the first and last iteration): no tokens.csv rows
    run = imported_run(TOOL, version, [path], model, requests, [], {"profile": args.get("profile"),
                                                                    "rate": args.get("rate")}, device="remote")
    imported = Imported(run, _checks(bench["metrics"], ttft, itl, tpot, latency, run))
    total = ((bench["metrics"].get("request_totals") or {}).get("successful"))
    saved = len(groups.get("successful") or [])
    if isinstance(total, int) and total > saved:
        imported.notes.append(f"GuideLLM saved {saved} of its {total} successful requests (a sample): the "
                              f"recomputed figures cover those {saved}, its own all {total}")
    return imported


def guidellm_summary(pairs) -> dict[str, float] | None:
    """GuideLLM's DistributionSummary.from_values over (value, weight) pairs: the weighted mean and the
    percentiles as the smallest value whose cumulative weight reaches each quantile."""
    if not pairs:
        return None
    data = np.asarray(pairs, dtype=float)
    order = np.argsort(data[:, 0])
    values, weights = np.unique(data[order, 0], return_inverse=True)
    combined = np.zeros_like(values)
    np.add.at(combined, weights, data[order, 1])
    keep = combined > 0
    values, probs = values[keep], combined[keep] / combined[keep].sum()
    cdf = np.cumsum(probs)
    pick = lambda q: float(values[min(np.searchsorted(cdf, q, side="left"), len(values) - 1)])   # noqa: E731
    return {"mean": float(np.sum(values * probs)), "median": pick(0.5), "p90": pick(0.9), "p99": pick(0.99)}


def _checks(metrics: dict, ttft, itl, tpot, latency, run) -> list[Check]:
    s = run.summary
    nearest = ("GuideLLM's percentiles are the smallest value reaching the quantile; this tool interpolates "
               "between the two nearest (numpy's linear)")
    why = {
        "time_to_first_token_ms": nearest,
        "inter_token_latency_ms": "GuideLLM's ITL is each request's mean gap, weighted by its tokens less one "
                                  "(GuideLLM #1145); this tool's TPOT is the same per-request mean, unweighted, "
                                  "and its ITL needs the gaps GuideLLM does not save",
        "time_per_output_token_ms": "GuideLLM's TPOT runs from the request's start, TTFT included, over all "
                                    "output tokens; this tool's from the first token over the tokens after it",
        "request_latency": nearest,
    }
    ours = {"time_to_first_token_ms": ("ttft", 1.0), "inter_token_latency_ms": ("tpot", 1.0),
            "time_per_output_token_ms": ("tpot", 1.0), "request_latency": ("e2e", 0.001)}
    labels = {"time_to_first_token_ms": "TTFT (ms)", "inter_token_latency_ms": "ITL (ms)",
              "time_per_output_token_ms": "TPOT (ms)", "request_latency": "E2E (s)"}
    series = {"time_to_first_token_ms": ttft, "inter_token_latency_ms": itl, "time_per_output_token_ms": tpot,
              "request_latency": latency}
    checks = []
    for name in METRICS:
        theirs = (metrics.get(name) or {}).get("successful") or {}
        mine = guidellm_summary(series[name])
        for stat in ("mean", "median", "p90", "p99"):
            value = theirs.get(stat) if stat in ("mean", "median") else (theirs.get("percentiles") or {}).get(stat)
            base, scale = ours[name]
            our_stat = {"median": "p50"}.get(stat, stat)
            our_value = getattr(s, f"{base}_{our_stat}_ms")
            checks.append(Check(f"{labels[name].replace(' (', f' {stat} (')}", value,
                                mine[stat] if mine else None,
                                None if our_value is None else our_value * scale, 2 if scale == 1.0 else 3,
                                why[name]))
    return checks
