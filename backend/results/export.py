"""Run folders: CSV, run.json and a Chrome trace, written atomically; and the reader for them.

A run folder holds steps.csv, requests.csv, tokens.csv (appended while the run goes, as
`*.csv.partial`, renamed when it ends), summary.csv, run.json and trace.json; and, from a run
whose engine sent KV maps, kv_map.jsonl (backend/results/kv_file.py), streamed the same way.
"""
from __future__ import annotations

import csv
import json
import os
import tempfile
import time
from dataclasses import MISSING, fields, replace
from enum import Enum
from pathlib import Path

from backend.errors import InputError, RunError
from backend.events import KvMap
from backend.files import write_files
from backend.results.kv_file import FILE as KV_FILE, KvFileWriter
from backend.run_info import RunInfo, TargetKind
from backend.summary import Summary
from backend.records import (Phase, RecordBatch, RequestRecord, RequestStatus, RunData, StepRecord, TokenRecord,
                             record_fields, record_row)

FORMAT = "phasescope-run/2"   # 2: info names every run's target ("local" too); 1 is read through upgrade()
FORMATS_READ = ("phasescope-run/1", FORMAT)
RECORD_FILES = {"steps.csv": StepRecord, "requests.csv": RequestRecord, "tokens.csv": TokenRecord}


def ensure_writable(folder: str | os.PathLike) -> Path:
    """Create the folder and check it can be written, before any work starts."""
    path = Path(folder)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-"):
            pass
    except OSError as exc:
        raise InputError(f"cannot write to output folder {path}: {exc.strerror or exc}") from None
    return path


class _Writer:
    """csv.writer with "\n" line ends that also quotes a cell holding a lone carriage return: QUOTE_MINIMAL
    quotes only the line terminator's characters, and a reader splits rows at an unquoted "\r" (a random
    model's text has them)."""

    def __init__(self, f):
        self.plain = csv.writer(f, lineterminator="\n")
        self.quoted = csv.writer(f, lineterminator="\n", quoting=csv.QUOTE_ALL)

    def writerow(self, row) -> None:
        row = list(row)
        carriage = any(isinstance(cell, str) and "\r" in cell for cell in row)
        (self.quoted if carriage else self.plain).writerow(row)

    def writerows(self, rows) -> None:
        for row in rows:
            self.writerow(row)


def _csv_text(header: list[str], rows) -> str:
    import io
    buf = io.StringIO()
    writer = _Writer(buf)
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


class RunWriter:
    """Streams records into a run folder as the run goes, so a crash loses at most the last second."""

    FLUSH_S = 1.0

    def __init__(self, folder: str | os.PathLike):
        self.folder = ensure_writable(folder)
        self._flushed = time.monotonic()
        self.error: str | None = None   # set once a write fails; the run then ends with it
        self._files = {}
        self._writers = {}
        for name, cls in RECORD_FILES.items():
            f = open(self.folder / f"{name}.partial", "w", encoding="utf-8", newline="")
            self._files[name] = f
            self._writers[name] = _Writer(f)
            self._writers[name].writerow(record_fields(cls))
        self.kv = KvFileWriter(self.folder)
        self.reused_tokens = self.prompt_tokens = 0   # so far: prompt tokens found cached, and processed (kv_map's hit rate)

    def add(self, batch: RecordBatch) -> None:
        if self.error is not None:
            return   # the run is already ending on this error
        try:
            self._writers["steps.csv"].writerows(record_row(r) for r in batch.steps)
            for s in batch.steps:
                self.reused_tokens += s.num_reused_tokens
                self.prompt_tokens += s.num_reused_tokens + s.num_prefill_tokens
            self._writers["tokens.csv"].writerows(record_row(r) for r in batch.tokens)
            self._writers["requests.csv"].writerows(record_row(r) for r in batch.requests)
            if time.monotonic() - self._flushed >= self.FLUSH_S:
                self.flush()
        except OSError as exc:
            self._fail(exc)

    def add_kv(self, snap: KvMap) -> None:
        """A KV map snapshot (the window's map of an opened run), with the prefix hit rate of the steps so far."""
        if self.error is not None:
            return
        try:
            self.kv.add(snap, self.reused_tokens / self.prompt_tokens if self.prompt_tokens else None)
        except OSError as exc:
            self._fail(exc)

    def flush(self) -> None:
        try:
            for f in self._files.values():
                f.flush()
            self.kv.flush()
        except OSError as exc:
            self._fail(exc)
        self._flushed = time.monotonic()

    def close(self, run: RunData) -> None:
        """Finish the streamed CSVs (renamed into place) and write summary, run.json and trace."""
        if self.error is not None:
            raise RunError(self.error)
        try:
            for f in self._files.values():
                f.close()
            self.kv.close()
        except OSError as exc:
            self._fail(exc)
        for name in self._files:
            os.replace(self.folder / f"{name}.partial", self.folder / name)
        self._files.clear()
        write_files(self.folder, _meta_texts(run, self.folder))

    def abandon(self) -> None:
        """Close and delete the partial files of a run that ended in an exception: no half-written file stays."""
        for name, f in self._files.items():
            try:
                f.close()
            except OSError:
                pass   # a full disk fails the last flush as well; the file is removed all the same
            (self.folder / f"{name}.partial").unlink(missing_ok=True)
        self._files.clear()
        self.kv.abandon()

    def _fail(self, exc: OSError) -> None:
        """A write failed (a full disk): stop writing, remove the partial files, end the run with one line."""
        self.error = f"cannot write to output folder {self.folder}: {exc.strerror or exc}"
        self.abandon()
        raise RunError(self.error) from None


