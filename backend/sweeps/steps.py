"""`sweep batch`, `sweep prompt` and `sweep precision`: each point a few ordinary runs through the engine.

A sweep is a list of configs plus an axis. Every point runs `run` or `load` configs through the
target a `run` uses (the local engine; with --simulate the simulated engine, its steps priced by
the profile's cost model), so a sweep's step and a run's step are one measurement: the same
scheduler, runner and records. A point's figure is the median of its runs' steps of one phase,
after `warmup` of them:

- batch B at context C: one run of B synthetic prompts of C tokens, warmup + steps + 1 output
  tokens each (the prefill is real, and recorded, but not part of the point): the decode step,
  whose steps attend to C + 1 + warmup .. C + warmup + steps tokens (priced at C).
- prompt L: warmup + steps runs of one prompt of L tokens and one output token (a prefill
  step each): the prefill step.
- precision P, the model loaded at P: 1 + steps runs of B prompts prefilled together, one output
  token each: TTFT; and a run of B prompts with 1 + output_len decode steps: TPOT.

The sweep's first run on a fresh model starts with FIRST_WARMUP_S of untimed runs: right after
loading, the first steps run slow (thread pool, first-touch pages; measured here: a batch-1
point at 29.7 ms against 21.1 ms at batch 4 just after). Every step of every run is recorded
(steps.csv, the window's timeline) on the sweep's clock and step numbering; sweep.csv holds the
points (backend/sweeps/points.py).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, replace
from typing import Callable

from backend.config import BatchRun, RunConfig, RunKind, SweepKind, config_dict
from backend.errors import DoesNotFit, InputError, RunError, is_out_of_memory, one_line
from backend.events import Emit, ModelLoaded, PrecisionPoint, Progress, RunFinished, SweepPoint, Target
from backend.records import Phase, RecordBatch, RunData, StepRecord, new_run_id
from backend.results.export import ensure_writable
from backend.roofline.roofs import math_from_info
from backend.run_info import RunInfo, SweepInfo
from backend.summary import Crossovers, PrecisionGain, Summary
from backend.sweeps import crossover
from backend.sweeps.points import write_points

FIRST_WARMUP_S = 0.5    # untimed runs before the sweep's first point, at least this long (measured sweeps)


@dataclass(slots=True)
class Measure:
    """`runs` runs of a config for a point, and what they measure: the median of their `phase`
    steps after `warmup` of them."""

    config: RunConfig
    phase: Phase
    warmup: int
    runs: int = 1


def point_runs(config: RunConfig, x) -> list[Measure]:
    """The runs of one point of config.sweep at axis value x (a batch size, a prompt length, a precision)."""
    spec = config.sweep_spec
    base = replace(config, mode=RunKind.BATCH, sweep=None, out_dir=None, repeats=1, workload=None,
                   sampling=replace(config.sampling, ignore_eos=True))

    def batch_run(model, batch: int, prompt_len: int, decode_steps: int) -> RunConfig:
        return replace(base, model=model, batch=BatchRun(prompt=None, prompt_len=prompt_len,
                                                         output_len=decode_steps + 1, batch=batch))

    if spec.kind is SweepKind.BATCH:
        return [Measure(batch_run(config.model, x, spec.context, spec.warmup + spec.steps), Phase.DECODE, spec.warmup)]
    if spec.kind is SweepKind.PROMPT:
        return [Measure(batch_run(config.model, 1, x, 0), Phase.PREFILL, spec.warmup, spec.warmup + spec.steps)]
    model = replace(config.model, dtype=x)
    return [Measure(batch_run(model, spec.batch, spec.prompt_len, 0), Phase.PREFILL, 1, 1 + spec.steps),
            Measure(batch_run(model, spec.batch, spec.prompt_len, 1 + spec.output_len), Phase.DECODE, 1)]


def axis_of(config: RunConfig) -> list:
    spec = config.sweep_spec
    return {SweepKind.BATCH: spec.batches, SweepKind.PROMPT: spec.lengths, SweepKind.PRECISION: spec.dtypes}[spec.kind]


class _Stopped(Exception):
    """Stop was pressed during a point's run."""


