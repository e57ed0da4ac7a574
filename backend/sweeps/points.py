"""A sweep folder's sweep.csv: one writer and one reader for every kind of point.

The kind is recorded in run.json (info's `sweep_kind`, RunInfo.sweep: batch, prompt, precision, rate,
concurrency or pd-ratio), never guessed from a header; a folder without it holds no sweep. Columns:
  - batch and prompt (SweepPoint): the axis ("batch" or "prompt_len"), then SWEEP_COLUMNS;
  - precision (PrecisionPoint): PRECISION_COLUMNS, the precision's name first;
  - rate and concurrency (LoadPoint): its fields, the axis value first;
  - pd-ratio (PDPoint): the split ("3P:5D"), then its fields;
  - depth (DepthPoint): its fields, the depth first.
An empty cell is a figure that has no value (no profile to predict with, for example).
"""
from __future__ import annotations

import csv
import io
from dataclasses import fields, replace
from pathlib import Path

from backend.config import SweepKind
from backend.errors import InputError
from backend.events import DepthPoint, LoadPoint, PDPoint, PrecisionPoint, SweepPoint
from backend.records import RunData
from backend.run_info import RunInfo, SweepInfo

SWEEP_COLUMNS = ["step_ms", "tokens_per_s", "flops", "bytes", "mfu", "mbu", "predicted_ms", "predicted_local_ms", "bound",
                 "simulated_ms", "weight_bytes", "predicted_weight_bytes"]
PRECISION_COLUMNS = [f.name for f in fields(PrecisionPoint)]
LOAD_COLUMNS = [f.name for f in fields(LoadPoint)]
PD_COLUMNS = [f.name for f in fields(PDPoint)]
DEPTH_COLUMNS = [f.name for f in fields(DepthPoint)]
KINDS = tuple(SweepKind)
STEP_KINDS = (SweepKind.BATCH, SweepKind.PROMPT)   # a SweepPoint each, the axis value first


def columns(kind: SweepKind) -> list[str]:
    if kind in STEP_KINDS:
        return ["batch" if kind == SweepKind.BATCH else "prompt_len", *SWEEP_COLUMNS]
    if kind == SweepKind.PD_RATIO:
        return ["split", *PD_COLUMNS]
    if kind == SweepKind.DEPTH:
        return DEPTH_COLUMNS
    return PRECISION_COLUMNS if kind == SweepKind.PRECISION else LOAD_COLUMNS


def _cells(kind: SweepKind, point) -> list:
    names = columns(kind)[1:] if kind in (*STEP_KINDS, SweepKind.PD_RATIO) else columns(kind)
    values = [getattr(point, c) for c in names]
    if kind in STEP_KINDS:
        values.insert(0, point.x)
    elif kind == SweepKind.PD_RATIO:
        values.insert(0, point.split)
    return ["" if v is None else v for v in values]


def points_csv(kind: SweepKind, points: list) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns(kind))
    w.writerows(_cells(kind, p) for p in points)
    return buf.getvalue()


def write_points(folder, kind: SweepKind, points: list, data: RunData, records_from=None) -> None:
    """The run's files, with its kind in run.json and sweep.csv, written all together or not at all."""
    from backend.results.export import write_run
    if kind not in KINDS:
        raise ValueError(f"not a sweep kind: {kind!r}")
    data.info.sweep = replace(data.info.sweep or SweepInfo(), sweep_kind=kind)
    write_run(folder, data, records_from, extra={"sweep.csv": points_csv(kind, points)})


def sweep_kind(folder) -> SweepKind | None:
    """The kind of sweep a run folder holds (from its run.json), None for a folder of another run."""
    from backend.results.export import read_meta
    meta = read_meta(folder)
    if meta is None:
        return None
    sweep = RunInfo.from_json(meta["info"]).sweep
    kind = sweep.sweep_kind if sweep is not None else None
    return SweepKind(kind) if kind in KINDS else None


def read_points(folder) -> tuple[SweepKind | None, list]:
    """(the sweep's kind, its points) of a run folder; (None, []) when it holds no sweep."""
    kind = sweep_kind(folder)
    path = Path(folder) / "sweep.csv"
    if kind is None or not path.is_file():
        return None, []

    def number(text: str):
        return None if text == "" else float(text)
    try:
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
        if kind in STEP_KINDS:
            x = columns(kind)[0]
            return kind, [SweepPoint(kind, int(row[x]), float(row["step_ms"]), float(row["tokens_per_s"]),
                                     float(row["flops"]), float(row["bytes"]), number(row["mfu"]), number(row["mbu"]),
                                     number(row["predicted_ms"]), number(row["predicted_local_ms"]), row["bound"],
                                     number(row["simulated_ms"]), number(row.get("weight_bytes") or ""),
                                     number(row.get("predicted_weight_bytes") or "")) for row in rows]
        if kind is SweepKind.PRECISION:
            return kind, [PrecisionPoint(row["dtype"], int(float(row["weight_bytes"])), float(row["weight_bits"]),
                                         *(number(row[c]) for c in PRECISION_COLUMNS[3:])) for row in rows]
        cls = {SweepKind.PD_RATIO: PDPoint, SweepKind.DEPTH: DepthPoint}.get(kind, LoadPoint)
        types = {f.name: f.type for f in fields(cls)}

        def value(name: str, text: str):
            if types[name].endswith("| None"):   # an empty cell: no value
                return None if text == "" else int(float(text)) if types[name].startswith("int") else float(text)
            return text == "True" if types[name] == "bool" else text if types[name] == "str" else \
                SweepKind(text) if types[name] == "SweepKind" else \
                int(float(text)) if types[name] == "int" else float(text)
        # a column added later with a default (a simulated load point's band) may be absent from older files
        return kind, [cls(**{c: value(c, row[c]) for c in types if c in row}) for row in rows]
    except (KeyError, ValueError, TypeError) as exc:
        raise InputError(f"{path}: not a {kind} sweep file from this version ({exc})") from None
