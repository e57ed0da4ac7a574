"""Batch-size and prompt-length sweeps: measured step times beside the roofline's predictions.

`sweep batch` times decode steps of B requests at a fixed context; `sweep prompt` times the
prefill of one prompt of each length. Each point is the median of several timed steps after
warm-up. The KV cache of a batch sweep is filled with placeholder values, not a real
prefill: a decode step's cost does not depend on the values in the cache, and prefilling
64 x 512 tokens first would take minutes on a CPU.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

from backend.errors import InputError, is_out_of_memory, one_line
from backend.events import Progress, RunFinished, SweepPoint
from backend.io.export import RunData, ensure_writable
from backend.records import Phase, RecordBatch, StepRecord

GROWTH_FRACTION = 0.5   # the measured crossover: tokens/s grows by less than half of the batch's growth
FIRST_WARMUP_S = 0.5    # untimed steps before the first point, at least this long


@dataclass(slots=True)
class SweepSpec:
    kind: str = "batch"                                   # batch | prompt | precision | rate | concurrency
    batches: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64])
    lengths: list[int] = field(default_factory=lambda: [32, 64, 128, 256, 512, 1024, 2048])
    context: int = 512                                    # batch sweep: tokens each request attends to
    steps: int = 8                                        # timed steps (or prefills) per point
    warmup: int = 2
    # precision sweep (engine/precision_sweep.py): B prompts of prompt_len, output_len decode steps
    dtypes: list[str] = field(default_factory=lambda: list(PRECISION_DEFAULT))
    prompt_len: int = 512
    output_len: int = 64
    batch: int = 1
    # load sweeps (engine/load_sweep.py): one load run per arrival rate or per number of closed-loop users
    rates: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0])
    concurrencies: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])


PRECISION_DEFAULT = ("float32", "bfloat16", "q8_0", "q4_1")


def parse_dtypes(text: str, flag: str = "--dtypes") -> list[str]:
    """"float32,q8_0" -> their canonical names, each once, in the order given."""
    from backend.precision import NAMES, canonical
    try:
        names = [canonical(part) for part in text.split(",") if part.strip()]
    except InputError:
        names = []
    if not names or "auto" in names:
        raise InputError(f"{flag} takes comma-separated precisions from {', '.join(NAMES)}; got {text!r}")
    return list(dict.fromkeys(names))


def parse_rates(text: str, flag: str = "--rates") -> list[float]:
    """"0.5,1,2" -> [0.5, 1.0, 2.0]; one clear message for anything else."""
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"{flag} takes comma-separated numbers, got {text!r}") from None
    if not rates or any(not 0 < r < float("inf") for r in rates):
        raise InputError(f"{flag} needs positive rates, got {text!r}")
    return sorted(set(rates))


def parse_sizes(text: str, flag: str) -> list[int]:
    """"1,2,4,8" -> [1, 2, 4, 8]; one clear message for anything else."""
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"{flag} takes comma-separated whole numbers, got {text!r}") from None
    if not sizes or any(s <= 0 for s in sizes):
        raise InputError(f"{flag} needs positive sizes, got {text!r}")
    return sorted(set(sizes))


def measured_crossover(points: list[SweepPoint]) -> int | None:
    """First batch where tokens/s stops growing roughly in proportion to the batch size."""
    for prev, cur in zip(points, points[1:]):
        expected = cur.x / prev.x
        if cur.tokens_per_s / prev.tokens_per_s - 1 < GROWTH_FRACTION * (expected - 1):
            return cur.x
    return None


def _predict(profile, cost, dtype) -> tuple[float | None, str]:
    from backend.roofline.cost import predict
    if profile is None or not profile.has_peak(dtype):
        return None, ""
    p = predict(cost, profile, dtype)
    return p.time_s * 1000, p.bound.value


class _Stopped(Exception):
    """Stop was pressed between two timed steps of a point."""


def _check_fits(shape, slots: int, length: int, dtype_bytes: int, device, what: str) -> None:
    """A KV cache larger than the free memory is the point's out-of-memory, before it is allocated."""
    from backend.loaders.weights import kv_shortfall
    shortfall = kv_shortfall(shape, slots, length, dtype_bytes, device)
    if shortfall is not None:
        need, free = shortfall
        raise MemoryError(f"{what} needs {need / 2**30:,.2f} GiB of KV cache; {free / 2**30:,.2f} GiB is free")


