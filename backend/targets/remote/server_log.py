"""A remote run's readings of the server's `/metrics`: kept in order, written as server_metrics.csv, summed up.

The CSV is appended a row as each reading arrives (and flushed), so a run that crashes or is killed
keeps what it had read; it has one row a reading, on the run's clock (ms since the first request could go out): the
gauges as read, each histogram as the count and the seconds it gained since the run's first
reading (so a row's difference with the one before is what finished in between), and each counter
as what it gained since the run started (the reading taken before the first request went out, where
there is one). The summary gives the peaks and means of the gauges, for each histogram what the
server measured over the run: the mean and the p50 and p90 interpolated in its buckets (as
Prometheus's histogram_quantile does), and the counters' gains: the prompt tokens the server's
prefix cache was asked for and found over the run, and their ratio. run.json notes which of these
the server published.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from backend.errors import InputError, one_line
from backend.files import WriteError, write_files
from backend.summary import Summary
from backend.targets.remote.metrics import COUNTERS, GAUGES, HISTOGRAMS, POLL_S, Histogram, ServerMetrics

FILE = "server_metrics.csv"


def bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """The q-quantile of cumulative (upper bound, count) buckets, linear within its bucket; None when empty."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for le, cum in buckets:
        if cum >= rank:
            if math.isinf(le):   # beyond the last finite bound: that bound is all that is known
                return lower
            return lower + (le - lower) * ((rank - below) / (cum - below) if cum > below else 1.0)
        lower, below = le, cum
    return lower


def _minus(now: Histogram, then: Histogram | None) -> Histogram:
    if then is None:
        return now
    before = dict(then.buckets)
    return Histogram(now.count - then.count, now.total - then.total,
                     [(le, cum - before.get(le, 0.0)) for le, cum in now.buckets])


