"""Trace files: recorded arrivals with their prompt and output lengths, for `--trace FILE`.

Three formats, told apart by the file's extension and columns:
- the published Azure LLM inference trace (CSV: TIMESTAMP as a date-time string, ContextTokens,
  GeneratedTokens);
- Mooncake's trace (JSONL: one object a line with "timestamp" in ms, "input_length", "output_length"
  and optionally "hash_ids", the prompt's 512-token blocks, equal ids for equal prefixes);
- this tool's own requests.csv (arrival_ms, prompt_tokens, output_tokens), or a run folder holding it.

Arrival times are made relative to the earliest row (the first, in the published files) and the
rows sorted by them. A length of 0 is replayed as 1 token (the engine needs at least one of each).
Parsed traces are cached by path, size and modification time, so validating a spec and building
its source read a file once.
"""
from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path

from backend.errors import InputError

MAX_TRACE_TOKENS = 1 << 20    # a longer length is a broken file, not a request
HASH_BLOCK_TOKENS = 512       # Mooncake: one hash id per 512 prompt tokens, the last block possibly shorter
FORMATS = {   # name -> (arrival column, prompt column, output column)
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "mooncake": ("timestamp", "input_length", "output_length"),
    "requests.csv": ("arrival_ms", "prompt_tokens", "output_tokens"),
}
ACCEPTED = ("accepted: the Azure LLM inference trace CSV (TIMESTAMP, ContextTokens, GeneratedTokens), "
            "Mooncake JSONL (timestamp, input_length, output_length), "
            "a run's requests.csv (arrival_ms, prompt_tokens, output_tokens) or its run folder")
_DATETIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s*(Z|[+-]\d{2}:?\d{2})?$")


@dataclass(frozen=True, slots=True)
class TraceRow:
    arrival_ms: float               # since the trace's earliest row, at speed 1
    prompt_len: int                 # tokens, >= 1
    output_len: int                 # tokens, >= 1
    hash_ids: tuple[int, ...] = ()  # Mooncake: the prompt's 512-token blocks


@dataclass(frozen=True, slots=True)
class Trace:
    path: str
    format: str                     # a key of FORMATS
    rows: tuple[TraceRow, ...]      # sorted by arrival_ms, the first at 0


def read_trace(path: str | Path) -> Trace:
    """The trace in a file (or a run folder); InputError, one line naming the file, for anything wrong."""
    p = Path(path)
    if p.is_dir():
        if not (p / "requests.csv").is_file():
            raise InputError(f"{p}: a folder, but it holds no requests.csv; {ACCEPTED}")
        p = p / "requests.csv"
    try:
        stat = p.stat()
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror or exc})") from None
    return _read_cached(str(p), stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=8)
def _read_cached(path: str, size: int, mtime_ns: int) -> Trace:
    try:
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file (not UTF-8); {ACCEPTED}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not text.strip():
        raise InputError(f"{path}: empty file, no requests to replay")
    is_json = Path(path).suffix.lower() in (".jsonl", ".json", ".ndjson") or text.lstrip().startswith("{")
    fmt, raw = (("mooncake", _json_rows(path, text)) if is_json else _csv_rows(path, text))
    if not raw:
        raise InputError(f"{path}: no rows after the header, no requests to replay")
    # Azure's times are whole nanoseconds since 1970 (an int, so the 100 ns digits survive the
    # subtraction); the others are ms
    scale = 1e-6 if fmt == "azure" else 1.0
    start = min(t for t, _, _, _ in raw)
    rows = sorted((TraceRow((t - start) * scale, max(1, n_in), max(1, n_out), hashes)
                   for t, n_in, n_out, hashes in raw),
                  key=lambda r: r.arrival_ms)
    return Trace(path, fmt, tuple(rows))


def replay_rows(path: str | Path, speed: float = 1.0, num_requests: int | None = None,
                duration_s: float | None = None) -> list[TraceRow]:
    """The rows a replay sends: arrivals at t / speed; the first num_requests rows, or those arriving
    within duration_s (after scaling), or all. InputError for more rows than the trace has."""
    trace = read_trace(path)
    rows = [TraceRow(r.arrival_ms / speed, r.prompt_len, r.output_len, r.hash_ids) for r in trace.rows]
    if num_requests is not None:
        if num_requests > len(rows):
            raise InputError(f"{trace.path}: {num_requests} requests asked for, but the trace has {len(rows)} rows")
        rows = rows[:num_requests]
    elif duration_s is not None:
        rows = [r for r in rows if r.arrival_ms < duration_s * 1000.0]
    return rows