def run_sweep(config, emit: Callable[[object], None], should_stop: Callable[[], bool], models=None) -> RunFinished:
    """The sweep as a target; `models` (a ModelCache) keeps the model loaded for the next run."""
    from backend.loaders.cache import ModelCache
    models = models or ModelCache()
    import torch

    from backend.loaders.device import synchronize
    from backend.models import make_step_batch
    from backend.models.base import KVCache
    from backend.models.packed import pack_weights
    from backend.roofline.profiles import find_profile, run_profile
    from backend.roofline.cost import step_cost, utilization
    from backend.roofline.step_time import CostModel
    from backend.config import config_dict
    from backend.engine.local import run_info
    from backend.records import new_run_id

    spec: SweepSpec = config.sweep
    out_dir = ensure_writable(config.out_dir) if config.out_dir else None
    loaded, dev_name, reused = models.get(config, emit)
    pack_weights(loaded.model)   # as the runner does: the sweep times the same kernels as a run
    shape, device = loaded.shape, loaded.device
    emit(loaded.loaded_event(dev_name, 0, reused))
    dtype = loaded.precision            # priced by its matrices' bytes and its compute peak
    dtype_bytes = loaded.precision
    local = run_profile(str(device), dev_name)   # this machine's roofline, as the run summary judges it
    selected = find_profile(config.profile) if config.profile else local
    sizes = spec.batches if spec.kind == "batch" else spec.lengths
    run_id = new_run_id()
    points: list[SweepPoint] = []
    steps: list[StepRecord] = []
    note = ""
    t0 = time.perf_counter()

    sim = CostModel.for_profile(local) if local is not None and local.has_peak(dtype) else None

    def simulated_ms(cost, x) -> float | None:
        """What `--simulate --profile <this machine>` charges for the point: measured and simulated side by side."""
        if sim is None:
            return None
        tokens, requests = (x, x) if spec.kind == "batch" else (x, 1)
        return (sim.cost_seconds(cost, local, dtype) + sim.overhead_seconds(tokens, requests)) * 1000

    def timed(batch_fn, cache) -> float:
        if should_stop():
            raise _Stopped   # Stop takes effect within one step, not at the end of the point
        synchronize(device)
        start = time.perf_counter()
        with torch.inference_mode():
            loaded.model(batch_fn(), cache)
        synchronize(device)
        return time.perf_counter() - start

    def settle(batch_fn, cache) -> None:
        """More untimed steps before the sweep's first point, for FIRST_WARMUP_S: right after the model
        loads, the first steps run slow (thread pool, first-touch pages), and two warm-ups were too few
        (measured here: a first batch-1 point at 29.7 ms, against 21.1 ms at batch 4 just after)."""
        deadline = time.perf_counter() + FIRST_WARMUP_S
        for _ in range(64):
            timed(batch_fn, cache)
            if time.perf_counter() > deadline:
                break

    for i, x in enumerate(sizes):
        if should_stop():
            note = "stopped by user"
            break
        emit(Progress(f"sweep {spec.kind}: {x}", i / len(sizes)))
        try:
            if spec.kind == "batch":
                if spec.context + spec.warmup + spec.steps > shape.max_position:
                    raise InputError(f"--context {spec.context} is beyond {loaded.name}'s {shape.max_position} tokens")
                length = spec.context + spec.warmup + spec.steps
                _check_fits(shape, x, length, loaded.dtype.itemsize, device, f"batch {x}")
                cache = KVCache(shape, x, length, device, loaded.dtype)
                for t in cache.k + cache.v:
                    t.normal_(0, 1)   # placeholder keys and values: the cost does not depend on them
                ids = [j % shape.vocab_size for j in range(x)]

                def batch_at(pos):
                    return lambda: make_step_batch([], [(s, pos, ids[s]) for s in range(x)], device)
                for w in range(spec.warmup):
                    timed(batch_at(spec.context - 1 + w), cache)
                if i == 0:
                    settle(batch_at(spec.context - 1), cache)
                times = [timed(batch_at(spec.context - 1 + spec.warmup + k), cache) for k in range(spec.steps)]
                cost = step_cost(shape, dtype_bytes, [1] * x, [spec.context] * x)
                tokens = x
            else:
                if x > shape.max_position:
                    raise InputError(f"prompt length {x} is beyond {loaded.name}'s {shape.max_position} tokens")
                _check_fits(shape, 1, x, loaded.dtype.itemsize, device, f"prompt {x}")
                cache = KVCache(shape, 1, x, device, loaded.dtype)
                ids = [j % shape.vocab_size for j in range(x)]
                for w in range(spec.warmup):
                    timed(lambda: make_step_batch([(0, 0, ids)], [], device), cache)
                if i == 0:
                    settle(lambda: make_step_batch([(0, 0, ids)], [], device), cache)
                times = [timed(lambda: make_step_batch([(0, 0, ids)], [], device), cache) for _ in range(spec.steps)]
                cost = step_cost(shape, dtype_bytes, [x], [x])
                tokens = x
            del cache
        except _Stopped:
            note = "stopped by user"
            break
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            note = f"stopped at {spec.kind} {x}: it does not fit in memory ({one_line(exc, typed=True)})"
            if device.type == "cuda":
                torch.cuda.empty_cache()
            break
        median_s = statistics.median(times)
        util = utilization(cost, median_s, local, dtype) if local is not None and local.has_peak(dtype) else None
        predicted_ms, bound = _predict(selected, cost, dtype)
        predicted_local_ms, _ = _predict(local, cost, dtype)
        point = SweepPoint(spec.kind, x, median_s * 1000, tokens / median_s, cost.flops, cost.bytes,
                           util.mfu if util else None, util.mbu if util else None, predicted_ms,
                           predicted_local_ms, bound, simulated_ms(cost, x))
        points.append(point)
        start_ms = (time.perf_counter() - t0) * 1000 - median_s * 1000
        if spec.kind == "batch":   # x requests decoding one token each at the context
            phase, prefill_tokens, num_decode, contexts = Phase.DECODE, [], x, [spec.context] * x
        else:                      # one prompt of x tokens
            phase, prefill_tokens, num_decode, contexts = Phase.PREFILL, [x], 0, [x]
        step = StepRecord.measured(run_id=run_id, step=len(steps), phase=phase, prefill_tokens=prefill_tokens,
                                   num_decode=num_decode, contexts=contexts, start_ms=start_ms,
                                   duration_ms=median_s * 1000)
        steps.append(step)
        emit(point)
        emit(RecordBatch(steps=[step]))
    emit(Progress(f"sweep {spec.kind} done", 1.0))
    summary = sweep_summary(spec, points, shape, dtype_bytes, selected, local, dtype, note)
    data = RunData(run_id, config_dict(config), run_info(loaded, dev_name, 0, 0, 0), steps, [], [], summary)
    data.info["profile"] = selected.key if selected else None
    data.info["local_profile"] = local.key if local else None
    if out_dir is not None:
        write_sweep(out_dir, spec, points, data)
    return RunFinished(run_id, summary, note == "stopped by user", None, data)


