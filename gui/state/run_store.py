"""Everything the window knows about the run on screen, fed by records and events. No Qt.

Slots hand each RecordBatch and event to a RunStore; the views read it when the repaint
timer fires. Memory stays flat however long a run goes: the newest steps and tokens are
kept exactly in compact numpy columns (for hover details, token ticks and the last
second's rates), older ones are dropped, and the step strip paints from a bounded copy
whose older history is merged. The complete record of a run lives on disk: the worker
streams it into a run folder (`source`), and Export CSV copies it from there.
"""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import numpy as np

from backend.targets.disaggregated.events import WorkerLayout
from backend.errors import InputError
from backend.events import (DepthPoint, KvMap, LoadPoint, ModelLoaded, PDPoint, PrecisionPoint, RequestsArrived,
                            RunFinished, SweepPoint)
from backend.records import Phase, RecordBatch, RequestRecord, RequestStatus, RunData, StepRecord, TokenRecord
from backend.results.kv_file import read_kv_map
from backend.run_info import RunInfo
from backend.summary import Summary
from backend.targets.remote.metrics import ServerMetrics
from backend.targets.remote.server_log import read_server_metrics
from backend.roofline.cost import PhaseTotals, step_pairs

from gui.state.buffers import BoundedBuffer, GrowableBuffer, RecentBuffer
from gui.state.kv_state import KvState
from gui.state.worker_rows import WorkerRows

PHASES = (Phase.PREFILL, Phase.DECODE, Phase.MIXED)
PHASE_CODE = {p: float(i) for i, p in enumerate(PHASES)}
STATUSES = tuple(RequestStatus)
STATUS_CODE = {s: float(i) for i, s in enumerate(STATUSES)}

# every numeric StepRecord field (not run_id, one per run, nor the worker's name), the phase stored as its code
STEP_COLUMNS = tuple(f.name for f in fields(StepRecord) if f.name != "run_id" and f.type != "str")
_STEP_TYPES = {f.name: f.type for f in fields(StepRecord)}
TOKEN_COLUMNS = ("request_id", "index", "time_ms", "token_id")
# one row per request, in order of first sight (arrival); NaN where not known yet
LANE_COLUMNS = ("request_id", "arrival_ms", "scheduled_ms", "first_token_ms", "last_token_ms", "finish_ms",
                "prompt_tokens", "output_tokens", "status", "ttft_ms", "tpot_ms", "e2e_ms", "queue_ms",
                "prefill_ms", "kv_transfer_ms",   # the last two: a disaggregated run's hand-off, once finished
                "cached_tokens", "computed_tokens")   # its prompt found in the prefix cache, and computed
# "proposed": the guesses a verification step checked (backend/engine/spec/), 0 for any other step; merged bars
# keep the most, so a stretch of verifications stays marked on the strip
BAR_COLUMNS = ("start", "end", "tokens", "phase", "count", "proposed")
# per step, at its end: the share of the KV cache held and the prefix hit rate of the whole run so far (NaN
# before any prompt token): the strip's and the KV tab's curves, exact however many older steps are dropped
KV_CURVE_COLUMNS = ("time_ms", "held", "hit")

# Exact rows kept (about 9 MB each): over an hour of CPU steps, the last ~13 s of a fast GPU's
STEPS_KEPT = 1 << 16
TOKENS_KEPT = 1 << 18
BARS_KEPT = 50_000    # the strip's exact and merged bars, each