class _Recording:
    """The sweep's records: every step of every run, renumbered and placed on the sweep's clock."""

    def __init__(self, run_id: str, emit: Emit, simulated: bool):
        self.run_id, self.emit, self.simulated = run_id, emit, simulated
        self.steps: list[StepRecord] = []
        self.t0 = time.perf_counter()
        self.offset_ms = 0.0
        self.loaded: ModelLoaded | None = None
        self._shown: tuple | None = None

    def start_run(self) -> None:
        """The next run's times start at the sweep's clock now (simulated: where the last step ended)."""
        if self.simulated:
            self.offset_ms = self.steps[-1].start_ms + self.steps[-1].duration_ms if self.steps else 0.0
        else:
            self.offset_ms = (time.perf_counter() - self.t0) * 1000.0

    def inner_emit(self, run_steps: list[StepRecord], record: bool) -> Emit:
        """The emit of one run: its steps kept for the point (and, when `record`, for the sweep's
        records); its ModelLoaded passed on once per model and precision; the rest left to the run."""
        def emit(event) -> None:
            if isinstance(event, RecordBatch):
                run_steps.extend(event.steps)
                if record and event.steps:
                    shifted = [replace(s, run_id=self.run_id, step=len(self.steps) + i,
                                       start_ms=s.start_ms + self.offset_ms) for i, s in enumerate(event.steps)]
                    self.steps.extend(shifted)
                    self.emit(RecordBatch(steps=shifted))
            elif isinstance(event, ModelLoaded):
                self.loaded = event
                key = (event.name, event.device, event.dtype)
                if key != self._shown:
                    self._shown = key
                    self.emit(event)
        return emit


def run_step_sweep(config: RunConfig, emit: Emit, should_stop: Callable[[], bool], target: Target) -> RunFinished:
    """Every point of config.sweep (kind batch, prompt or precision), its runs through `target`."""
    spec = config.sweep_spec
    if config.endpoint is not None:
        raise InputError(f"sweep {spec.kind} times the engine's own steps, which a remote server does not show: "
                         "sweep rate and sweep concurrency drive a server")
    axis = axis_of(config)
    if not axis:
        raise InputError(f"sweep {spec.kind} has no points")
    out_dir = ensure_writable(config.out_dir) if config.out_dir else None
    run_id = new_run_id()
    rec = _Recording(run_id, emit, config.simulate)
    points: list = []
    skipped: list[str] = []
    note, info = "", None
    settled = config.simulate
    profiles = None   # (this machine's, the selected one), from the first point's model

    def run(measure: Measure, record: bool = True) -> list[StepRecord]:
        nonlocal info
        run_steps: list[StepRecord] = []
        for _ in range(measure.runs):
            rec.start_run()
            finished = target(measure.config, rec.inner_emit(run_steps, record), should_stop)
            if finished.stopped:
                raise _Stopped
            if finished.error:
                raise RunError(finished.error)
            info = finished.data.info if finished.data else info
        return run_steps

    for i, x in enumerate(axis):
        if should_stop():
            note = "stopped by user"
            break
        emit(Progress(f"sweep {spec.kind}: {x}", i / len(axis)))
        measures = point_runs(config, x)
        try:
            if not settled:
                deadline = time.perf_counter() + FIRST_WARMUP_S
                while time.perf_counter() < deadline:
                    run(replace(measures[0], runs=1), record=False)
                settled = True
            medians, read = [], []
            for m in measures:
                phase_steps = [s for s in run(m) if s.phase is m.phase][m.warmup:]
                if not phase_steps:
                    raise RunError(f"the run gave no {m.phase.value} step to time")
                medians.append(statistics.median(s.duration_ms for s in phase_steps) / 1000.0)
                read.append(statistics.median(s.weight_bytes for s in phase_steps))
        except _Stopped:
            note = "stopped by user"
            break
        except Exception as exc:
            too_big = isinstance(exc, DoesNotFit) or is_out_of_memory(exc)
            if spec.kind is SweepKind.PRECISION and (too_big or isinstance(exc, InputError)):
                # e.g. q4_1 without the C kernels: the other precisions still run
                skipped.append(f"{x}: does not fit in memory ({one_line(exc)})" if too_big else f"{x}: {exc}")
                continue
            if not too_big:
                raise
            note = f"stopped at {spec.kind} {x}: it does not fit in memory ({one_line(exc, typed=True)})"
            break
        if profiles is None:   # the device is the sweep's from its first run on: its profiles once
            profiles = _profiles(config, rec.loaded)
        point = _point(config, x, medians, rec.loaded, *profiles, weight_bytes=read[0] or None,
                       math=math_from_info(info))
        points.append(point)
        emit(point)
    if not points and skipped and note != "stopped by user":
        raise InputError(f"sweep precision: no precision could run ({'; '.join(skipped)})")
    emit(Progress(f"sweep {spec.kind} done", 1.0))
    loaded = rec.loaded
    local, selected = profiles or _profiles(config, loaded)
    summary = (precision_summary(spec, points, skipped, note) if spec.kind is SweepKind.PRECISION else
               sweep_summary(config, points, loaded, note, local, selected, math_from_info(info)))
    if config.simulate:
        summary.simulated = True
    info = sweep_point_info(info, config, points, selected, local)
    data = RunData(run_id, config_dict(config), info, rec.steps, [], [], summary)
    if out_dir is not None:
        write_points(out_dir, spec.kind, points, data)
    return RunFinished(run_id, summary, note == "stopped by user", None, data)