def sweep_summary(spec, points, shape, dtype_bytes, selected, local, dtype, note: str) -> dict:
    from backend.roofline.cost import CROSSOVER_CAP, crossover_batch
    summary: dict = {"kind": spec.kind, "num_points": len(points), "note": note}
    if spec.kind == "batch":
        summary["context"] = spec.context
        summary["measured_crossover_batch"] = measured_crossover(points)
        for label, profile in (("predicted", selected), ("predicted_local", local)):
            if profile is not None and profile.has_peak(dtype):
                b = crossover_batch(shape, dtype_bytes, spec.context, profile, dtype)
                summary[f"{label}_crossover_batch"] = None if b >= CROSSOVER_CAP else b
    errors = [abs(p.simulated_ms - p.step_ms) / p.step_ms * 100 for p in points if p.simulated_ms is not None]
    if errors:
        summary["simulated_mape"] = sum(errors) / len(errors)
        summary["simulated_worst"] = max(errors)
    if points:
        best = max(points, key=lambda p: p.tokens_per_s)
        summary["best_tokens_per_s"] = best.tokens_per_s
        summary["best_at"] = best.x
        summary["largest_fit"] = points[-1].x
    return summary


SWEEP_COLUMNS = ["step_ms", "tokens_per_s", "flops", "bytes", "mfu", "mbu", "predicted_ms", "predicted_local_ms", "bound",
                 "simulated_ms"]


def write_sweep(folder, spec: SweepSpec, points: list[SweepPoint], data: RunData,
                records_from=None) -> None:
    """The run's files and sweep.csv, written all together or not at all."""
    import csv
    import io
    from backend.io.export import write_run
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["batch" if spec.kind == "batch" else "prompt_len", *SWEEP_COLUMNS])
    for p in points:
        w.writerow([p.x, *("" if getattr(p, c) is None else getattr(p, c) for c in SWEEP_COLUMNS)])
    write_run(folder, data, records_from, extra={"sweep.csv": buf.getvalue()})


def read_sweep(folder) -> list[SweepPoint]:
    """The points of a sweep folder's sweep.csv ([] when the folder holds no sweep)."""
    import csv
    from pathlib import Path
    path = Path(folder) / "sweep.csv"
    if not path.is_file():
        return []

    def number(text: str):
        return None if text == "" else float(text)
    try:
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            x_col = (reader.fieldnames or [""])[0]
            if x_col not in ("batch", "prompt_len"):   # another sweep's file (a precision sweep's)
                return []
            kind = "batch" if x_col == "batch" else "prompt"
            return [SweepPoint(kind, int(row[x_col]), float(row["step_ms"]), float(row["tokens_per_s"]),
                               float(row["flops"]), float(row["bytes"]), number(row["mfu"]), number(row["mbu"]),
                               number(row["predicted_ms"]), number(row["predicted_local_ms"]), row["bound"],
                               number(row.get("simulated_ms") or ""))
                    for row in reader]
    except (KeyError, ValueError) as exc:
        raise InputError(f"{path}: not a sweep file from this version ({exc})") from None
