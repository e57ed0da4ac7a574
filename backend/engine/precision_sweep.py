"""`sweep precision`: the same model at each weight precision, TTFT and TPOT beside the roofline.

Only the bytes per weight change from one point to the next, so the sweep shows the two phases'
opposite bottlenecks directly: a decode step reads every weight and gets faster as the weights
shrink; a prefill is bound by its arithmetic, which the formats do not reduce (the CPU kernels
multiply in float32 whatever the format), so TTFT stays put or grows by the dequantizing.

Per precision: the model is loaded (and packed) at it; B prompts of the prompt length are
prefilled in one step (timed `steps` times after a warm-up: TTFT), then B requests decode
`output_len` tokens one step each (the median step: TPOT). The roofline prices both steps at
the precision's real bytes (block scales included) with this machine's profile and the selected
one. A precision this machine cannot run is reported and skipped.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Callable

from backend.errors import InputError, is_out_of_memory, one_line
from backend.events import PrecisionPoint, Progress, RunFinished
from backend.io.export import RunData, ensure_writable
from backend.records import Phase, RecordBatch, StepRecord

COLUMNS = ["dtype", "weight_bytes", "weight_bits", "ttft_ms", "tpot_ms", "prefill_tokens_per_s", "decode_tokens_per_s",
           "predicted_ttft_ms", "predicted_tpot_ms", "predicted_local_ttft_ms", "predicted_local_tpot_ms",
           "simulated_ttft_ms", "simulated_tpot_ms"]


def run_precision_sweep(config, emit: Callable[[object], None], should_stop: Callable[[], bool],
                        models=None) -> RunFinished:
    import torch

    from backend.config import config_dict
    from backend.engine.local import run_info
    from backend.loaders.cache import ModelCache
    from backend.loaders.device import synchronize
    from backend.loaders.weights import kv_shortfall
    from backend.models import make_step_batch
    from backend.models.base import KVCache
    from backend.models.packed import pack_weights
    from backend.records import new_run_id
    from backend.roofline.cost import predict, step_cost
    from backend.roofline.profiles import find_profile, run_profile
    from backend.roofline.step_time import CostModel

    spec = config.sweep
    models = models or ModelCache()
    out_dir = ensure_writable(config.out_dir) if config.out_dir else None
    run_id = new_run_id()
    b, prompt_len, output_len = spec.batch, spec.prompt_len, spec.output_len
    points: list[PrecisionPoint] = []
    steps: list[StepRecord] = []
    skipped: list[str] = []
    note, info = "", {}
    t0 = time.perf_counter()

    def timed(batch, cache) -> float:
        synchronize(device)
        start = time.perf_counter()
        with torch.inference_mode():
            loaded.model(batch, cache)
        synchronize(device)
        return time.perf_counter() - start

    def record(phase: Phase, seconds: float, prefill: list[int], decode: int, contexts: list[int]) -> None:
        start_ms = (time.perf_counter() - t0 - seconds) * 1000
        steps.append(StepRecord.measured(run_id=run_id, step=len(steps), phase=phase, prefill_tokens=prefill,
                                         num_decode=decode, contexts=contexts, start_ms=start_ms,
                                         duration_ms=seconds * 1000))
        emit(RecordBatch(steps=[steps[-1]]))

    for i, name in enumerate(spec.dtypes):
        if should_stop():
            note = "stopped by user"
            break
        emit(Progress(f"sweep precision: {name}", i / len(spec.dtypes)))
        one = dataclasses.replace(config, model=dataclasses.replace(config.model, dtype=name))
        try:
            loaded, dev_name, reused = models.get(one, emit)
        except InputError as exc:   # e.g. q4_1 without the C kernels: the other precisions still run
            skipped.append(f"{name}: {exc}")
            continue
        pack_weights(loaded.model)
        shape, device, prec = loaded.shape, loaded.device, loaded.precision
        emit(loaded.loaded_event(dev_name, b * (prompt_len + output_len), reused))
        length = prompt_len + output_len + 2
        if length > shape.max_position:
            raise InputError(f"--prompt-len {prompt_len} + --output-len {output_len} is beyond {loaded.name}'s "
                             f"{shape.max_position} tokens")
        shortfall = kv_shortfall(shape, b, length, loaded.dtype.itemsize, device)
        if shortfall is not None:
            raise InputError(f"batch {b} x {length} tokens needs {shortfall[0] / 2**30:.2f} GiB of KV cache; "
                             f"{shortfall[1] / 2**30:.2f} GiB is free")
        try:
            cache = KVCache(shape, b, length, device, loaded.dtype)
            ids = [[(7 + 31 * j + 13 * s) % shape.vocab_size for j in range(prompt_len)] for s in range(b)]
            prefill = make_step_batch([(s, 0, ids[s]) for s in range(b)], [], device)
            timed(prefill, cache)                                             # warm-up
            ttfts = []
            for _ in range(spec.steps):
                ttfts.append(timed(prefill, cache))
                record(Phase.PREFILL, ttfts[-1], [prompt_len] * b, 0, [prompt_len] * b)
            tpots = []
            for k in range(output_len + 1):                                   # the first is a warm-up
                if should_stop():
                    raise KeyboardInterrupt
                pos = prompt_len + k
                seconds = timed(make_step_batch([], [(s, pos, ids[s][k % prompt_len]) for s in range(b)], device), cache)
                if k:
                    tpots.append(seconds)
                    record(Phase.DECODE, seconds, [], b, [pos + 1] * b)
            del cache
        except KeyboardInterrupt:
            note = "stopped by user"
            break
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            skipped.append(f"{name}: does not fit in memory ({one_line(exc, typed=True)})")
            continue
        ttft, tpot = statistics.median(ttfts), statistics.median(tpots)
        prefill_cost = step_cost(shape, prec, [prompt_len] * b, [prompt_len] * b)
        decode_cost = step_cost(shape, prec, [1] * b, [prompt_len + output_len // 2] * b)
        local = run_profile(str(device), dev_name)
        selected = find_profile(config.profile) if config.profile else local

        def predicted(profile, cost):
            return predict(cost, profile, prec).time_s * 1000 if profile is not None and profile.has_peak(prec) else None

        def simulated(new_tokens, contexts):
            """What `--simulate` on this machine's profile charges: measured and simulated side by side."""
            if local is None or not local.has_peak(prec):
                return None
            return CostModel.for_profile(local).step_seconds(shape, prec, local, new_tokens, contexts) * 1000
        point = PrecisionPoint(prec.name, loaded.weight_bytes, prec.weight_bits, ttft * 1000, tpot * 1000,
                               b * prompt_len / ttft, b / tpot, predicted(selected, prefill_cost),
                               predicted(selected, decode_cost), predicted(local, prefill_cost),
                               predicted(local, decode_cost), simulated([prompt_len] * b, [prompt_len] * b),
                               simulated([1] * b, [prompt_len + output_len // 2] * b))
        points.append(point)
        emit(point)
        info = run_info(loaded, dev_name, 0, length, b)
        info["profile"] = selected.key if selected else None
        info["local_profile"] = local.key if local else None
    emit(Progress("sweep precision done", 1.0))
    summary = precision_summary(spec, points, skipped, note)
    info = info or {"model": config.model.name, "device": config.model.device}
    info["dtypes"] = [p.dtype for p in points]                 # every precision measured, in order
    info["dtype"] = ",".join(info["dtypes"]) or info.get("dtype")
    data = RunData(run_id, config_dict(config), info, steps, [], [], summary)
    if out_dir is not None:
        write_precision_sweep(out_dir, points, data)
    return RunFinished(run_id, summary, note == "stopped by user", None, data)


def precision_summary(spec, points: list[PrecisionPoint], skipped: list[str], note: str) -> dict:
    """The sweep's summary: the ratios against its first precision (the bytes, TPOT, TTFT)."""
    summary: dict = {"kind": "precision", "num_points": len(points), "batch": spec.batch,
                     "prompt_len": spec.prompt_len, "output_len": spec.output_len,
                     "note": "; ".join(([note] if note else []) + [f"skipped {s}" for s in skipped])}
    if points:
        base = points[0]
        for p in points[1:]:
            summary[f"{p.dtype}_bytes_ratio"] = base.weight_bytes / p.weight_bytes
            summary[f"{p.dtype}_tpot_speedup"] = base.tpot_ms / p.tpot_ms
            summary[f"{p.dtype}_ttft_speedup"] = base.ttft_ms / p.ttft_ms
    return summary


def write_precision_sweep(folder, points: list[PrecisionPoint], data: RunData, records_from=None) -> None:
    """The run's files and sweep.csv (one row per precision), written all together or not at all."""
    import csv
    import io
    from backend.io.export import write_run
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for p in points:
        w.writerow(["" if getattr(p, c) is None else getattr(p, c) for c in COLUMNS])
    write_run(folder, data, records_from, extra={"sweep.csv": buf.getvalue()})


def read_precision_sweep(folder) -> list[PrecisionPoint]:
    """The points of a precision sweep's sweep.csv ([] when the folder holds none)."""
    import csv
    from pathlib import Path
    path = Path(folder) / "sweep.csv"
    if not path.is_file():
        return []
    try:
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            if (reader.fieldnames or [""])[0] != "dtype":
                return []
            return [PrecisionPoint(row["dtype"], int(float(row["weight_bytes"])), float(row["weight_bits"]),
                                   *(None if row.get(c, "") == "" else float(row[c]) for c in COLUMNS[3:]))
                    for row in reader]
    except (KeyError, ValueError) as exc:
        raise InputError(f"{path}: not a precision sweep file from this version ({exc})") from None
