"""The simulated target: the real scheduler, workload, KV capacity and preemption, with each step's
time priced by a cost model instead of measured from a forward pass, on a virtual clock.

`run_simulated` has the signature of every target (config, emit, should_stop) and emits the same
events and records as `run_local`, so the summary, the files and the views work unchanged. No
weights are loaded: the model name must be a known shape (backend.models.shapes.SHAPES), and
every sampled token is one fixed id, so a request ends only at its output length.

The virtual clock starts at 0; the runner advances it by each step's price and the engine's idle
`sleep` advances it to the next arrival, so 1,000 requests of a GPU's workload run in seconds of
this machine's time while every time in the records is the simulated device's.
"""
from __future__ import annotations

import time
from dataclasses import asdict, replace
from typing import Callable

from backend.config import RunConfig
from backend.errors import DoesNotFit, InputError
from backend.events import Emit, ModelLoaded, Progress, RunFinished
from backend.precision import Precision, canonical, precision
from backend.roofline.cost import linear_params_per_layer
from backend.roofline.profiles import GpuProfile, find_profile
from backend.roofline.step_time import CostModel, is_cpu_profile

SIM_TOKEN = 0   # every sampled token: never a stop id (the simulated requests have none)

__all__ = ["CostModel", "VirtualClock", "SimRunner", "run_simulated", "is_cpu_profile"]


class VirtualClock:
    """Seconds since the run's start, moved only by `advance` (the engine's sleep, the runner's steps)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def now(self) -> float:
        return self.seconds

    def advance(self, seconds: float) -> None:
        self.seconds += max(0.0, seconds)


class SimRunner:
    """The runner's contract (`run(out) -> {request_id: token}`) without a model: prices the step,
    advances the clock by the price, and samples SIM_TOKEN wherever the real runner would sample."""

    def __init__(self, shape, prec: Precision, profile: GpuProfile, cost_model: CostModel, clock: VirtualClock):
        self.shape, self.precision, self.profile = shape, prec, profile
        self.cost_model, self.clock = cost_model, clock

    def price(self, out) -> float:
        """Seconds the scheduler output `out` takes on the profile (before update() moves it on)."""
        new_tokens = [c.num_tokens for c in out.prefill] + [1] * len(out.decode)
        contexts = [c.request.num_computed + c.num_tokens for c in out.prefill]
        contexts += [r.num_computed + 1 for r in out.decode]
        rows = sum(1 for c in out.prefill if c.samples) + len(out.decode)   # an intermediate chunk needs no logits
        return self.cost_model.step_seconds(self.shape, self.precision, self.profile, new_tokens, contexts, rows)

    def run(self, out) -> dict[int, int]:
        seconds = self.price(out)
        samplers = [c.request.request_id for c in out.prefill if c.samples] + [r.request_id for r in out.decode]
        self.clock.advance(seconds)
        return dict.fromkeys(samplers, SIM_TOKEN)

    def warmup(self) -> None:
        """Nothing to warm: kept so the runner's contract is whole."""


def resolve_model(name: str):
    """The shape of a known model name or of a config.json; one line refusing anything else (no
    weights are read)."""
    from backend.loaders.weights import config_shape
    from backend.models.shapes import SHAPES
    found = config_shape(name.lower() if name.lower() in SHAPES else name)
    if found is None:
        raise InputError(f"--simulate needs a known model shape ({', '.join(SHAPES)}) or a config.json, not "
                         f"{name!r}: the simulator reads no weights")
    return found[0]


def resolve_precision(dtype: str, profile: GpuProfile) -> Precision:
    """auto: bfloat16 on a GPU profile (float16 on one without a bf16 peak, as a T4), float32 on a CPU one."""
    name = canonical(dtype)
    if name == "auto":
        name = "float32" if is_cpu_profile(profile) else "bfloat16" if profile.has_peak("bf16") else "float16"
    prec = precision(name)
    profile.peak_flops(prec)   # a profile without this dtype's peak is refused in one line
    return prec


def model_bytes(shape, prec: Precision) -> int:
    """The weights' bytes: the matrices (and the LM head) at the precision, the rest at the activation dtype."""
    matrices = linear_params_per_layer(shape) * shape.num_layers + shape.vocab_size * shape.hidden_size
    rest = max(0, shape.num_params() - matrices)
    return int(matrices * prec.weight_bytes + rest * prec.activation_bytes)


def check_memory(shape, prec: Precision, profile: GpuProfile, kv_capacity: int) -> None:
    """Refuse a run whose weights and KV cache exceed the profile's memory."""
    kv_bytes = kv_capacity * 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * prec.activation_bytes
    need = model_bytes(shape, prec) + kv_bytes
    have = profile.memory_gb * 1e9
    if need > have:
        raise DoesNotFit(f"the weights and a KV cache of {kv_capacity:,} tokens need {need / 1e9:,.1f} GB; "
                         f"{profile.key} has {profile.memory_gb:,.0f} GB: lower --max-batch, --kv-tokens or the lengths")