def sweep_point_info(last: RunInfo | None, config: RunConfig, points: list, selected, local) -> RunInfo:
    """A batch, prompt or precision sweep's info: its last run's without what belongs to one run (the KV
    cache, the run's times), with the profiles it was judged against and, for precision, every dtype."""
    if last is None:   # no run finished: what was asked for
        last = RunInfo(model=config.model.name, device=config.model.device, device_name=config.model.device,
                       dtype=config.model.dtype)
    host = replace(last.local, matmul_steps=None) if last.local is not None else None
    simulated = replace(last.simulated, virtual_s=None) if last.simulated is not None else None
    info = replace(last, kv_capacity=None, kv_slots=None, max_len=None, wall_s=None, local=host,
                   simulated=simulated, profile=selected.key if selected else None)
    sweep = SweepInfo(local_profile=local.key if local and not config.simulate else None)
    if config.sweep.kind is SweepKind.PRECISION:
        sweep.dtypes = [p.dtype for p in points]                 # every precision run, in order
        info.dtype = ",".join(sweep.dtypes) or info.dtype
    info.sweep = sweep
    return info


def _profiles(config: RunConfig, loaded: ModelLoaded | None):
    """(this machine's profile, the selected one): a simulated sweep has only the one it is priced on."""
    from backend.roofline.profiles import find_profile, run_profile
    if config.simulate:
        return None, find_profile(config.profile)
    local = run_profile(loaded.device, loaded.device_name) if loaded is not None else None
    return local, find_profile(config.profile) if config.profile else local