LONG_FILES = ("steps.csv", "tokens.csv")   # the files that grow with every step


def write_run(folder: str | os.PathLike, run: RunData, records_from: Path | None = None,
              extra: dict[str, str] | None = None) -> Path:
    """Write a whole run (the window's Export CSV): all files or, on a failure, none.

    With records_from (a run folder), steps.csv and tokens.csv are copied from there rather
    than written from `run`, which may hold only the newest records of a long run. `extra`
    adds files (a sweep's sweep.csv) to the same all-or-nothing write.
    """
    path = ensure_writable(folder)
    records = {"steps.csv": run.steps, "requests.csv": run.requests, "tokens.csv": run.tokens}
    contents: dict[str, str | Path] = {
        name: (records_from / name if records_from is not None and name in LONG_FILES
               else _csv_text(record_fields(cls), (record_row(r) for r in records[name])))
        for name, cls in RECORD_FILES.items()}
    if records_from is not None and (records_from / KV_FILE).is_file():   # the KV maps the run recorded
        contents[KV_FILE] = records_from / KV_FILE
    write_files(path, {**contents, **_meta_texts(run, records_from), **(extra or {})})
    return path


def _meta_texts(run: RunData, records_from: Path | None = None) -> dict[str, str]:
    """summary.csv, run.json and trace.json; the trace reads the steps from `records_from`
    when the run holds none in memory (a long run streamed to disk)."""
    if not run.steps and records_from is not None:
        run = replace(run, steps=_read_records(records_from / "steps.csv", StepRecord))
    summary = run.summary.to_json()
    summary_rows = [[k, v] for k, v in summary.items()]
    meta = {"format": FORMAT, "run_id": run.run_id, "info": run.info.to_json(), "config": run.config,
            "summary": summary}
    return {"summary.csv": _csv_text(["metric", "value"], summary_rows),
            "run.json": json.dumps(meta, indent=2, default=_json_default) + "\n",
            "trace.json": json.dumps(chrome_trace(run))}


