"""llama-bench's `-o json` and `-o csv` (tools/llama-bench/llama-bench.cpp: `test::get_fields()`,
`json_printer`, `csv_printer`).

One row per test: the build (`build_commit`, `build_number`), the machine and model (`cpu_info`,
`gpu_info`, `backends`, `model_filename`, `model_type`, `model_size`, `model_n_params`), the settings,
the test (`n_prompt`, `n_gen`, `n_depth`) and its timing (`avg_ns`, `stddev_ns`, `avg_ts`,
`stddev_ts`); JSON adds each repetition's `samples_ns` and `samples_ts`. A test is a prompt of
`n_prompt` tokens (pp) or `n_gen` generated tokens (tg) after `n_depth` tokens of context.

llama-bench's definitions: avg_ts = the mean over repetitions of (n_prompt + n_gen) * 1e9 / t_ns (a mean
of rates, not the tokens over the mean time); avg_ns = the integer mean of the times. There are no
requests: the run folder holds the tests as figures (`pp512_tokens_per_s`, `tg128@d4096_tokens_per_s`)
and the prefill and decode rates of the first pp and tg test.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from backend.errors import InputError
from backend.results.importers.common import Check, Imported, imported_run
from backend.summary import Summary

TOOL = "llama-bench"
REQUIRED = ["build_commit", "model_type", "n_prompt", "n_gen", "avg_ns", "avg_ts"]


def is_llama_bench_rows(rows) -> bool:
    return isinstance(rows, list) and bool(rows) and all(isinstance(r, dict) for r in rows) \
        and "avg_ts" in rows[0] and "n_prompt" in rows[0]


def read_llama_bench_csv(path: Path) -> Imported:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read it: {exc}") from None
    rows = list(csv.DictReader(io.StringIO(text)))
    if not rows or any(k not in rows[0] for k in REQUIRED):
        raise InputError(f"{path}: not a llama-bench CSV: expected the columns {', '.join(REQUIRED)}")
    return read_llama_bench(rows, path)


def read_llama_bench(rows: list[dict], path: Path) -> Imported:
    for n, row in enumerate(rows, start=1):
        missing = [k for k in REQUIRED if k not in row]
        if missing:
            raise InputError(f"{path}: test {n} is not a llama-bench result: missing {', '.join(missing)} "
                             f"(expected {', '.join(REQUIRED)})")
    figures: dict[str, float] = {}
    checks: list[Check] = []
    prefill = decode = None
    for row in rows:
        n_prompt, n_gen, depth = int(row["n_prompt"]), int(row["n_gen"]), int(row.get("n_depth") or 0)
        name = (f"pp{n_prompt}" if n_gen == 0 else f"tg{n_gen}" if n_prompt == 0 else f"pp{n_prompt}+tg{n_gen}") \
            + (f"@d{depth}" if depth else "")
        theirs = float(row["avg_ts"])
        figures[f"{name}_tokens_per_s"] = theirs
        samples = _samples(row.get("samples_ns"))
        tokens = n_prompt + n_gen
        recomputed = sum(tokens * 1e9 / t for t in samples) / len(samples) if samples else None
        # what a reader computing tokens over the mean time gets: why avg_ts is not that
        over_mean = tokens * 1e9 / float(row["avg_ns"]) if float(row["avg_ns"]) > 0 else None
        checks.append(Check(f"{name} tokens/s", theirs, recomputed, over_mean, 6,
                            "llama-bench's avg_ts is the mean of each repetition's rate; tokens over the mean "
                            "time (this column) weighs slow repetitions more"))
        if samples:
            checks.append(Check(f"{name} mean time (ns)", float(row["avg_ns"]), float(sum(samples) // len(samples)),
                                None, 0))
        if n_gen == 0 and prefill is None:
            prefill = theirs
        if n_prompt == 0 and decode is None:
            decode = theirs
    first = rows[0]
    summary = Summary(prefill_tokens_per_s=prefill, decode_tokens_per_s=decode, num_requests=0,
                      extra={k: v for k, v in figures.items()})
    version = f"{first.get('build_commit')} ({first.get('build_number')})" if first.get("build_number") \
        else str(first.get("build_commit"))
    model = str(first.get("model_filename") or first.get("model_type") or "")
    run = imported_run(TOOL, version, [path], model, [], [], {
        k: first.get(k) for k in ("n_batch", "n_ubatch", "n_threads", "n_gpu_layers", "type_k", "type_v",
                                  "flash_attn")}, summary=summary, created=str(first.get("test_time") or ""),
        device=str(first.get("gpu_info") or first.get("cpu_info") or ""))
    run.info.dtype = str(first.get("model_type") or "")
    run.info.device_name = str(first.get("backends") or "")
    return Imported(run, checks)


def _samples(value) -> list[int]:
    if isinstance(value, list):
        return [int(v) for v in value]
    return []