class RunStore:
    def __init__(self, steps_kept: int = STEPS_KEPT, tokens_kept: int = TOKENS_KEPT, bars_kept: int = BARS_KEPT):
        self.steps = RecentBuffer(STEP_COLUMNS, limit=steps_kept)
        self.bars = BoundedBuffer(BAR_COLUMNS, {"start": "first", "end": "last", "tokens": "max",
                                                "phase": _merge_phase, "count": "sum", "proposed": "max"},
                                  recent=bars_kept, history=bars_kept)
        self.tokens = RecentBuffer(TOKEN_COLUMNS, limit=tokens_kept)
        self.lanes = GrowableBuffer(LANE_COLUMNS, capacity=256)
        self.kv_curve = RecentBuffer(KV_CURVE_COLUMNS, limit=steps_kept)
        self.kv = KvState()   # the KV map and its counts over time
        self.version = 0      # bumped on every change, never reset: views repaint when it differs from what they saw
        self.generation = 0   # bumped by reset: a new run (views holding counts start over)
        self.reset()

    def reset(self) -> None:
        self.steps.clear()
        self.bars.clear()
        self.tokens.clear()
        self.lanes.clear()
        self.kv_curve.clear()
        self.kv.clear()
        self.reused_tokens = self.prompt_tokens_seen = 0.0   # the run's prompt tokens found cached, and processed
        self.rows: dict[int, int] = {}                 # request id -> lane row
        self.records: dict[int, RequestRecord] = {}    # requests that finished (or were rejected / stopped)
        self.texts: dict[int, str] = {}
        self.sweep_points: list[SweepPoint] = []
        self.sweep_context: int | None = None          # the context a batch sweep's points were measured at
        self.precision_points: list[PrecisionPoint] = []   # a precision sweep's, in the order measured
        self.precision_summary: Summary | None = None     # and its RunFinished summary (ratios, skipped precisions)
        self.load_points: list[LoadPoint] = []         # a rate or concurrency sweep's, one load run each
        self.pd_points: list[PDPoint] = []             # a prefill:decode split sweep's, one simulated run each
        self.depth_points: list[DepthPoint] = []       # a depth sweep's, one a context depth
        self.model: ModelLoaded | None = None
        self.info: RunInfo = RunInfo()
        self.config: dict = {}
        self.run_id = ""
        self.finished: RunFinished | None = None
        self.changed_rows: set[int] = set()            # lanes changed since the table last looked
        self.workers = WorkerRows()                    # a disaggregated run's steps, one row per worker
        self.remote = False                            # a remote server's run: no steps, sent = scheduled
        self.server: ServerMetrics | None = None       # the server's latest reading of its own load
        self.server_readings: list[ServerMetrics] = []  # and all of them, in order (server_metrics.csv)
        self.source: Path | None = None                # the run folder holding the complete record
        # whole-run sums for the per-token costs (the step buffer keeps only the newest steps)
        self.prefill_ms = self.prefill_tokens = self.decode_ms = self.decode_tokens = 0.0
        # and what the roofline needs of them (backend.roofline.cost.phase_roofline), as the CLI's summary keeps it
        self.roofline = {Phase.PREFILL: PhaseTotals(), Phase.DECODE: PhaseTotals()}
        self.version += 1
        self.generation += 1

    # ---- feeding ---------------------------------------------------------------------------

    def add_event(self, event) -> None:
        if isinstance(event, RecordBatch):
            self.add_batch(event)
        elif isinstance(event, RequestsArrived):
            for rid, arrival, prompt in zip(event.request_ids, event.arrival_ms, event.prompt_tokens):
                row = self._row(rid)
                self._set(row, arrival_ms=arrival, prompt_tokens=prompt)
                if self.remote:   # sent when it arrived: from the client, the wait is all the server's
                    self._set(row, scheduled_ms=arrival, queue_ms=0.0)
        elif isinstance(event, KvMap):
            self.kv.add(event)
            for rid, cached in event.cached_tokens.items():   # known at admission, before the request finishes
                self._set_cached(self._row(rid), cached)
        elif isinstance(event, ServerMetrics):
            self.server = event
            self.server_readings.append(event)
        elif isinstance(event, WorkerLayout):
            self.workers.set_layout(event.names)
        elif isinstance(event, ModelLoaded):
            self.model = event
            self.info = event.info()
        elif isinstance(event, SweepPoint):
            self.sweep_points.append(event)
        elif isinstance(event, PrecisionPoint):
            self.precision_points.append(event)
        elif isinstance(event, LoadPoint):
            self.load_points.append(event)
        elif isinstance(event, PDPoint):
            self.pd_points.append(event)
        elif isinstance(event, DepthPoint):
            self.depth_points.append(event)
        elif isinstance(event, RunFinished):
            self.finished = event
            self.run_id = event.run_id or self.run_id
            if event.summary.kind == "precision":
                self.precision_summary = event.summary
            self._mark_load_points(event.summary)
        else:
            return
        self.version += 1

    def _mark_load_points(self, summary: Summary) -> None:
        """A load sweep marks its front and its best point once every point is in; the points that
        came from the engine process are copies sent before that: mark them here as the sweep did."""
        if summary.kind in ("rate", "concurrency") and self.load_points:
            from backend.sweeps.load import mark_front
            mark_front(self.load_points)
        elif summary.kind == "pd-ratio":
            for point in self.pd_points:
                point.best = point.split == summary.best_split

    def add_batch(self, batch: RecordBatch) -> None:
        if batch.steps:
            self._add_steps(batch.steps)
        if batch.tokens:
            self._add_tokens(batch.tokens)
        for rid, piece in batch.text.items():
            self.texts[rid] = self.texts.get(rid, "") + piece
        for rid, scheduled in batch.scheduled.items():
            row = self._row(rid)
            arrival = self.lanes.column("arrival_ms")[row]
            self._set(row, scheduled_ms=scheduled, queue_ms=None if np.isnan(arrival) else scheduled - arrival)
        for record in batch.requests:
            self._add_request(record)
        self.version += 1

    def _add_steps(self, steps: list[StepRecord]) -> None:
        if not self.run_id:
            self.run_id = steps[0].run_id
        if steps[0].worker or self.workers:
            self.workers.add(steps)
        rows = np.array([[PHASE_CODE[s.phase] if c == "phase" else getattr(s, c) for c in STEP_COLUMNS]
                         for s in steps], dtype=np.float64)   # (k, len(STEP_COLUMNS))
        self.steps.append(rows)

        def col(name):
            return rows[:, STEP_COLUMNS.index(name)]
        start, duration, phase = col("start_ms"), col("duration_ms"), col("phase")
        self._add_kv_curve(start + duration, col("kv_tokens"), col("kv_capacity"), col("num_reused_tokens"),
                           col("num_prefill_tokens"))
        self.bars.append(np.column_stack([start, start + duration, col("num_tokens"), phase, np.ones(len(rows)),
                                          col("num_proposed_tokens")]))
        prefill, decode = phase == PHASE_CODE[Phase.PREFILL], phase == PHASE_CODE[Phase.DECODE]
        self.prefill_ms += float(duration[prefill].sum())
        self.prefill_tokens += float(col("num_prefill_tokens")[prefill].sum())
        self.decode_ms += float(duration[decode].sum())
        self.decode_tokens += float(col("num_decode_tokens")[decode].sum())
        context = col("context_tokens")
        for phase, mask, kind in ((Phase.PREFILL, prefill, "prefill"), (Phase.DECODE, decode, "decode")):
            if mask.any():
                requests, tokens = col(f"num_{kind}_requests")[mask], col(f"num_{kind}_tokens")[mask]
                pairs = step_pairs(requests, tokens, context[mask]).sum()
                self.roofline[phase].add(int(mask.sum()), tokens.sum(), pairs, context[mask].sum(), requests.sum(),
                                         duration[mask].sum())

    def _add_kv_curve(self, end, kv_tokens, capacity, reused, computed) -> None:
        reused_so_far = self.reused_tokens + np.cumsum(reused)
        seen = self.prompt_tokens_seen + np.cumsum(reused + computed)
        self.reused_tokens, self.prompt_tokens_seen = float(reused_so_far[-1]), float(seen[-1])
        with np.errstate(invalid="ignore", divide="ignore"):
            held = np.where(capacity > 0, kv_tokens / capacity, np.nan)
            hit = np.where(seen > 0, reused_so_far / seen, np.nan)
        self.kv_curve.append(np.column_stack([end, held, hit]))

    def _add_tokens(self, tokens: list[TokenRecord]) -> None:
        table = np.array([(t.request_id, t.index, t.time_ms, t.token_id) for t in tokens], dtype=np.float64)
        self.tokens.append(table)
        ids, where = np.unique(table[:, 0], return_inverse=True)   # a batch holds few requests, many tokens
        request_rows = np.array([self._row(int(rid)) for rid in ids])
        rows = request_rows[where]
        times, counts = table[:, 2], table[:, 1] + 1
        last, out = self.lanes.column("last_token_ms"), self.lanes.column("output_tokens")
        # fmax: NaN (no token yet) loses to any time
        np.fmax.at(last, rows, times)
        np.fmax.at(out, rows, counts)
        first = table[:, 1] == 0
        self.lanes.column("first_token_ms")[rows[first]] = times[first]
        status = self.lanes.column("status")
        live = status[rows] < STATUS_CODE[RequestStatus.DECODING]
        status[rows[live]] = STATUS_CODE[RequestStatus.DECODING]
        self.changed_rows.update(request_rows.tolist())

    def _add_request(self, r: RequestRecord) -> None:
        self.records[r.request_id] = r
        if r.text:
            self.texts[r.request_id] = r.text   # the final decode is authoritative
        row = self._row(r.request_id)
        self._set(row, arrival_ms=r.arrival_ms, scheduled_ms=r.scheduled_ms, first_token_ms=r.first_token_ms,
                  finish_ms=r.finish_ms, prompt_tokens=r.prompt_tokens, output_tokens=r.output_tokens,
                  status=STATUS_CODE[r.status], ttft_ms=r.ttft_ms, tpot_ms=r.tpot_ms, e2e_ms=r.e2e_ms,
                  queue_ms=r.queue_ms, prefill_ms=r.prefill_ms, kv_transfer_ms=r.kv_transfer_ms)
        if r.cached_prompt_tokens is not None:
            self._set_cached(row, r.cached_prompt_tokens)

    def _set_cached(self, row: int, cached: int) -> None:
        prompt = self.lanes.column("prompt_tokens")[row]
        self._set(row, cached_tokens=cached, computed_tokens=None if np.isnan(prompt) else prompt - cached)

    def _row(self, request_id: int) -> int:
        row = self.rows.get(request_id)
        if row is None:
            row = len(self.lanes)
            self.rows[request_id] = row
            blank = np.full(len(LANE_COLUMNS), np.nan)
            blank[0] = request_id
            blank[LANE_COLUMNS.index("status")] = STATUS_CODE[RequestStatus.WAITING]
            blank[LANE_COLUMNS.index("output_tokens")] = 0
            self.lanes.append(blank)
        return row

    def _set(self, row: int, **values) -> None:
        for name, value in values.items():
            self.lanes.column(name)[row] = np.nan if value is None else value
        self.changed_rows.add(row)

    # ---- reading ---------------------------------------------------------------------------

    @property
    def num_requests(self) -> int:
        return len(self.lanes)

    def now_ms(self) -> float:
        """The live edge: the latest time any record mentions."""
        ends = self.bars.column("end")
        candidates = [ends[-1] if len(ends) else 0.0]
        for name in ("arrival_ms", "last_token_ms", "finish_ms"):
            col = self.lanes.column(name)
            if len(col) and not np.all(np.isnan(col)):
                candidates.append(float(np.nanmax(col)))
        return max(candidates)

    @property
    def num_steps(self) -> int:
        """Steps in the run so far (the buffer keeps the newest of them)."""
        return self.steps.num_appended

    @property
    def is_complete(self) -> bool:
        """Whether every step and token of the run is still held (a short run)."""
        return self.steps.num_dropped == 0 and self.tokens.num_dropped == 0

    def step(self, index: int) -> dict:
        """One step's numbers by position among the steps held."""
        values = {c: self.steps.column(c)[index] for c in STEP_COLUMNS}
        values["phase"] = PHASES[int(values["phase"])]
        return values

    def step_at(self, t_ms: float) -> int | None:
        """The held step running at time t, if any."""
        start = self.steps.column("start_ms")
        i = int(np.searchsorted(start, t_ms, side="right")) - 1
        if i < 0 or t_ms > start[i] + self.steps.column("duration_ms")[i]:
            return None
        return i

    def bar_at(self, t_ms: float) -> dict | None:
        """The strip's bar at time t: one step, or in older history several merged into one."""
        start = self.bars.column("start")
        i = int(np.searchsorted(start, t_ms, side="right")) - 1
        if i < 0 or t_ms > self.bars.column("end")[i]:
            return None
        bar = {c: float(self.bars.column(c)[i]) for c in BAR_COLUMNS}
        bar["phase"] = PHASES[int(bar["phase"])]
        return bar

    def lane(self, row: int) -> dict:
        values = {c: float(self.lanes.column(c)[row]) for c in LANE_COLUMNS}
        values["request_id"] = int(values["request_id"])
        values["status"] = STATUSES[int(values["status"])]
        return values

    def request_text(self, request_id: int) -> str:
        return self.texts.get(request_id, "")

    # ---- whole runs ------------------------------------------------------------------------

    def load(self, run: RunData, folder: str | Path | None = None, sweep: list[SweepPoint] | None = None,
             precision: list[PrecisionPoint] | None = None) -> None:
        """Show a saved run (Open run) read from `folder`, with its sweep's points if it is a sweep
        (a batch or prompt sweep's `sweep`, a precision sweep's `precision`)."""
        self.reset()
        self.run_id, self.config, self.info = run.run_id, dict(run.config), run.info
        self.remote = run.info.is_remote
        self.source = Path(folder) if folder is not None else None
        if self.remote and folder is not None:
            try:
                self.server_readings = read_server_metrics(folder)
            except InputError:   # a damaged server_metrics.csv: the run shows without it
                self.server_readings = []
            meta = run.info.remote.server_metrics or {}
            engine = meta.get("engine", "")
            for reading in self.server_readings:
                reading.engine = engine
            self.server = self.server_readings[-1] if self.server_readings else None
        self.sweep_points = list(sweep or [])
        self.sweep_context = (run.config.get("sweep") or {}).get("context")
        self.precision_points = list(precision or [])
        if run.summary.kind == "precision":
            self.precision_summary = run.summary
        for r in sorted(run.requests, key=lambda r: (r.arrival_ms, r.request_id)):
            self._row(r.request_id)
        self.add_batch(RecordBatch(steps=list(run.steps), tokens=list(run.tokens), requests=list(run.requests)))
        self._replay_kv(folder)
        self.finished = RunFinished(run.run_id, run.summary, data=run)

    def _replay_kv(self, folder: str | Path | None) -> None:
        """The KV maps the run folder recorded (kv_map.jsonl), or why there are none."""
        try:
            snaps = read_kv_map(folder) if folder is not None else None
            missing = ("a remote server's cache is not visible from the client: its prefix-cache counters are in "
                       "the metrics panel" if self.remote else
                       "This run did not record the cache (its folder is from before kv_map.jsonl)")
        except InputError as exc:   # a damaged file: the run shows without its map, the reason in its place
            snaps, missing = None, f"the cache's record could not be read: {exc}"
        self.kv.replay(snaps, missing)

    def to_run_data(self, with_records: bool = True) -> RunData:
        """The run as held (complete, or partial after a stop or failure) for Export CSV.

        Requests, summary and info come from the run's result when it has one; steps and
        tokens (with_records) are the ones held: all of them while `is_complete`, else the
        newest (the complete files are in `source`).
        """
        steps, tokens = [], []
        if with_records:
            steps = [self._step_record(i) for i in range(len(self.steps))]
            tokens = [TokenRecord(request_id=int(rid), index=int(idx), time_ms=float(t), token_id=int(tok))
                      for rid, idx, t, tok in self.tokens.table().T]
        requests = [self.records.get(int(rid)) or self._partial_record(row)
                    for row, rid in enumerate(self.lanes.column("request_id"))]
        data = RunData(run_id=self.run_id, config=self.config, info=self.info, steps=steps, requests=requests,
                       tokens=tokens)
        done = self.finished.data if self.finished is not None else None
        if isinstance(done, RunData):
            data.run_id, data.config = done.run_id, done.config or self.config
            data.info = done.info if done.info.model else self.info   # a run that died before loading: the store's
            data.summary = done.summary
            if done.requests:
                data.requests = list(done.requests)
        elif self.finished is not None:
            data.summary = self.finished.summary
        return data

    def _step_record(self, index: int) -> StepRecord:
        values = {}
        for name in STEP_COLUMNS:
            v = self.steps.column(name)[index]
            values[name] = PHASES[int(v)] if name == "phase" else (int(v) if _STEP_TYPES[name] == "int" else float(v))
        return StepRecord(run_id=self.run_id, **values)

    def _partial_record(self, row: int) -> RequestRecord:
        """A request that never got its record (the run failed before it ended)."""
        lane = self.lane(row)

        def opt(name):
            v = lane[name]
            return None if np.isnan(v) else v
        prompt = lane["prompt_tokens"]
        return RequestRecord(request_id=lane["request_id"], status=RequestStatus.ERROR,
                             prompt_tokens=0 if np.isnan(prompt) else int(prompt),
                             output_tokens=int(lane["output_tokens"]), arrival_ms=opt("arrival_ms") or 0.0,
                             scheduled_ms=opt("scheduled_ms"), first_token_ms=opt("first_token_ms"),
                             finish_reason="run ended before this request",
                             text=self.request_text(lane["request_id"]))


def _merge_phase(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Two merged steps keep their phase when they share it, else they show as mixed."""
    return np.where(a == b, a, PHASE_CODE[Phase.MIXED])
