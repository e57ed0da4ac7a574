"""The sweeps, simulated: `sweep batch|prompt|precision --simulate --profile NAME` prices each
point's steps with the profile's cost model instead of timing them, and writes the same
sweep.csv, steps and summary as the measured sweeps (run.json says simulated).

A point is one step (a batch sweep's decode step of B requests at the context, a prompt
sweep's prefill of one prompt), or for a precision sweep one prefill of the batch's prompts
and one decode step at the middle of its output, as the measured sweeps time them.
"""
from __future__ import annotations

from typing import Callable

from backend.config import RunConfig, config_dict
from backend.errors import InputError
from backend.events import Emit, ModelLoaded, PrecisionPoint, Progress, RunFinished, SweepPoint
from backend.io.export import RunData, ensure_writable
from backend.precision import precision
from backend.records import Phase, RecordBatch, StepRecord, new_run_id
from backend.roofline.cost import predict, step_cost, utilization
from backend.roofline.profiles import find_profile
from backend.roofline.step_time import CostModel


def run_simulated_sweep(config: RunConfig, emit: Emit, should_stop: Callable[[], bool],
                        cost_model: CostModel | None = None) -> RunFinished:
    from backend.engine.precision_sweep import precision_summary, write_precision_sweep
    from backend.engine.simulate import model_bytes, resolve_model, resolve_precision, simulated_info
    from backend.engine.sweep import sweep_summary, write_sweep

    if not config.profile:
        raise InputError("--simulate needs --profile NAME (see `profiles`), the device whose steps are priced")
    spec = config.sweep
    profile = find_profile(config.profile)
    shape = resolve_model(config.model.name)
    model = cost_model or CostModel.for_profile(profile)
    model.validate()
    out_dir = ensure_writable(config.out_dir) if config.out_dir else None
    run_id = new_run_id()
    steps: list[StepRecord] = []
    clock_ms = 0.0

    def record(phase: Phase, seconds: float, prefill: list[int], decode: int, contexts: list[int]) -> None:
        nonlocal clock_ms
        step = StepRecord.measured(run_id=run_id, step=len(steps), phase=phase, prefill_tokens=prefill,
                                   num_decode=decode, contexts=contexts, start_ms=clock_ms,
                                   duration_ms=seconds * 1000)
        clock_ms += seconds * 1000
        steps.append(step)
        emit(RecordBatch(steps=[step]))

    def price(prec, new_tokens, contexts) -> float:
        return model.step_seconds(shape, prec, profile, new_tokens, contexts)

    if spec.kind == "precision":
        precs = [resolve_precision(name, profile) if name == "auto" else precision(name) for name in spec.dtypes]
    else:
        precs = [resolve_precision(config.model.dtype, profile)]
    for prec in precs:
        profile.peak_flops(prec)   # one line for a precision the profile has no peak for
    first = precs[0]
    emit(ModelLoaded(config.model.name, f"simulated {profile.key}", profile.name, first.name,
                     f"simulated on {profile.key} ({profile.name}): step times from a cost model, no weights loaded",
                     False, shape.num_params(), model_bytes(shape, first), 0, shape, False, first.weight_bits,
                     first.activation))
    points: list = []
    note = ""
    if spec.kind == "precision":
        plan = [(prec.name, prec) for prec in precs]
    else:
        plan = [(x, first) for x in (spec.batches if spec.kind == "batch" else spec.lengths)]
    for i, (x, prec) in enumerate(plan):
        if should_stop():
            note = "stopped by user"
            break
        emit(Progress(f"sweep {spec.kind}: {x}", i / len(plan)))
        if spec.kind == "precision":
            b, n, out = spec.batch, spec.prompt_len, spec.output_len
            if n + out > shape.max_position:
                raise InputError(f"--prompt-len {n} + --output-len {out} is beyond {config.model.name}'s "
                                 f"{shape.max_position} tokens")
            ttft = price(prec, [n] * b, [n] * b)
            record(Phase.PREFILL, ttft, [n] * b, 0, [n] * b)
            context = n + out // 2
            tpot = price(prec, [1] * b, [context] * b)
            record(Phase.DECODE, tpot, [], b, [context] * b)
            roof = [predict(step_cost(shape, prec, tokens, ctx), profile, prec).time_s * 1000
                    for tokens, ctx in (([n] * b, [n] * b), ([1] * b, [context] * b))]
            point = PrecisionPoint(prec.name, model_bytes(shape, prec), prec.weight_bits, ttft * 1000, tpot * 1000,
                                   b * n / ttft, b / tpot, roof[0], roof[1], None, None)
        else:
            if spec.kind == "batch":
                if spec.context > shape.max_position:
                    raise InputError(f"--context {spec.context} is beyond {config.model.name}'s {shape.max_position} tokens")
                new_tokens, contexts = [1] * x, [spec.context] * x
            else:
                if x > shape.max_position:
                    raise InputError(f"prompt length {x} is beyond {config.model.name}'s {shape.max_position} tokens")
                new_tokens, contexts = [x], [x]
            seconds = price(prec, new_tokens, contexts)
            cost = step_cost(shape, prec, new_tokens, contexts)
            util = utilization(cost, seconds, profile, prec)
            roof = predict(cost, profile, prec)
            if spec.kind == "batch":
                record(Phase.DECODE, seconds, [], x, contexts)
            else:
                record(Phase.PREFILL, seconds, [x], 0, contexts)
            point = SweepPoint(spec.kind, x, seconds * 1000, sum(new_tokens) / seconds, cost.flops, cost.bytes,
                               util.mfu, util.mbu, roof.time_s * 1000, None, roof.bound.value)
        points.append(point)
        emit(point)
    emit(Progress(f"sweep {spec.kind} done", 1.0))
    if spec.kind == "precision":
        summary = precision_summary(spec, points, [], note)
    else:
        summary = sweep_summary(spec, points, shape, first, profile, None, first, note)
    summary["simulated"] = True
    info = simulated_info(config, profile, shape, first, model, f"simulated {profile.key}",
                          f"simulated on {profile.key}", local_profile=None)
    if spec.kind == "precision":
        info["dtypes"] = [p.name for p in precs]
        info["dtype"] = ",".join(info["dtypes"])
    data = RunData(run_id, config_dict(config), info, steps, [], [], summary)
    if out_dir is not None and spec.kind == "precision":
        write_precision_sweep(out_dir, points, data)
    elif out_dir is not None:
        write_sweep(out_dir, spec, points, data)
    return RunFinished(run_id, summary, note == "stopped by user", None, data)
