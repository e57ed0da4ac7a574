"""Synthetic engine steps at a fixed rate, as the tiny model on a GPU makes them (no Qt, no torch).

The window benchmarks run it in the engine's own process (`EngineProcess(target=...)`), so the
records reach the window over the same pipe a real run's take.
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

from backend.events import RequestsArrived, RunFinished
from backend.summary import Summary
from backend.records import Phase, RecordBatch, RequestRecord, RequestStatus, StepRecord, TokenRecord

PROMPT_TOKENS = 128
WORDS = [" the", " phase", " of", " decode", " is", " memory", "-bound", "."]


class SyntheticEngine:
    """Emits `rate` engine steps a second for `seconds`, in whichever process calls it.

    Its counters live in a small memory-mapped file, so the window's process reads them while
    the engine process writes them: [steps emitted, first step's time.perf_counter (one clock
    for all processes on Linux), the producing thread's CPU seconds]."""

    def __init__(self, rate: float, seconds: float, batch: int, output_len: int):
        self.rate, self.seconds, self.batch, self.output_len = rate, seconds, batch, output_len
        self.max_context = PROMPT_TOKENS + output_len
        fd, self.counters_path = tempfile.mkstemp(prefix="phasescope-synthetic-")
        os.write(fd, bytes(24))
        os.close(fd)
        self._map = None

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_map"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _map=None)

    @property
    def counters(self) -> np.ndarray:
        if self._map is None:
            self._map = np.memmap(self.counters_path, dtype=np.float64, mode="r+", shape=(3,))
        return self._map

    @property
    def emitted(self) -> int:
        return int(self.counters[0])

    @property
    def t0(self) -> float:
        return float(self.counters[1])

    @property
    def cpu_s(self) -> float:
        return float(self.counters[2])

    def remove(self) -> None:
        self._map = None
        os.unlink(self.counters_path)

    def __call__(self, config, emit, should_stop) -> RunFinished:
        total = int(self.rate * self.seconds)
        step_ms = 1000.0 / self.rate
        running: dict[int, list] = {}       # request id -> [arrival_ms, scheduled_ms, first_token_ms, tokens]
        next_id = 0
        kv = 0
        self.counters[1] = time.perf_counter()
        cpu0 = time.thread_time()
        i = 0
        while i < total and not should_stop():
            due = min(total, int((time.perf_counter() - self.t0) * self.rate))
            while i < due:
                now = (time.perf_counter() - self.t0) * 1000.0
                batch = RecordBatch()
                if len(running) < self.batch:   # a new request arrives and its prompt fills this step
                    rid, next_id = next_id, next_id + 1
                    emit(RequestsArrived([rid], [now], [PROMPT_TOKENS]))
                    running[rid] = [now, now, now + step_ms, 1]
                    batch.scheduled[rid] = now
                    batch.tokens.append(TokenRecord(rid, 0, now + step_ms, 1))
                    batch.text[rid] = WORDS[0]
                    kv += PROMPT_TOKENS + 1
                    batch.steps.append(step_record(i, Phase.PREFILL, now, step_ms, 1, PROMPT_TOKENS, 0, kv,
                                                   len(running), self.max_context))
                else:
                    for rid, life in list(running.items()):
                        life[3] += 1
                        batch.tokens.append(TokenRecord(rid, life[3] - 1, now + step_ms, life[3]))
                        batch.text[rid] = WORDS[life[3] % len(WORDS)]
                        if life[3] == self.output_len:
                            del running[rid]
                            kv -= PROMPT_TOKENS + self.output_len
                            batch.requests.append(finished(rid, life, now + step_ms))
                    kv += len(batch.tokens)
                    batch.steps.append(step_record(i, Phase.DECODE, now, step_ms, len(batch.tokens), 0,
                                                   len(batch.tokens), kv, len(running), self.max_context))
                emit(batch)
                i += 1
                self.counters[0] = i
            time.sleep(0.001)   # the engine's own pause for the next step; lets the GIL go
        self.counters[2] = time.thread_time() - cpu0
        return RunFinished("window-under-load", Summary(num_steps=i), stopped=i < total)


def step_record(i, phase, start, duration, requests, prefill, decode, kv, running, max_context) -> StepRecord:
    return StepRecord("window-under-load", i, phase, requests, 1 if prefill else 0, decode, prefill + decode,
                      prefill, decode, kv, max_context, start, duration, kv, 1 << 20, 0, running)


def finished(rid: int, life: list, end: float) -> RequestRecord:
    arrival, scheduled, first, n = life
    return RequestRecord(rid, RequestStatus.FINISHED, PROMPT_TOKENS, n, arrival, scheduled, first, end,
                         first - arrival, (end - first) / max(n - 1, 1), end - arrival, scheduled - arrival,
                         finish_reason="length")