def _csv_rows(path: str, text: str) -> tuple[str, list]:
    reader = csv.reader(text.splitlines())
    header = [name.strip().lstrip("\ufeff") for name in next(reader)]
    lower = {name.lower(): k for k, name in enumerate(header)}
    fmt, best = None, 0
    for name in ("azure", "requests.csv"):
        found = sum(column.lower() in lower for column in FORMATS[name])
        if found > best:
            fmt, best = name, found
    if fmt is None:
        raise InputError(f"{path}: its columns ({_names(header)}) are none of a trace format's; {ACCEPTED}")
    missing = [column for column in FORMATS[fmt] if column.lower() not in lower]
    if missing:
        raise InputError(f"{path}: missing column{'s' * (len(missing) > 1)} {', '.join(missing)}; {ACCEPTED}")
    at, n_in, n_out = (lower[column.lower()] for column in FORMATS[fmt])
    rows = []
    for fields in reader:
        line = reader.line_num
        if not any(field.strip() for field in fields):
            continue
        if len(fields) <= max(at, n_in, n_out):
            raise InputError(f"{path}: line {line}: {len(fields)} fields, the header has {len(header)}")
        when = _timestamp_ns(fields[at], path, line, header[at]) if fmt == "azure" else \
            _number(fields[at], path, line, header[at])
        rows.append((when, _length(fields[n_in], path, line, header[n_in]),
                     _length(fields[n_out], path, line, header[n_out]), ()))
    return fmt, rows


def _json_rows(path: str, text: str) -> list:
    at, n_in, n_out = FORMATS["mooncake"]
    rows = []
    for line, content in enumerate(text.splitlines(), start=1):
        if not content.strip():
            continue
        try:
            obj = json.loads(content)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: line {line}: not a JSON object ({exc.msg}); {ACCEPTED}") from None
        if not isinstance(obj, dict):
            raise InputError(f"{path}: line {line}: not a JSON object; {ACCEPTED}")
        missing = [key for key in (at, n_in, n_out) if key not in obj]
        if missing:
            raise InputError(f"{path}: line {line}: missing field{'s' * (len(missing) > 1)} "
                             f"{', '.join(missing)}; {ACCEPTED}")
        hashes = obj.get("hash_ids", [])
        if not isinstance(hashes, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hashes):
            raise InputError(f"{path}: line {line}: hash_ids must be a list of whole numbers")
        n_prompt = _length(obj[n_in], path, line, n_in)
        blocks = math.ceil(max(1, n_prompt) / HASH_BLOCK_TOKENS)
        if hashes and len(hashes) != blocks:   # equal ids must mean equal blocks: the ids and the length must agree
            raise InputError(f"{path}: line {line}: {len(hashes)} hash_ids for input_length {n_prompt}, which is "
                             f"{blocks} block{'s' * (blocks > 1)} of {HASH_BLOCK_TOKENS} tokens")
        rows.append((_number(obj[at], path, line, at), _length(obj[n_in], path, line, n_in),
                     _length(obj[n_out], path, line, n_out), tuple(hashes)))
    return rows


def _number(value: object, path: str, line: int, column: str) -> float:
    """A time in ms (Mooncake, requests.csv)."""
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise InputError(f"{path}: line {line}: {column} {_show(value)} is not a number")
    return number


def _length(value: object, path: str, line: int, column: str) -> int:
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, (str, float)) and not isinstance(value, bool):
        try:
            as_float = float(value)
            if math.isfinite(as_float) and as_float == int(as_float):
                number = int(as_float)
        except (TypeError, ValueError, OverflowError):
            pass
    if number is None:
        raise InputError(f"{path}: line {line}: {column} {_show(value)} is not a whole number of tokens")
    if number < 0:
        raise InputError(f"{path}: line {line}: {column} {number} is negative")
    if number > MAX_TRACE_TOKENS:
        raise InputError(f"{path}: line {line}: {column} {number} is more than the limit of {MAX_TRACE_TOKENS}")
    return number


def _timestamp_ns(value: str, path: str, line: int, column: str) -> int:
    """Azure's "2023-11-16 18:15:46.6805900" (7 fraction digits, optional zone), or a number of seconds."""
    match = _DATETIME.match(value.strip())
    if not match:
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if not math.isfinite(seconds):
            raise InputError(f"{path}: line {line}: {column} {_show(value)} is not a date-time "
                             "(YYYY-MM-DD HH:MM:SS.fff) or a number of seconds")
        return round(seconds * 1e9)
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=timezone.utc)
    except ValueError:
        raise InputError(f"{path}: line {line}: {column} {_show(value)} is not a valid date-time") from None
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        moment -= sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    return int(moment.timestamp()) * 10**9 + (int(fraction[:9].ljust(9, "0")) if fraction else 0)


def _names(header: list[str]) -> str:
    text = ", ".join(header)
    return text if len(text) <= 80 else text[:77] + "..."


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 30 else text[:27] + "..."


def trace_rows(spec) -> list[TraceRow]:
    """The rows a trace WorkloadSpec replays, at its speed."""
    return replay_rows(spec.trace, spec.trace_speed, spec.num_requests if spec.duration_s is None else None,
                       spec.duration_s)
