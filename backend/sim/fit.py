"""Fit the cost model's terms (backend.sim.step_time) to measured steps, and check it on others.

The model is a step's roofline time at efficiencies (mfu, afu, mbu) plus overheads linear in
the step (per step, per token, per request, and per layer of a step that prefills: prefill_layer_us).
Given the efficiencies, the overheads are a non-negative least-squares problem; the efficiencies
are found by a grid search that zooms in on the best cell. What is minimised is the squared relative error of each step's time, with
every (run, phase) group weighing alike however many steps it has: a workload run of 600
decode steps does not drown the three points of a prompt sweep.

What a step is priced against is its busy time: its duration and, where the next step follows within
HOST_GAP_MS, the host's time between them (busy_ms).

Steps interrupted by another process (SPIKE times the median of the run's steps of the same shape)
are left out of the fit, not out of the error.

Steps are priced from their recorded totals (StepRecord), as `CostModel.record_seconds` does.
No torch, no files: the callers (backend.fitting, bench/sim_vs_measured.py) read run folders.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from backend.errors import InputError
from backend.precision import Precision
from backend.roofline.roofs import compute_parts
from backend.sim.step_time import MAX_EFFICIENCY, CostModel, record_cost

if TYPE_CHECKING:
    from backend.kernels.matmath import MatMath

GRID = 24           # efficiency values per axis in the first pass
ZOOMS = 4           # refinements around the best cell
MIN_EFFICIENCY = 0.005


@dataclass(slots=True)
class MeasuredRun:
    """One run's measured steps with what prices them: the model's shape and the run's precision."""

    name: str
    shape: object
    precision: Precision
    steps: list            # StepRecord (or anything with its totals and duration_ms)
    math: MatMath | None = None   # the products' arithmetic (run.json's "matmul"): which roof each step ran under


@dataclass(slots=True)
class _Design:
    """Every step's roofline parts and overhead features as arrays (seconds, FLOPs, bytes)."""

    matmul_s: np.ndarray      # matmul FLOPs / peak (the time at efficiency 1)
    attention_s: np.ndarray
    memory_s: np.ndarray      # bytes / bandwidth
    features: np.ndarray      # (N, 4): 1, tokens, requests, layers of a step that prefills (else 0)
    measured_s: np.ndarray
    weights: np.ndarray       # each step's weight in the squared relative error
    groups: list[tuple[str, str]]
    phases: list[str]
    batches: np.ndarray


SPIKE = 2.0   # a step this many times its like steps' median was interrupted (another tenant), not priced
# A step that the next one follows within this many ms is priced to the next one's start: the engine went
# straight on, and what it did between them (scheduling the next batch, recording this one: 0.1-0.25 ms a
# step on a 2-core EPYC, 5-8% of a batch-1 decode step of the bundled model) is part of every token's time,
# the step's host cost. A longer gap is the engine waiting for an arrival, or a sweep setting up its next
# point (about 28 ms between the prompt sweep's prefills): not a cost of the step.
HOST_GAP_MS = 1.0


def busy_ms(steps) -> list[float]:
    """Each step's duration, and the gap to the next step's start where that is at most HOST_GAP_MS."""
    out = []
    for i, step in enumerate(steps):
        ms = step.duration_ms
        nxt = steps[i + 1] if i + 1 < len(steps) else None
        start, after = getattr(step, "start_ms", None), getattr(nxt, "start_ms", None)
        # the same engine's next step (a disaggregated run's workers' steps interleave in the file)
        if start is not None and after is not None and getattr(step, "worker", None) == getattr(nxt, "worker", None):
            gap = after - (start + ms)
            if 0 <= gap <= HOST_GAP_MS:
                ms += gap
        out.append(ms)
    return out


def _spikes(steps) -> set[int]:
    """The indices of steps that took SPIKE times or more the median of the steps of their shape (phase,
    requests, tokens) in the run: on a shared machine another process took the cores mid-step, which no
    cost model prices; with them, the squared relative error is the interruptions' to fit."""
    by_shape: dict[tuple, list[float]] = {}
    for step in steps:
        by_shape.setdefault((step.phase, step.num_requests, step.num_tokens), []).append(step.duration_ms)
    medians = {k: float(np.median(v)) for k, v in by_shape.items() if len(v) >= 3}
    return {i for i, step in enumerate(steps)
            if step.duration_ms >= SPIKE * medians.get((step.phase, step.num_requests, step.num_tokens), math.inf)}