def simulated_info(config: RunConfig, profile: GpuProfile, shape, prec: Precision, model: CostModel, device: str,
                   source: str, **extra) -> dict:
    """run.json's info of a simulated run (a run, a workload, a sweep, a disaggregated layout): what was
    priced, on which profile, with which cost model; `extra` adds the target's own entries."""
    return {"target": "simulated", "profile": config.profile, "profile_name": profile.name,
            "cost_model": model.terms(), "cost_model_source": model.source, "model": config.model.name,
            "source": source, "random_weights": False, "arch": shape.arch, "num_params": shape.num_params(),
            "weight_bytes": model_bytes(shape, prec), "shape": asdict(shape), "device": device,
            "device_name": profile.name, "dtype": prec.name, "weight_bits": prec.weight_bits,
            "activation_dtype": prec.activation, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **extra}


def run_simulated(config: RunConfig, emit: Emit, should_stop: Callable[[], bool], retain_records: bool = True,
                  cost_model: CostModel | None = None) -> RunFinished:
    """`run` (one batch) or `load` (a workload) with every step priced on config.profile."""
    from backend.targets.local import drive, kv_capacity_of, longest_sequence, validate
    from backend.engine.loop import Engine
    from backend.engine.scheduler import Scheduler, SchedulerConfig
    from backend.results.recorder import RunRecorder
    from backend.workload.arrivals import FixedSource, RequestSpec, WorkloadSource

    if not config.profile:
        raise InputError("--simulate needs --profile NAME (see `profiles`), the device whose steps are priced")
    if config.endpoint is not None:
        raise InputError("--simulate prices a local engine's steps; it cannot be combined with --endpoint")
    if config.mode not in ("batch", "load"):
        raise InputError(f"--simulate runs `run` and `load`, not {config.mode}")
    validate(config)
    if config.mode == "batch" and config.batch.prompt is not None:
        raise InputError("--simulate needs synthetic prompts (--prompt-len N), not --prompt text: it has no tokenizer")
    profile = find_profile(config.profile)
    shape = resolve_model(config.model.name)
    prec = resolve_precision(config.model.dtype, profile)
    model = cost_model or CostModel.for_profile(profile)
    model.validate()
    with RunRecorder(config, emit, retain_records) as recorder:
        emit = recorder.emit
        if config.mode == "batch":
            b = config.batch
            if b.prompt_len + b.output_len > shape.max_position:
                raise InputError(f"prompt of {b.prompt_len} tokens + {b.output_len} output tokens exceeds "
                                 f"{config.model.name}'s context of {shape.max_position} tokens")
            source = FixedSource([RequestSpec(i, 0.0, [SIM_TOKEN] * b.prompt_len, "", b.output_len)
                                  for i in range(b.batch)])
            num_slots, policy, max_len = b.batch, "static", b.prompt_len + b.output_len
        else:
            # the simulator reads no text: synthetic ids of the same drawn lengths stand in for text prompts
            spec = replace(config.workload, prompt_source="synthetic")
            source = WorkloadSource(spec, tokenize=None, vocab_size=shape.vocab_size, max_prompt_len=shape.max_position)
            num_slots, policy = config.engine.max_batch, config.engine.policy
            max_len = min(config.engine.max_len or longest_sequence(config.workload), shape.max_position)
        kv_capacity = kv_capacity_of(config, num_slots, max_len)
        check_memory(shape, prec, profile, kv_capacity)
        device = f"simulated {profile.key}"
        source_text = f"simulated on {profile.key} ({profile.name}): step times from a cost model, no weights loaded"
        weight_bytes = model_bytes(shape, prec)
        emit(ModelLoaded(config.model.name, device, profile.name, prec.name, source_text, False, shape.num_params(),
                         weight_bytes, kv_capacity, shape, False, prec.weight_bits, prec.activation))
        clock = VirtualClock()
        runner = SimRunner(shape, prec, profile, model, clock)
        scheduler = Scheduler(SchedulerConfig(policy=policy, max_batch=num_slots, kv_capacity=kv_capacity,
                                              max_len=max_len, chunk_tokens=config.engine.chunk_tokens))
        engine = Engine(scheduler, runner, recorder.run_id, clock=clock.now, sleep=clock.advance)
        emit(Progress("simulating", None))
        wall_start = time.perf_counter()

        def info() -> dict:
            return simulated_info(config, profile, shape, prec, model, device, source_text, kv_capacity=kv_capacity,
                                  kv_slots=num_slots, max_len=max_len, virtual_s=clock.seconds,
                                  wall_s=time.perf_counter() - wall_start)

        return drive(engine, source, recorder, should_stop, info, priced_on=profile)