def _point(config: RunConfig, x, medians: list[float], loaded: ModelLoaded, local, selected,
           weight_bytes: float | None = None, math=None):
    """The point's figures beside the roofline: the selected profile's prediction, this machine's, and
    (measured sweeps) what --simulate on this machine's profile charges, side by side; the weights
    its steps read (weight_bytes, measured) beside the roofline's count of them. `math`: the arithmetic
    the point's runs multiplied in (a MatMath from their run.json, None for none recorded), which sets
    a CPU profile's compute roof per step (backend/roofline/roofs.py)."""
    from backend.roofline.cost import predict, step_cost, utilization
    from backend.sim.step_time import CostModel
    spec = config.sweep
    shape, prec = loaded.shape, loaded.precision

    def predicted(profile, new_tokens, contexts) -> float | None:
        if profile is None or not profile.has_peak(prec):
            return None
        return predict(step_cost(shape, prec, new_tokens, contexts), profile, prec, math).time_s * 1000

    def simulated(new_tokens, contexts) -> float | None:
        if config.simulate or local is None or not local.has_peak(prec):
            return None
        from backend.sim.fitted import priced_profile
        roofs = priced_profile(local)   # a fitted profile's terms are fractions of the roofs it was fitted on
        return CostModel.for_profile(roofs).step_seconds(shape, prec, roofs, new_tokens, contexts, math=math) * 1000

    if spec.kind is SweepKind.PRECISION:
        b, n, out = spec.batch, spec.prompt_len, spec.output_len
        prefill, decode = ([n] * b, [n] * b), ([1] * b, [n + out // 2] * b)
        ttft, tpot = medians
        return PrecisionPoint(prec.name, loaded.weight_bytes, prec.weight_bits, ttft * 1000, tpot * 1000,
                              b * n / ttft, b / tpot, predicted(selected, *prefill), predicted(selected, *decode),
                              None if config.simulate else predicted(local, *prefill),
                              None if config.simulate else predicted(local, *decode),
                              simulated(*prefill), simulated(*decode))
    new_tokens, contexts = ([1] * x, [spec.context] * x) if spec.kind is SweepKind.BATCH else ([x], [x])
    seconds = medians[0]
    cost = step_cost(shape, prec, new_tokens, contexts)
    judge = selected if config.simulate else local
    util = utilization(cost, seconds, judge, prec, math) if judge is not None and judge.has_peak(prec) else None
    bound = predict(cost, selected, prec, math).bound.value if selected is not None and selected.has_peak(prec) else ""
    return SweepPoint(spec.kind, x, seconds * 1000, sum(new_tokens) / seconds, cost.flops, cost.bytes,
                      util.mfu if util else None, util.mbu if util else None, predicted(selected, new_tokens, contexts),
                      None if config.simulate else predicted(local, new_tokens, contexts), bound,
                      simulated(new_tokens, contexts), weight_bytes, cost.weight_bytes)


def measured_crossover(points: list[SweepPoint]) -> int | None:
    """The batch where tokens/s stops growing in proportion: the knee of a fit over every point up to a
    fall (backend/sweeps/crossover.py), None when the curve still climbs at the largest batch fitted."""
    return crossover.measured_crossover([p.x for p in points], [p.tokens_per_s for p in points])


def sweep_summary(config: RunConfig, points: list[SweepPoint], loaded: ModelLoaded | None, note: str,
                  local, selected, math=None) -> Summary:
    from backend.roofline.cost import CROSSOVER_CAP, crossover_batch
    spec = config.sweep
    summary = Summary(kind=spec.kind, num_points=len(points), note=note)
    if spec.kind is SweepKind.BATCH:
        summary.context = spec.context
        summary.crossover = Crossovers(measured=measured_crossover(points))
        if loaded is not None:
            prec = loaded.precision
            for label, profile in (("predicted", selected), ("predicted_local", local)):
                if profile is not None and profile.has_peak(prec):
                    b = crossover_batch(loaded.shape, prec, spec.context, profile, prec, math)
                    setattr(summary.crossover, label, None if b >= CROSSOVER_CAP else b)
    errors = [abs(p.simulated_ms - p.step_ms) / p.step_ms * 100 for p in points if p.simulated_ms is not None]
    if errors:
        summary.simulated_mape = sum(errors) / len(errors)
        summary.simulated_worst = max(errors)
    if points:
        best = max(points, key=lambda p: p.tokens_per_s)
        summary.best_tokens_per_s = best.tokens_per_s
        summary.best_at = best.x
        summary.largest_fit = points[-1].x
    return summary


def precision_summary(spec, points: list[PrecisionPoint], skipped: list[str], note: str) -> Summary:
    """The sweep's summary: the ratios against its first precision (the bytes, TPOT, TTFT)."""
    summary = Summary(kind="precision", num_points=len(points), batch=spec.batch, prompt_len=spec.prompt_len,
                      output_len=spec.output_len,
                      note="; ".join(([note] if note else []) + [f"skipped {s}" for s in skipped]))
    if points:
        base = points[0]
        summary.precision = {p.dtype: PrecisionGain(base.weight_bytes / p.weight_bytes, base.tpot_ms / p.tpot_ms,
                                                    base.ttft_ms / p.ttft_ms) for p in points[1:]}
    return summary