def _design(runs: list[MeasuredRun], profile, drop_spikes: bool = True) -> _Design:
    rows, groups, phases, batches = [], [], [], []
    for run in runs:
        bandwidth = profile.bandwidth_bytes_per_s
        spikes = _spikes(run.steps) if drop_spikes else set()
        busy = busy_ms(run.steps)
        for i, step in enumerate(run.steps):
            if not step.duration_ms > 0 or step.num_requests <= 0 or i in spikes:
                continue
            cost = record_cost(run.shape, run.precision, step)
            matmul_s, attention_s = compute_parts(cost, profile, run.precision, run.math)
            # a step that prefills (more tokens than requests: a prefill or a mixed step, as record_seconds
            # tells them) runs the model layer by layer, each layer's kernels called one by one from Python;
            # a decode step runs every layer in one call of the C kernels: a fixed cost a layer that only the
            # prefilling steps pay (about 0.37 ms a layer of the bundled model on a 2-core EPYC)
            prefill_layers = run.shape.num_layers if step.num_tokens > step.num_requests else 0
            rows.append((matmul_s, attention_s, cost.bytes / bandwidth, step.num_tokens, step.num_requests,
                         busy[i] / 1000, prefill_layers))
            groups.append((run.name, step.phase.value))
            phases.append(step.phase.value)
            batches.append(step.num_requests)
    if not rows:
        raise InputError("no measured steps to fit: the run folders hold no timed steps")
    a = np.asarray(rows, dtype=np.float64)
    sizes: dict[tuple[str, str], int] = {}
    for g in groups:
        sizes[g] = sizes.get(g, 0) + 1
    weights = np.array([1.0 / math.sqrt(sizes[g]) for g in groups]) / a[:, 5]
    features = np.column_stack([np.ones(len(a)), a[:, 3], a[:, 4], a[:, 6]])
    return _Design(a[:, 0], a[:, 1], a[:, 2], features, a[:, 5], weights, groups, phases, np.asarray(batches))


