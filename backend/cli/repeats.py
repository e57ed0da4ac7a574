"""What the CLI prints after a run of `--repeats N`: each metric's mean, 95% interval and CV."""
from __future__ import annotations

import math
import sys

from backend.config import RunKind
from backend.results.repeats import INDEX, TABLE
from backend.records import RepeatsSummary

# the figures worth a line, in this order (repeats.csv holds every figure of the summary)
SHOWN = [("ttft_mean_ms", "TTFT mean (ms)"), ("ttft_p50_ms", "TTFT p50 (ms)"), ("ttft_p99_ms", "TTFT p99 (ms)"),
         ("tpot_mean_ms", "TPOT mean (ms)"), ("tpot_p50_ms", "TPOT p50 (ms)"), ("itl_p50_ms", "ITL p50 (ms)"),
         ("e2e_mean_ms", "E2E mean (ms)"), ("e2e_p50_ms", "E2E p50 (ms)"), ("e2e_p99_ms", "E2E p99 (ms)"),
         ("output_tokens_per_s", "output tok/s"), ("prefill_tokens_per_s", "prefill tok/s"),
         ("decode_tokens_per_s", "decode tok/s"), ("decode_share", "decode share"),
         ("goodput_requests_per_s", "goodput (req/s)"), ("prefill_step_p50_ms", "prefill step p50 (ms)"),
         ("decode_step_p50_ms", "decode step p50 (ms)"), ("mixed_step_p50_ms", "mixed step p50 (ms)"),
         ("duration_s", "duration (s)")]
POINT_SUFFIXES = ("_step_ms", "_tokens_per_s", "_ttft_ms", "_tpot_ms")


def shown_metrics(summary: RepeatsSummary, is_sweep: bool) -> list[tuple[str, str]]:
    if is_sweep:   # every point's figures (and the best tokens/s)
        return [(k, k) for k in summary.metrics if k.endswith(POINT_SUFFIXES)]
    return [(k, label) for k, label in SHOWN if k in summary.metrics and summary.metrics[k].n > 0]


def print_repeats(summary: RepeatsSummary, mode: RunKind, out_dir: str | None, out=None) -> None:
    from backend.cli.compare import number
    from backend.cli.report import print_table
    out = out or sys.stdout
    print("", file=out)
    # the cache keeps one model: a precision sweep loads each precision again in every repeat
    loads = "each precision loaded again per repeat" if mode == RunKind.SWEEP_PRECISION else "the model loaded once"
    print(f"repeats  {summary.num_done} of {summary.requested}, back to back, {loads}; "
          f"95% interval by Student's t (n - 1 degrees of freedom)" +
          (f"; {summary.note}" if summary.note else ""), file=out)
    rows = [("metric", "mean", "± 95% CI", "CV", "n")]
    for key, label in shown_metrics(summary, mode.sweep_kind is not None):
        iv = summary.metrics[key]
        def text(v, fmt=number):
            return "-" if v is None or math.isnan(v) else fmt(v)
        rows.append((label, text(iv.mean), text(iv.half_width), text(iv.cv, lambda v: f"{100 * v:.1f}%"), iv.n))
    print_table(rows, out)
    if out_dir and summary.folders:
        print(f"repeats written to {out_dir}/ (repeat-1 ... repeat-{summary.num_done}, {TABLE}, {INDEX})", file=out)
