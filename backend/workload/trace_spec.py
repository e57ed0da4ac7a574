"""A workload that replays a trace file: the validation of its TOML-shaped fields.

With `trace = FILE` the file gives the arrivals (arrival "trace"), the count (all rows, or the first
num_requests, or those arriving within duration_s after scaling) and the lengths. The spec's
prompt_len and output_len become the range the replayed rows span and its rate their mean rate:
informative (the run's settings show them, and the cache slots are sized from them), the rows
themselves are what is sent. Keys of drawn workloads (rate, burstiness, concurrency, the lengths)
are ignored, so a preset with a trace on top stays valid; prompt_source and seed still choose how
the prompts are built.
"""
from __future__ import annotations

import os
from pathlib import Path

from backend.errors import InputError
from backend.workload.spec import (MAX_REQUESTS, MAX_DURATION_S, MAX_TRACE_SPEED, PROMPT_SOURCES, TRACE_ARRIVAL,
                                   Label, LengthDist, WorkloadSpec, _choice, _fail, _non_negative, _positive, _whole)
from backend.workload.trace import TraceRow, replay_rows


def trace_spec_from_dict(data: dict, name: str, label: Label, base: Path | None) -> WorkloadSpec:
    def get(key: str, check):
        return None if key not in data else check(data[key], label(key))

    raw = data["trace"]
    if not isinstance(raw, str) or not raw.strip():
        _fail(label("trace"), "expected the path of a trace file", raw)
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = (base or Path.cwd()) / path
    path = Path(os.path.normpath(path))
    speed = get("trace_speed", lambda v, w: _positive(v, w, MAX_TRACE_SPEED)) or 1.0
    arrival = data.get("arrival", TRACE_ARRIVAL)
    if arrival != TRACE_ARRIVAL:
        raise InputError(f"{label('arrival')}: a trace replays its own arrival times; with a trace file the "
                         f"arrival is '{TRACE_ARRIVAL}', got {arrival!r}")
    for key in ("ramp_ms", "think_ms"):
        if get(key, lambda v, w: _non_negative(v, w, 1e12)):
            raise InputError(f"{label(key)}: is for a closed loop's users, not a trace's arrivals")
    num_requests = get("num_requests", lambda v, w: _whole(v, w, 1, MAX_REQUESTS))
    duration_s = get("duration_s", lambda v, w: _positive(v, w, MAX_DURATION_S))
    if num_requests is not None and duration_s is not None:
        raise InputError(f"{label('duration_s')}: give either num_requests or duration_s, not both")
    prompt_source = get("prompt_source", lambda v, w: _choice(v, w, PROMPT_SOURCES)) or "synthetic"
    seed = get("seed", lambda v, w: _whole(v, w, 0, 2**63 - 1)) or 0
    description = get("description", lambda v, w: v if isinstance(v, str) else _fail(w, "expected text", v))
    try:
        rows = replay_rows(path, speed, num_requests, duration_s)
    except InputError as exc:
        raise InputError(f"{label('trace')}: {exc}") from None
    if num_requests is None and duration_s is None:
        if len(rows) > MAX_REQUESTS:
            raise InputError(f"{label('trace')}: {path} has {len(rows)} rows, more than the limit of "
                             f"{MAX_REQUESTS}; replay the first ones with num_requests (--requests N)")
        num_requests = len(rows)
    span_s = rows[-1].arrival_ms / 1000.0
    return WorkloadSpec(
        name=name, num_requests=num_requests, duration_s=duration_s, arrival=TRACE_ARRIVAL,
        rate=(len(rows) - 1) / span_s if span_s > 0 else None,
        prompt_len=_span([r.prompt_len for r in rows]), output_len=_span([r.output_len for r in rows]),
        prompt_source=prompt_source, seed=seed, description=description or "",
        trace=str(path), trace_speed=speed)


def _span(lengths: list[int]) -> LengthDist:
    low, high = min(lengths), max(lengths)
    return LengthDist("fixed", low) if low == high else LengthDist("uniform", low=low, high=high)


def trace_rows(spec: WorkloadSpec) -> list[TraceRow]:
    """The rows a trace spec replays, at its speed."""
    return replay_rows(spec.trace, spec.trace_speed, spec.num_requests if spec.duration_s is None else None,
                       spec.duration_s)