def _overheads(d: _Design, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each candidate's roofline times base (K, N): the non-negative overhead coefficients
    (K, F) in seconds per feature that minimise the weighted squared error, and that error (K,).
    A feature no step has (no prefilling step among the runs) stays at 0."""
    w2 = d.weights ** 2
    x = d.features
    gram = x.T @ (x * w2[:, None])                       # (F, F)
    residual = d.measured_s[None, :] - base              # (K, N)
    rhs = (residual * w2[None, :]) @ x                   # (K, F)
    total = (residual ** 2 * w2[None, :]).sum(axis=1)    # the error with no overheads
    best_err = total.copy()
    width = x.shape[1]
    present = [j for j in range(width) if np.any(x[:, j])]
    best_coef = np.zeros((len(base), width))
    for size in range(1, len(present) + 1):
        for subset in itertools.combinations(present, size):
            idx = list(subset)
            try:
                inv = np.linalg.inv(gram[np.ix_(idx, idx)])
            except np.linalg.LinAlgError:
                continue                                  # collinear features (e.g. every step one request)
            coef = rhs[:, idx] @ inv.T                    # (K, |S|)
            err = total - (coef * rhs[:, idx]).sum(axis=1)
            ok = (coef >= 0).all(axis=1) & (err < best_err)
            best_err = np.where(ok, err, best_err)
            full = np.zeros((len(base), width))
            full[:, idx] = coef
            best_coef = np.where(ok[:, None], full, best_coef)
    return best_coef, best_err


def _search(d: _Design, axes: list[np.ndarray]) -> tuple[tuple[float, float, float], np.ndarray, float]:
    """The best (mfu, afu, mbu) on the grid spanned by axes, with its overheads and error."""
    mfu, afu, mbu = (a.ravel() for a in np.meshgrid(*axes, indexing="ij"))
    best = (None, None, math.inf)
    for lo in range(0, len(mfu), 2048):   # in chunks: K x N candidates at a time
        sl = slice(lo, lo + 2048)
        compute = d.matmul_s[None, :] / mfu[sl, None] + d.attention_s[None, :] / afu[sl, None]
        base = np.maximum(compute, d.memory_s[None, :] / mbu[sl, None])
        coef, err = _overheads(d, base)
        k = int(np.argmin(err))
        if err[k] < best[2]:
            best = ((float(mfu[sl][k]), float(afu[sl][k]), float(mbu[sl][k])), coef[k], float(err[k]))
    return best


def _fit(d: _Design) -> CostModel:
    axes = [np.geomspace(MIN_EFFICIENCY, MAX_EFFICIENCY, GRID)] * 3
    eff, coef, _ = _search(d, axes)
    ratio = (MAX_EFFICIENCY / MIN_EFFICIENCY) ** (1 / (GRID - 1))
    for _ in range(ZOOMS):   # a finer grid around the best cell, its width the last grid's step
        axes = [np.clip(np.geomspace(e / ratio, e * ratio, 9), MIN_EFFICIENCY, MAX_EFFICIENCY) for e in eff]
        eff, coef, _ = _search(d, axes)
        ratio = ratio ** 0.25
    mfu, afu, mbu = eff
    return CostModel(mfu=mfu, afu=afu, mbu=mbu, step_ms=coef[0] * 1000, token_ms=coef[1] * 1000,
                     request_ms=coef[2] * 1000, prefill_layer_us=coef[3] * 1e6, source="")


def fit_cost_model(runs: list[MeasuredRun], profile) -> CostModel:
    """The terms that best price these runs' steps on `profile` (its source left for the caller)."""
    return _fit(_design(runs, profile))


@dataclass(slots=True)
class ErrorRow:
    """The step-time error of one phase at one batch size (or 'all')."""

    phase: str
    batch: str
    num_steps: int
    mape: float          # mean absolute percentage error, percent
    worst: float         # the largest absolute percentage error, percent
    bias: float          # mean signed error, percent (positive: the model is too slow)


@dataclass(slots=True)
class ErrorReport:
    rows: list[ErrorRow] = field(default_factory=list)

    def overall(self, phase: str) -> ErrorRow | None:
        return next((r for r in self.rows if r.phase == phase and r.batch == "all"), None)


def batch_bucket(n: int) -> str:
    """Batch sizes in powers-of-two buckets: 1, 2, 3-4, 5-8, ..."""
    if n <= 2:
        return str(n)
    hi = 1 << (n - 1).bit_length()
    return f"{hi // 2 + 1}-{hi}"


def step_errors(model: CostModel, runs: list[MeasuredRun], profile) -> ErrorReport:
    """Each phase's error over every step, then by batch size: the model's price against the measured time."""
    d = _design(runs, profile, drop_spikes=False)   # the error on every step, interruptions too
    compute = d.matmul_s / model.mfu + d.attention_s / model.afu
    predicted = np.maximum(compute, d.memory_s / model.mbu) + d.features @ np.array(
        [model.step_ms / 1000, model.token_ms / 1000, model.request_ms / 1000, model.prefill_layer_us / 1e6])
    signed = (predicted - d.measured_s) / d.measured_s * 100
    report = ErrorReport()
    phases = np.asarray(d.phases)
    buckets = np.asarray([batch_bucket(int(b)) for b in d.batches])
    order = {"prefill": 0, "mixed": 1, "decode": 2}
    for phase in sorted(set(d.phases), key=lambda p: order.get(p, 3)):
        mask = phases == phase
        report.rows.append(_row(phase, "all", signed[mask]))
        for bucket in sorted(set(buckets[mask]), key=lambda b: int(b.split("-")[0])):
            report.rows.append(_row(phase, bucket, signed[mask & (buckets == bucket)]))
    return report


def _row(phase: str, batch: str, signed: np.ndarray) -> ErrorRow:
    return ErrorRow(phase, batch, int(len(signed)), float(np.abs(signed).mean()), float(np.abs(signed).max()),
                    float(signed.mean()))
