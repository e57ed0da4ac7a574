"""AIPerf's exports: `profile_export.jsonl` (one record per request) and `profile_export_aiperf.json`
(the run's statistics), as docs/tutorials/working-with-profile-exports.md and
src/aiperf/common/models/export_models.py (JsonExportData, schema_version "1.0") describe them.

A record: `metadata` (`request_start_ns`, `request_end_ns`, epoch ns; `benchmark_phase`), `metrics`
(each `{"value": ..., "unit": ...}`: `time_to_first_token` ms, `request_latency` ms,
`input_sequence_length`, `output_sequence_length` tokens, `inter_chunk_latency` a list of ms gaps) and
`error` (null when it succeeded). The statistics: each metric an object of `unit`, `avg`, `p1`...`p99`,
`min`, `max`, `std`, beside `schema_version` and `aiperf_version`.

AIPerf's definitions (src/aiperf/metrics/types): ITL per request = (request_latency - TTFT) /
(output_sequence_length - 1), one value per request, so its percentiles are over requests; TTFT to
the first content chunk; output token throughput = total output tokens / (last response - first
request).
"""
from __future__ import annotations

import json
from pathlib import Path

from backend.errors import InputError
from backend.results.importers.common import (Check, Imported, imported_run, read_json, request_from_times, stats,
                                              tokens_from_gaps)

TOOL = "aiperf"
RECORDS = "profile_export.jsonl"
SUMMARY = "profile_export_aiperf.json"
SCHEMAS = ("1.0",)
RECORD_METRICS = ["time_to_first_token", "request_latency", "output_sequence_length"]


def is_aiperf_summary(data) -> bool:
    return isinstance(data, dict) and ("aiperf_version" in data or "schema_version" in data) \
        and "time_to_first_token" in data


def read_aiperf(records_path: Path | None, summary_path: Path | None) -> Imported:
    summary = read_json(summary_path, "an AIPerf profile_export_aiperf.json") if summary_path else None
    version = None
    if summary is not None:
        schema = summary.get("schema_version")
        if schema is not None and str(schema) not in SCHEMAS:
            raise InputError(f"{summary_path}: AIPerf export schema_version {schema!r}: this version reads "
                             f"{', '.join(SCHEMAS)}")
        if "time_to_first_token" not in summary and "request_latency" not in summary:
            raise InputError(f"{summary_path}: not an AIPerf summary: expected time_to_first_token, request_latency")
        version = summary.get("aiperf_version")
    records = _read_records(records_path) if records_path else []
    requests, tokens = [], []
    ttfts, itls, latencies = [], [], []
    starts = [r["metadata"]["request_start_ns"] for r in records]
    t0 = min(starts) if starts else 0
    total_output, last_end = 0, None
    for i, r in enumerate(records):
        meta, metrics, ok = r["metadata"], r.get("metrics") or {}, r.get("error") is None
        arrival = (meta["request_start_ns"] - t0) / 1e6
        finish = (meta["request_end_ns"] - t0) / 1e6 if meta.get("request_end_ns") is not None else None
        value = lambda name: (metrics.get(name) or {}).get("value")   # noqa: E731
        ttft, latency, osl = value("time_to_first_token"), value("request_latency"), value("output_sequence_length")
        isl = value("input_sequence_length") or value("error_isl") or 0
        ok = ok and ttft is not None and latency is not None and osl is not None
        gaps = value("inter_chunk_latency") or []
        first = arrival + ttft if ok else None
        requests.append(request_from_times(i, ok, int(isl), int(osl or 0), arrival, first,
                                           first + sum(gaps) if ok else None,
                                           arrival + latency if ok else finish,
                                           "" if ok else str((r.get("error") or {}).get("type", "error"))))
        if meta.get("request_end_ns") is not None:
            last_end = max(last_end or 0, meta["request_end_ns"])
        if not ok:
            continue
        tokens.extend(tokens_from_gaps(i, first, gaps))
        ttfts.append(ttft)
        latencies.append(latency)
        total_output += int(osl)
        if osl >= 2:
            itls.append((latency - ttft) / (osl - 1))
    files = [p for p in (records_path, summary_path) if p is not None]
    model = _model(summary)
    run = imported_run(TOOL, version, files, model, requests, tokens, {"records": len(records)}, device="remote")
    duration_s = (last_end - t0) / 1e9 if records and last_end else None
    return Imported(run, _checks(summary or {}, bool(records), ttfts, itls, latencies, total_output, duration_s,
                                 run))


def _read_records(path: Path) -> list[dict]:
    out = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read it: {exc}") from None
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}, line {n}: not JSON ({exc.msg}): expected one AIPerf record a line") from None
        meta = record.get("metadata") if isinstance(record, dict) else None
        if not isinstance(meta, dict) or "request_start_ns" not in meta or "metrics" not in record:
            raise InputError(f"{path}, line {n}: not an AIPerf record: expected metadata.request_start_ns, "
                             f"metrics, error")
        if meta.get("benchmark_phase", "profiling") != "profiling":
            continue   # warm-up records are not in AIPerf's own figures
        out.append(record)
    return out


def _model(summary) -> str:
    try:
        names = summary["input_config"]["endpoint"]["model_names"]
        return str(names[0]) if names else ""
    except (KeyError, TypeError, IndexError):
        return ""


def _checks(summary: dict, has_records: bool, ttfts, itls, latencies, total_output, duration_s, run) -> list[Check]:
    s = run.summary
    got = lambda name, stat: (summary.get(name) or {}).get(stat)   # noqa: E731
    checks = []
    why_itl = ("AIPerf's ITL is one value per request, (latency - TTFT) / (tokens - 1), and its percentiles are "
               "over requests; this tool's ITL is one sample per gap between tokens")
    for name, label, values, ours, why in (
            ("time_to_first_token", "TTFT", ttfts, "ttft", ""),
            ("inter_token_latency", "ITL", itls, "itl", why_itl),
            ("request_latency", "E2E", latencies, "e2e", "")):
        mine = stats(values, (50, 90, 99)) if has_records else None
        for stat in ("avg", "p50", "p90", "p99"):
            key = "mean" if stat == "avg" else stat
            checks.append(Check(f"{label} {stat} (ms)", got(name, stat), mine[key] if mine else None,
                                getattr(s, f"{ours}_{key}_ms") if has_records else None, 2, why))
    recomputed = total_output / duration_s if has_records and duration_s else None
    checks.append(Check("output throughput (tok/s)", got("output_token_throughput", "avg"), recomputed,
                        s.output_tokens_per_s if has_records else None, 2,
                        "AIPerf divides by the first request's start to the last response; this tool by the "
                        "first request's start to the last finish"))
    return checks
