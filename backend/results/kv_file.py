"""kv_map.jsonl: the KV map snapshots a run emitted (backend/engine/kv_watch.py), kept in its run folder so
a folder opened later shows its cache as the live window did.

One JSON object a line, in the run's order; KEYS names them (docs/run-folder.md lists them). A cell's
owner and its tokens are run-length encoded, [[value, count], ...]: a paged cache is long runs of one
request's blocks and of free ones, so a 1,000-block cache takes a few hundred bytes a line, not 8 kB. The
file keeps a snapshot every EVERY_MS of the run's clock (the engine sends one every 250 ms; an hour's run
stays a few MB) and always the last; blocks found cached in the snapshots it skips are merged into the
next one it keeps, so no reuse goes unmarked. Written as kv_map.jsonl.partial and renamed when the run
ends, as the record CSVs are.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from backend.errors import InputError
from backend.events import KV_CACHED_FREE as CACHED_FREE, KV_FREE as FREE, KV_RESERVED as RESERVED, KvMap

FILE = "kv_map.jsonl"
EVERY_MS = 500.0
KEYS = ("time_ms", "final", "layout", "block_size", "cells_per_row", "owners", "tokens", "reused", "cached_tokens",
        "held", "cached", "free", "reserved", "hit_rate")


def run_lengths(values: np.ndarray) -> list[list[int]]:
    """[[value, count], ...] of consecutive equal values."""
    if len(values) == 0:
        return []
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    counts = np.diff(np.r_[starts, len(values)])
    return [[int(v), int(n)] for v, n in zip(values[starts], counts)]


def expand(runs: list, dtype) -> np.ndarray:
    if not runs:
        return np.empty(0, dtype=dtype)
    values, counts = zip(*runs)
    return np.repeat(np.asarray(values, dtype=dtype), np.asarray(counts, dtype=np.int64))


def encode(snap: KvMap, hit_rate: float | None) -> dict:
    owners = np.frombuffer(snap.owners, dtype=np.int32)
    tokens = np.frombuffer(snap.tokens, dtype=np.uint16)
    free, cached, reserved = (int(np.count_nonzero(owners == s)) for s in (FREE, CACHED_FREE, RESERVED))
    line = {"time_ms": round(snap.time_ms, 3), "final": snap.final, "layout": snap.layout,
            "block_size": snap.block_size, "cells_per_row": snap.cells_per_row, "owners": run_lengths(owners),
            "tokens": run_lengths(tokens), "reused": np.frombuffer(snap.reused, dtype=np.int32).tolist(),
            "cached_tokens": {str(k): v for k, v in snap.cached_tokens.items()},
            "held": len(owners) - free - cached - reserved, "cached": cached, "free": free, "reserved": reserved,
            "hit_rate": None if hit_rate is None else round(hit_rate, 6)}
    assert tuple(line) == KEYS
    return line


def decode(line: dict) -> KvMap:
    owners = expand(line["owners"], np.int32)
    tokens = expand(line["tokens"], np.uint16)
    if len(owners) != len(tokens):
        raise ValueError(f"{len(owners)} owners but {len(tokens)} token counts")
    return KvMap(float(line["time_ms"]), str(line["layout"]), int(line["block_size"]), int(line["cells_per_row"]),
                 owners.tobytes(), tokens.tobytes(), np.asarray(line["reused"], dtype=np.int32).tobytes(),
                 {int(k): int(v) for k, v in line["cached_tokens"].items()}, bool(line["final"]))


class KvFileWriter:
    """Appends a run's snapshots to folder/kv_map.jsonl.partial (opened at the first: a run without a
    KV map, a remote one, writes no file); `close` renames it into place, `abandon` removes it."""

    def __init__(self, folder: Path, every_ms: float = EVERY_MS):
        self.partial = Path(folder) / f"{FILE}.partial"
        self.every_ms = every_ms
        self._file = None
        self._next_ms = float("-inf")
        self._reused: list[bytes] = []      # of the snapshots skipped since the last line
        self._cached: dict[int, int] = {}

    def add(self, snap: KvMap, hit_rate: float | None) -> None:
        """May raise OSError (a full disk): the caller ends the run on it."""
        self._reused.append(snap.reused)
        self._cached.update(snap.cached_tokens)
        if snap.time_ms < self._next_ms and not snap.final:
            return
        self._next_ms = snap.time_ms + self.every_ms
        merged = KvMap(snap.time_ms, snap.layout, snap.block_size, snap.cells_per_row, snap.owners, snap.tokens,
                       b"".join(self._reused), self._cached, snap.final)
        self._reused, self._cached = [], {}
        if self._file is None:
            self._file = open(self.partial, "w", encoding="utf-8", newline="\n")
        self._file.write(json.dumps(encode(merged, hit_rate), separators=(",", ":")) + "\n")

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            self.partial.replace(self.partial.with_name(FILE))

    def abandon(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None
        self.partial.unlink(missing_ok=True)


def read_kv_map(folder: str | Path) -> list[KvMap] | None:
    """The snapshots of a run folder's kv_map.jsonl in order; None when the folder has no such file (a run
    from before it, or one with no cache of its own to show); InputError, file and line, for a damaged one."""
    path = Path(folder) / FILE
    if not path.is_file():
        return None
    out = []
    with open(path, encoding="utf-8") as f:
        for number, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                out.append(decode(json.loads(text)))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise InputError(f"{path}, line {number}: not a KV map snapshot ({exc})") from None
    return out