class ServerLog:
    """The readings of one run, in the order read; appended to `path` (server_metrics.csv) as they come
    when `write_to` names a folder."""

    def __init__(self, every_s: float = POLL_S):
        self.every_s = every_s
        self.readings: list[ServerMetrics] = []
        self.path: Path | None = None
        self.error: str | None = None             # why the file stopped being written (a full disk)
        self._first: dict[str, Histogram] = {}   # each histogram as first read: the run's zero
        self._zero: dict[str, float] | None = None   # each counter before the run (None: not read yet)
        self._seen: set[str] = set()             # every quantity any reading held
        self._file: io.TextIOWrapper | None = None
        self._columns: list[str] = []            # the quantities the file's header names

    def write_to(self, folder: str | Path) -> None:
        """Append each reading from now on to folder/server_metrics.csv (created at the first reading)."""
        self.path = Path(folder) / FILE

    def baseline(self, reading: ServerMetrics | None) -> None:
        """The counters as read before the run's first request: their zero (else the first reading's)."""
        if reading is not None and self._zero is None:
            self._zero = dict(reading.counters)

    def add(self, reading: ServerMetrics) -> None:
        if self._zero is None:
            self._zero = dict(reading.counters)
        for quantity, hist in reading.histograms.items():
            self._first.setdefault(quantity, hist)
        self._seen.update(reading.fields())
        self.readings.append(reading)
        if self.path is not None:
            self._append(reading)

    def close(self) -> None:
        """Close the file (it stays, with every reading so far: also after a crash)."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None

    def fields(self) -> list[str]:
        """The quantities the server published, in GAUGES, HISTOGRAMS then COUNTERS order."""
        return [f for f in GAUGES + HISTOGRAMS + COUNTERS if f in self._seen]

    def since_start(self, reading: ServerMetrics, quantity: str) -> Histogram | None:
        hist = reading.histograms.get(quantity)
        return None if hist is None else _minus(hist, self._first.get(quantity))

    def gained(self, reading: ServerMetrics, quantity: str) -> float | None:
        """What a counter gained from the run's start to `reading`. A counter not yet published at the start
        was 0 (SGLang publishes cached_tokens_total at its first hit); one below its start was reset (the
        server restarted) and counts from 0, as Prometheus's increase() does."""
        now = reading.counters.get(quantity)
        if now is None:
            return None
        zero = (self._zero or {}).get(quantity, 0.0)
        return now - zero if now >= zero else now

    def summary(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name in GAUGES:
            values = [getattr(r, name) for r in self.readings if getattr(r, name) is not None]
            if values:
                out[f"server_{name}_max"] = max(values)
                out[f"server_{name}_mean"] = sum(values) / len(values)
        last = self.readings[-1] if self.readings else None
        for quantity in HISTOGRAMS:
            hist = None if last is None else self.since_start(last, quantity)
            if hist is None or hist.count <= 0:
                continue
            base = f"server_{quantity[:-2]}"   # "server_prefill"
            out[f"{base}_count"] = hist.count
            out[f"{base}_mean_ms"] = 1000.0 * hist.total / hist.count
            for q in (50, 90):
                value = bucket_quantile(q / 100.0, hist.buckets)
                if value is not None:
                    out[f"{base}_p{q}_ms"] = 1000.0 * value
        gains = {} if last is None else {c: self.gained(last, c) for c in COUNTERS}
        queries, hits = gains.get("prefix_queries"), gains.get("prefix_hits")
        if queries is not None:
            out["server_prefix_queries"] = queries
            out["server_prefix_hits"] = hits or 0.0   # SGLang's hits counter is absent until the first one
            if queries > 0:
                out["server_prefix_hit_rate"] = (hits or 0.0) / queries
        if last is not None:
            from backend.targets.remote.spec_counters import server_spec_figures
            out.update(server_spec_figures(gains.get))
        return out

    def info(self) -> dict:
        """For run.json: which engine, which fields, how many readings (empty when the server published none)."""
        if not self.readings:
            return {}
        return {"engine": self.readings[0].engine, "fields": self.fields(), "readings": len(self.readings),
                "every_ms": self.every_s * 1000.0, "file": FILE}

    def csv_text(self) -> str:
        fields = self.fields()
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(self._header(fields))
        writer.writerows(self._row(r, fields) for r in self.readings)
        return buf.getvalue()

    def _header(self, fields: list[str]) -> list[str]:
        return (["time_ms"] + [f for f in fields if f in GAUGES]
                + [f"{h}_{part}" for h in fields if h in HISTOGRAMS for part in ("count", "sum")]
                + [c for c in fields if c in COUNTERS])

    def _row(self, r: ServerMetrics, fields: list[str]) -> list:
        row: list = [f"{r.time_ms:.3f}"] + ["" if getattr(r, g) is None else repr(getattr(r, g))
                                              for g in fields if g in GAUGES]
        for h in fields:
            if h in HISTOGRAMS:
                hist = self.since_start(r, h)
                row += ["", ""] if hist is None else [repr(hist.count), repr(hist.total)]
        for c in fields:
            if c in COUNTERS:
                gain = self.gained(r, c)
                row.append("" if gain is None else repr(gain))
        return row

    def _append(self, reading: ServerMetrics) -> None:
        """One row, flushed; a quantity never seen before widens the header, so the file is rewritten whole
        (atomically: it is never half a file), which servers do at most a few times a run."""
        fields = self.fields()
        try:
            if fields != self._columns:
                self.close()
                write_files(self.path.parent, {FILE: self.csv_text()})
                self._columns = fields
                self._file = open(self.path, "a", encoding="utf-8", newline="")
                return
            csv.writer(self._file, lineterminator="\n").writerow(self._row(reading, fields))
            self._file.flush()
        except (OSError, WriteError) as exc:   # a full disk: the run goes on, the file stops where it was
            self.close()
            self.path = None
            self.error = f"{FILE} could not be written: {one_line(exc)}"


def server_line(meta: dict, summary: Summary) -> str:
    """One line for the console: what the server said of itself, and which fields it published."""
    s = summary
    parts = []
    for label, most in (("running", s.server_running_max), ("waiting", s.server_waiting_max)):
        if most is not None:
            parts.append(f"{label} max {most:g}")
    if s.server_kv_usage_max is not None:
        parts.append(f"KV cache max {100.0 * s.server_kv_usage_max:.0f}%")
    for label, mean, p50 in (("TTFT", s.server_ttft_mean_ms, s.server_ttft_p50_ms),
                             ("ITL", s.server_itl_mean_ms, s.server_itl_p50_ms),
                             ("prefill", s.server_prefill_mean_ms, s.server_prefill_p50_ms),
                             ("decode", s.server_decode_mean_ms, s.server_decode_p50_ms)):
        if mean is not None:
            parts.append(f"{label} mean {mean:.1f} ms" + (f" (p50 ~{p50:.1f})" if p50 else ""))
    return (f"server   {meta.get('engine', '?')} /metrics, {meta.get('readings', 0)} readings: " + ", ".join(parts) +
            f"; fields: {' '.join(meta.get('fields', []))} ({FILE})")


def read_server_metrics(folder: str | Path) -> list[ServerMetrics]:
    """The readings of a run folder's server_metrics.csv (histograms as count and sum, no buckets; counters
    as gained since the run started);
    [] when the run has none; InputError for a file that is not one."""
    path = Path(folder) / FILE
    if not path.is_file():
        return []
    out = []
    with open(path, encoding="utf-8", newline="") as f:
        for line, row in enumerate(csv.DictReader(f), start=2):
            try:
                reading = ServerMetrics(float(row["time_ms"]))
                for g in GAUGES:
                    if row.get(g):
                        setattr(reading, g, float(row[g]))
                for h in HISTOGRAMS:
                    if row.get(f"{h}_count"):
                        reading.histograms[h] = Histogram(float(row[f"{h}_count"]), float(row[f"{h}_sum"]))
                for c in COUNTERS:   # what each gained since the run started
                    if row.get(c):
                        reading.counters[c] = float(row[c])
            except (KeyError, TypeError, ValueError) as exc:
                raise InputError(f"{path}, line {line}: {exc}") from None
            out.append(reading)
    return out