def _json_default(value):
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def chrome_trace(run: RunData) -> dict:
    """Chrome trace-event format (opens in Perfetto): engine steps on one track, one track per request."""
    us = 1000.0
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "engine"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "requests"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 0, "args": {"name": "steps"}},
    ]
    for s in run.steps:
        events.append({"ph": "X", "pid": 1, "tid": 0, "name": s.phase.value, "ts": s.start_ms * us,
                       "dur": s.duration_ms * us,
                       "args": {"step": s.step, "requests": s.num_requests, "tokens": s.num_tokens,
                                "kv_tokens": s.kv_tokens}})
    for r in run.requests:
        events.append({"ph": "M", "name": "thread_name", "pid": 2, "tid": r.request_id,
                       "args": {"name": f"request {r.request_id}"}})
        spans = [("queued", r.arrival_ms, r.scheduled_ms), ("prefill", r.scheduled_ms, r.first_token_ms),
                 ("decode", r.first_token_ms, r.finish_ms)]
        for name, start, end in spans:
            if start is not None and end is not None and end >= start:
                events.append({"ph": "X", "pid": 2, "tid": r.request_id, "name": name, "ts": start * us,
                               "dur": (end - start) * us,
                               "args": {"prompt_tokens": r.prompt_tokens, "output_tokens": r.output_tokens}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


# ---- reading ---------------------------------------------------------------------------

def _converter(annotation: str):
    kinds = {"int": int, "float": float, "str": str, "Phase": Phase, "RequestStatus": RequestStatus}
    optional = "None" in annotation
    base = kinds[annotation.replace("| None", "").strip()]

    def convert(text: str):
        if optional and text == "":
            return None
        return base(text)
    return convert


def _read_records(path: Path, cls) -> list:
    converters = {f.name: _converter(f.type) for f in fields(cls)}
    # a column added later with a default (a step's worker, a request's KV hand-off) may be absent from older runs
    optional = {f.name for f in fields(cls) if f.default is not MISSING}
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        present = set(reader.fieldnames or [])
        missing = [f.name for f in fields(cls) if f.name not in present and f.name not in optional]
        if missing:
            raise InputError(f"{path}: missing column(s) {', '.join(missing)} (from another version?)")
        required = [f.name for f in fields(cls) if f.name in present]
        out = []
        for line, row in enumerate(reader, start=2):
            try:
                out.append(cls(**{k: converters[k](row[k]) for k in required}))
            except (ValueError, TypeError) as exc:
                raise InputError(f"{path}, line {line}: {exc}") from None
        return out


def read_run(folder: str | os.PathLike) -> RunData:
    """Read a run folder written by the CLI or the window; InputError names what is missing."""
    path = Path(folder)
    if not path.is_dir():
        raise InputError(f"{path} is not a folder")
    missing = [name for name in ["run.json", *RECORD_FILES] if not (path / name).is_file()]
    if missing:
        raise InputError(f"{path} is not a complete run folder: missing {', '.join(missing)}")
    try:
        meta = json.loads((path / "run.json").read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path / 'run.json'} is not valid JSON: {exc}") from None
    meta = upgrade(meta, path / "run.json")
    return RunData(run_id=meta["run_id"], config=meta["config"], info=RunInfo.from_json(meta["info"]),
                   summary=Summary.from_json(meta["summary"]),
                   steps=_read_records(path / "steps.csv", StepRecord),
                   requests=_read_records(path / "requests.csv", RequestRecord),
                   tokens=_read_records(path / "tokens.csv", TokenRecord))


def read_meta(folder: str | os.PathLike) -> dict | None:
    """A folder's run.json, upgraded to this version's format; None when there is none or it does not parse
    (a quick look at a folder that may not be a run: its kind, its points)."""
    try:
        return upgrade(json.loads((Path(folder) / "run.json").read_text(encoding="utf-8")), Path(folder))
    except (OSError, ValueError, InputError):
        return None


def upgrade(meta, where: Path) -> dict:
    """run.json as this version writes it, from any version that wrote one; InputError for what is not.

    Version 1 (every run folder written before the typed records) recognised a local run by the
    absence of info's "target" and, before server_metrics.csv existed, held `server_metrics` as a
    bool: both are made explicit here, the one place that knows older formats.
    """
    found = meta.get("format") if isinstance(meta, dict) else None
    if found not in FORMATS_READ:
        raise InputError(f"{where}: format {found!r} is not {FORMAT!r} (another version?)")
    info = dict(meta.get("info") or {})
    if found == "phasescope-run/1":
        info.setdefault("target", "local")
        if not isinstance(info.get("server_metrics", {}), dict):
            info["server_metrics"] = {}
    if info.get("target") not in {kind.value for kind in TargetKind}:
        raise InputError(f"{where}: target {info.get('target')!r} is not one this version knows (another version?)")
    return {"format": FORMAT, "run_id": meta.get("run_id", ""), "config": meta.get("config") or {},
            "info": info, "summary": dict(meta.get("summary") or {})}
