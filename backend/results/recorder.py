"""One recorder for every target: where each record batch of a run goes, and how the run ends.

A target (the local engine, the simulator, the disaggregated pair, real or simulated) hands every
event to `RunRecorder.emit`. Record batches go, in one place:
  - to the summary's accumulator (per-phase sums, the gaps between tokens, the request records),
  - to the streaming writer with --out (so a crash loses at most the last second),
  - to the kept lists (every request; steps and tokens unless retain_records is False, as for a
    long run whose steps only stream to the window and the files),
  - to the caller's emit (the CLI's progress, the window's worker);
  - to a count of steps by phase and tokens (`step_rows`: what the local target names the matrix
    unit of each phase's steps by, results/matmul.py, with no step kept);
KV map snapshots also go to the folder (kv_map.jsonl), so a folder opened later shows its cache; every
other event goes straight to emit. `finish` builds the run's RunData and summary, writes
the folder's last files and returns the RunFinished. Use it as a context manager: a run that
ends in an exception leaves no half-written file (RunWriter.abandon).
"""
from __future__ import annotations

from collections import Counter

from backend.config import RunConfig, config_dict
from backend.events import Emit, KvMap, RunFinished
from backend.records import RecordBatch, RequestRecord, RunData, StepRecord, TokenRecord, new_run_id
from backend.results.export import RunWriter
from backend.results.summary import RunAccumulator
from backend.run_info import RunInfo
from backend.summary import Summary


class RunRecorder:
    def __init__(self, config: RunConfig, emit: Emit, retain_records: bool = True, run_id: str | None = None):
        self.config = config
        self.run_id = run_id or new_run_id()
        self.retain_records = retain_records
        # a folder that cannot be written fails here, before a model loads or a worker starts
        self.writer = RunWriter(config.out_dir) if config.out_dir else None
        self.accumulator = RunAccumulator()
        self.accumulator.prefix_caching = config.engine.prefix_caching   # None: the target decided; shown if any
        self.steps: list[StepRecord] = []
        self.tokens: list[TokenRecord] = []
        self.requests: list[RequestRecord] = []
        self.step_rows: Counter[tuple[str, int]] = Counter()   # (phase, tokens) -> steps
        self._emit = emit

    def __enter__(self) -> RunRecorder:
        return self

    def __exit__(self, *exc) -> None:
        if self.writer is not None:
            self.writer.abandon()   # after finish() nothing is left to remove

    def emit(self, event) -> None:
        """A target's emit: record batches are recorded, then passed on; other events pass straight on."""
        if isinstance(event, RecordBatch):
            self.add(event)
        else:
            if isinstance(event, KvMap) and self.writer is not None:
                self.writer.add_kv(event)
            self._emit(event)

    def add(self, batch: RecordBatch) -> None:
        self.accumulator.add(batch)
        rows = self.step_rows
        for s in batch.steps:
            rows[(s.phase.value, s.num_tokens)] += 1
        if self.writer is not None:
            self.writer.add(batch)
        if self.retain_records:
            self.steps.extend(batch.steps)
            self.tokens.extend(batch.tokens)
        self.requests.extend(batch.requests)
        self._emit(batch)

    def summary(self) -> Summary:
        return self.accumulator.summary(self.config.slo_ttft_ms, self.config.slo_tpot_ms)

    def finish(self, info: RunInfo, stopped: bool, error: str | None, summary: Summary | None = None) -> RunFinished:
        """The run's end: its RunData (info as given, the summary computed unless given), the folder's
        last files, and the RunFinished every target returns."""
        summary = self.summary() if summary is None else summary
        data = RunData(run_id=self.run_id, config=config_dict(self.config), info=info, steps=self.steps,
                       requests=self.requests, tokens=self.tokens, summary=summary)
        if self.writer is not None:
            self.writer.close(data)
        return RunFinished(self.run_id, summary, stopped, error, data)
