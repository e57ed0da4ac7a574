"""A run of `--repeats N`: each repeat's figures, combined into a mean, a 95% interval and a CV.

With an output folder DIR, repeat k is the ordinary run folder DIR/repeat-k, and DIR holds
repeats.csv (one row per metric: n, mean, the interval, CV, then every repeat's value) and
repeats.json (the index: format, the settings, the repeats' folders and run ids, the same
figures). The figures of one repeat are its summary's numbers, the median step time of each
phase (`prefill_step_p50_ms` ...), and for a sweep each point's step time and tokens/s
(`batch_4_step_ms`, `prompt_128_tokens_per_s`, `q8_0_tpot_ms` ...).
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import statistics
from pathlib import Path

from backend.errors import InputError
from backend.files import write_files
from backend.results.figures import point_figures
from backend.results.stats import interval_of
from backend.records import RepeatsSummary
from backend.run_info import RunInfo
from backend.summary import Summary

FORMAT = "phasescope-repeats/1"
INDEX = "repeats.json"
TABLE = "repeats.csv"


def repeat_folder(out_dir: str | os.PathLike, k: int) -> Path:
    """Repeat k's run folder (k counts from 1)."""
    return Path(out_dir) / f"repeat-{k}"


def step_figures(durations: dict[str, list[float]]) -> dict[str, float]:
    """The median step time of each phase that ran (keys are the phases' names)."""
    return {f"{phase}_step_p50_ms": statistics.median(ms) for phase, ms in durations.items() if ms}


def repeat_figures(summary: Summary, durations: dict[str, list[float]], points: list) -> dict[str, float]:
    """One repeat's figures: the summary's numbers, the step medians (not for a sweep: its steps
    are one median per point already), the sweep's points."""
    out = summary.numbers()
    if not points:
        out.update(step_figures(durations))
    out.update(point_figures(points))
    return out


def summarize_repeats(figures: list[dict[str, float]], requested: int, run_ids: list[str],
                      folders: list[str], note: str = "") -> RepeatsSummary:
    keys = list(dict.fromkeys(k for f in figures for k in f))
    per_repeat = {k: [f.get(k, math.nan) for f in figures] for k in keys}
    metrics = {k: interval_of(values) for k, values in per_repeat.items()}
    return RepeatsSummary(requested, list(run_ids), list(folders), metrics, per_repeat, note)


def _number(value: float):
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else value


def write_repeats(folder: str | os.PathLike, summary: RepeatsSummary, config: dict, info: RunInfo) -> Path:
    """repeats.csv and repeats.json beside the repeat folders, both or neither."""
    path = Path(folder)
    n = summary.num_done
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["metric", "n", "mean", "ci_low", "ci_high", "ci_half_width", "cv",
                *(f"repeat_{k}" for k in range(1, n + 1))])
    for name, iv in summary.metrics.items():
        w.writerow([name, iv.n, *(_number(v) for v in (iv.mean, iv.low, iv.high, iv.half_width, iv.cv)),
                    *(_number(v) for v in summary.per_repeat.get(name, []))])
    index = {"format": FORMAT, "requested": summary.requested, "note": summary.note, "config": config,
             "info": info.to_json(), "level": 0.95, "interval": "Student's t, n - 1 degrees of freedom",
             "repeats": [{"folder": Path(f).name, "run_id": r} for f, r in zip(summary.folders, summary.run_ids)],
             "metrics": {name: {"n": iv.n, "mean": iv.mean, "ci_low": iv.low, "ci_high": iv.high,
                                "ci_half_width": iv.half_width, "cv": iv.cv}
                         for name, iv in summary.metrics.items()}}
    write_files(path, {TABLE: buf.getvalue(), INDEX: json.dumps(index, indent=2) + "\n"})
    return path


def is_repeats_folder(folder: str | os.PathLike) -> bool:
    return (Path(folder) / INDEX).is_file()


def read_repeats_index(folder: str | os.PathLike) -> tuple[dict, list[Path]]:
    """repeats.json and the repeat folders it names; InputError for a broken index."""
    path = Path(folder)
    try:
        index = json.loads((path / INDEX).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path / INDEX} cannot be read: {exc}") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise InputError(f"{path / INDEX}: not a repeats index of this version (format {FORMAT!r})")
    try:
        folders = [path / r["folder"] for r in index["repeats"]]
    except (KeyError, TypeError):
        raise InputError(f"{path / INDEX}: its list of repeats is malformed") from None
    if not folders:
        raise InputError(f"{path / INDEX} lists no finished repeat")
    return index, folders
