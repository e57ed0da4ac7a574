"""The simulated target: the real scheduler, workload, KV capacity and preemption, with each step's
time priced by a cost model instead of measured from a forward pass, on a virtual clock.

`run_simulated` has the signature of every target (config, emit, should_stop) and emits the same
events and records as `run_local`, so the summary, the files and the views work unchanged. No
weights are loaded: the model name must be a known shape (backend.models.shapes.SHAPES), and
every sampled token is one fixed id, so a request ends only at its output length.

The virtual clock starts at 0; the runner advances it by each step's price and the engine's idle
`sleep` advances it to the next arrival, so 1,000 requests of a GPU's workload run in seconds of
this machine's time while every time in the records is the simulated device's.

config.deployment spreads the model over devices (backend/roofline/parallel.py prices a replica of
tp x pp devices; `dp` replicas run behind a router, backend/targets/replicas.py); run.json records the
layout, and the memory check is each device's.
"""
from __future__ import annotations

import time
from dataclasses import asdict, replace
from typing import Callable

from backend.config import Deployment, RunConfig
from backend.errors import DoesNotFit, InputError
from backend.events import Emit, ModelLoaded, Progress, RunFinished
from backend.precision import GPU_FORMATS, Precision, canonical, precision
from backend.roofline import parallel
from backend.roofline.cost import matrix_params
from backend.roofline.parallel import Layout, StepPricer
from backend.roofline.profiles import GpuProfile, find_profile
from backend.shape import kv_elements_per_token
from backend.run_info import DisaggregatedInfo, ReplicasInfo, RunInfo, SimulatedInfo, TargetKind, now_created
from backend.summary import Summary
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

    def __init__(self, shape, prec: Precision, profile: GpuProfile, cost_model: CostModel, clock: VirtualClock,
                 layout: Layout | None = None):
        self.shape, self.precision, self.profile = shape, prec, profile
        self.cost_model, self.clock = cost_model, clock
        self.pricer = StepPricer(shape, prec, profile, cost_model, layout)

    def price(self, out) -> float:
        """Seconds the scheduler output `out` takes on the replica (before update() moves it on)."""
        if not out.prefill:   # a decode step, most of a run's: one token a request, each sampled
            decode = out.decode
            return self.pricer.seconds([1] * len(decode), [r.num_computed + 1 for r in decode], [True] * len(decode))
        new_tokens = [c.num_tokens for c in out.prefill] + [1] * len(out.decode)
        contexts = [c.request.num_computed + c.num_tokens for c in out.prefill]
        contexts += [r.num_computed + 1 for r in out.decode]
        logits = [c.samples for c in out.prefill] + [True] * len(out.decode)   # an intermediate chunk needs none
        return self.pricer.seconds(new_tokens, contexts, logits)

    def sample(self, out) -> dict[int, int]:
        samplers = [c.request.request_id for c in out.prefill if c.samples] + [r.request_id for r in out.decode]
        return dict.fromkeys(samplers, SIM_TOKEN)

    def run(self, out) -> dict[int, int]:
        seconds = self.price(out)
        self.clock.advance(seconds)
        return self.sample(out)

    def warmup(self) -> None:
        """Nothing to warm: kept so the runner's contract is whole."""


def resolve_model(name: str):
    """The shape of a known model name, a shipped config (profiles/models/) or a config.json; one line
    refusing anything else (no weights are read)."""
    from backend.models.shapes import SHAPES
    if name.lower() in SHAPES:
        return SHAPES[name.lower()]
    from backend.roofline.model_configs import SHIPPED_CONFIGS, sim_shape
    if name.lower() in SHIPPED_CONFIGS or name.lower().endswith(".json") or _holds_config(name):
        return sim_shape(name)
    from backend.loaders.weights import config_shape
    found = config_shape(name)
    if found is None:
        known = ", ".join([*SHAPES, *SHIPPED_CONFIGS])
        raise InputError(f"--simulate needs a known model shape ({known}) or a config.json, not "
                         f"{name!r}: the simulator reads no weights")
    return found[0]


def _holds_config(name: str) -> bool:
    from pathlib import Path
    return (Path(name).expanduser() / "config.json").is_file()


def resolve_precision(dtype: str, profile: GpuProfile, kv_dtype: str = "auto") -> Precision:
    """auto: bfloat16 on a GPU profile (float16 on one without a bf16 peak, as a T4), float32 on a CPU one.

    On a GPU profile int8 and the GGUF block formats run weight-only: their weights' bytes, the
    products in the activations' bfloat16 (float16) at its peak. fp8, nvfp4 and mxfp4 need the
    profile's FP8 or FP4 tensor peak; a CPU profile prices only what this engine's kernels run."""
    name = canonical(dtype)
    cpu = is_cpu_profile(profile)
    gpu_float = "bfloat16" if profile.has_peak("bf16") else "float16"
    if name == "auto":
        name = "float32" if cpu else gpu_float
    if name in GPU_FORMATS and cpu:
        raise InputError(f"--dtype {name} is a GPU tensor-core format; profile {profile.key} is a CPU's: "
                         "simulate it on a GPU profile (see `profiles`)")
    prec = precision(name, activation="float32" if cpu else gpu_float)
    if not profile.has_peak(prec):
        key = prec.compute
        raise InputError(f"profile {profile.key} ({profile.name}) has no {key} peak, so it cannot run --dtype {name}"
                         f" (its peaks: {', '.join(profile.dtypes)})")
    return prec.with_kv(kv_dtype)


def model_bytes(shape, prec: Precision) -> int:
    """The weights' bytes: the matrices (and the LM head) at the precision, the rest at the activation dtype."""
    matrices = matrix_params(shape)
    rest = max(0, shape.num_params() - matrices)
    return int(matrices * prec.weight_bytes + rest * prec.activation_bytes)


def kv_bytes_per_token(shape, prec: Precision) -> float:
    """Bytes one token's keys and values take over every layer (MLA: its latent), at the KV dtype."""
    return kv_elements_per_token(shape) * prec.kv_bytes


def per_device_bytes(shape, prec: Precision, layout: Layout | None = None) -> tuple[float, float]:
    """(weight bytes, KV cache bytes a token) one of a replica's tp x pp devices holds: the weights split
    evenly over them, the KV cache over the stages and the KV heads tensor parallelism splits (replicated
    past their count, MLA's one latent on every rank: parallel.kv_shards), at the KV dtype. The memory
    check's arithmetic and the planner's (backend/planner/candidates.py)."""
    layout = layout or Layout()
    kv_share = layout.pp * parallel.kv_shards(shape, layout.tp)
    return model_bytes(shape, prec) / (layout.tp * layout.pp), kv_bytes_per_token(shape, prec) / kv_share


def check_memory(shape, prec: Precision, profile: GpuProfile, kv_capacity: int, layout: Layout | None = None) -> None:
    """Refuse a run whose weights and KV cache exceed a device's memory (each of a replica's tp x pp
    devices holds its share of both: per_device_bytes)."""
    layout = layout or Layout()
    devices = layout.tp * layout.pp
    weights, kv_token = per_device_bytes(shape, prec, layout)
    need = weights + kv_capacity * kv_token
    have = profile.memory_gb * 1e9
    if need > have:
        each = f" per device over {devices} devices (tp {layout.tp} x pp {layout.pp})" if devices > 1 else ""
        raise DoesNotFit(f"the weights and a KV cache of {kv_capacity:,} tokens need {need / 1e9:,.1f} GB{each}; "
                         f"{profile.key} has {profile.memory_gb:,.0f} GB: lower --max-batch, --kv-tokens or the "
                         f"lengths, or spread the model (--tp, --pp)")


def deployment_info(deployment: Deployment, layout: Layout, prec: Precision, devices: int) -> ReplicasInfo:
    """run.json's record of how the model was spread: the layout, its link, the KV dtype, the devices."""
    return ReplicasInfo(tp=layout.tp, pp=layout.pp, dp=deployment.dp, ep=layout.ep, router=deployment.router,
                        devices=devices, link=layout.link.as_dict() if layout.link is not None else None,
                        kv_dtype=prec.kv_dtype)


def simulated_info(config: RunConfig, profile: GpuProfile, shape, prec: Precision, model: CostModel, device: str,
                   source: str, *, kv_capacity: int, kv_slots: int, max_len: int, virtual_s: float, wall_s: float,
                   replicas: ReplicasInfo, disaggregated: DisaggregatedInfo | None = None) -> RunInfo:
    """run.json's info of a simulated run (a run, a workload, a disaggregated layout): what was priced,
    on which profile, with which cost model, spread how."""
    return RunInfo(target=TargetKind.SIMULATED, profile=config.profile, model=config.model.name, source=source,
                   random_weights=False, arch=shape.arch, num_params=shape.num_params(),
                   weight_bytes=model_bytes(shape, prec), shape=asdict(shape), device=device, device_name=profile.name,
                   dtype=prec.name, weight_bits=prec.weight_bits, activation_dtype=prec.activation,
                   kv_dtype=prec.kv_dtype, kv_capacity=kv_capacity, kv_slots=kv_slots, max_len=max_len,
                   created=now_created(), wall_s=wall_s,
                   simulated=SimulatedInfo(profile_name=profile.name, cost_model=model.terms(),
                                           cost_model_source=model.source, virtual_s=virtual_s),
                   replicas=replicas, disaggregated=disaggregated)


def run_simulated(config: RunConfig, emit: Emit, should_stop: Callable[[], bool], retain_records: bool = True,
                  cost_model: CostModel | None = None) -> RunFinished:
    """`run` (one batch) or `load` (a workload) with every step priced on config.profile."""
    from backend.targets.local import drive, kv_capacity_of, longest_sequence, validate
    from backend.targets.replicas import ReplicaSet
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
    deployment = config.deployment
    parallel.validate(deployment, shape, config.model.name)
    prec = resolve_precision(config.model.dtype, profile, deployment.kv_dtype)
    model = cost_model or CostModel.for_profile(profile, prec)
    model.validate()
    layout = Layout.of(deployment, profile)
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
            # the simulator reads no text and no ids: one id (SIM_TOKEN) at the drawn lengths stands in for every prompt
            spec = replace(config.workload, prompt_source="synthetic")
            source = WorkloadSource(spec, tokenize=None, vocab_size=1, max_prompt_len=shape.max_position)
            num_slots, policy = config.engine.max_batch, config.engine.policy
            max_len = min(config.engine.max_len or longest_sequence(config.workload), shape.max_position)
        if config.mode == "batch" and deployment.dp > 1:
            raise InputError("--dp spreads a workload's requests over replicas: use `load`, not `run`")
        kv_capacity = kv_capacity_of(config, num_slots, max_len)
        check_memory(shape, prec, profile, kv_capacity, layout)
        devices = layout.devices * deployment.dp
        device = f"simulated {profile.key}" + (f" x {devices}" if devices > 1 else "")
        source_text = (f"simulated on {profile.key} ({profile.name})"
                       + (f", {describe(deployment, layout)}" if devices > 1 else "")
                       + ": step times from a cost model, no weights loaded")
        weight_bytes = model_bytes(shape, prec)
        emit(ModelLoaded(config.model.name, device, profile.name, prec.name, source_text, False, shape.num_params(),
                         weight_bytes, kv_capacity * deployment.dp, shape, False, prec.weight_bits, prec.activation))
        clock = VirtualClock()

        def make_scheduler() -> Scheduler:
            return Scheduler(SchedulerConfig(policy=policy, max_batch=num_slots, kv_capacity=kv_capacity,
                                             max_len=max_len, chunk_tokens=config.engine.chunk_tokens))

        def make_runner() -> SimRunner:
            return SimRunner(shape, prec, profile, model, clock, layout)

        if deployment.dp > 1:
            engine = ReplicaSet(deployment.dp, make_scheduler, make_runner, deployment.router, recorder.run_id)
        else:
            engine = Engine(make_scheduler(), make_runner(), recorder.run_id, clock=clock.now, sleep=clock.advance)
        emit(Progress("simulating", None))
        wall_start = time.perf_counter()

        def info() -> RunInfo:
            virtual_s = engine.now_ms / 1000.0 if deployment.dp > 1 else clock.seconds
            return simulated_info(config, profile, shape, prec, model, device, source_text, kv_capacity=kv_capacity,
                                  kv_slots=num_slots, max_len=max_len, virtual_s=virtual_s,
                                  wall_s=time.perf_counter() - wall_start,
                                  replicas=deployment_info(deployment, layout, prec, devices))

        return drive(engine, source, recorder, should_stop, info,
                     costs=lambda summary: costs_of(summary, profile, layout.devices, layout.devices, devices))


def describe(deployment: Deployment, layout: Layout) -> str:
    """'tp 4, pp 2, dp 2 (least-loaded), over nvlink4': the layout in words."""
    parts = [f"tp {layout.tp}"] if layout.tp > 1 else []
    parts += [f"pp {layout.pp}"] if layout.pp > 1 else []
    parts += [f"ep {layout.ep}"] if layout.ep > 1 else []
    parts += [f"dp {deployment.dp} ({deployment.router})"] if deployment.dp > 1 else []
    text = ", ".join(parts) or "1 device"
    return text + (f", over {layout.link.name}" if layout.link is not None else "")


def costs_of(summary: Summary, profile: GpuProfile, prefill_devices: int, decode_devices: int,
             all_devices: int) -> tuple[dict, tuple[str, str] | None]:
    """(the summary's cost figures, (run.json's priced_on, price_source)) of a deployment; nothing
    for a profile without a price."""
    figures = deployment_costs(summary, profile, prefill_devices, decode_devices, all_devices)
    if not figures:
        return {}, None
    return figures, priced_text(profile, all_devices)


def deployment_costs(summary: Summary, profile: GpuProfile, prefill_devices: int, decode_devices: int,
                     all_devices: int) -> dict:
    """The cost figures of a deployment (empty for a profile without a price): a prefill step's time at the
    price of the devices that ran it, a decode step's likewise (a replica's tp x pp, a disaggregated pool's
    group), and the whole run's time at every device's price (the wall figure, idle replicas included)."""
    from backend.results.cost import cost_figures
    price = profile.price_per_hour
    if price is None:
        return {}
    figures = cost_figures(summary, price, prefill_devices)
    decode = cost_figures(summary, price, decode_devices)
    wall = cost_figures(summary, price, all_devices)
    figures.update(cost_decode_usd=decode["cost_decode_usd"], cost_per_m_output_usd=decode["cost_per_m_output_usd"],
                   cost_per_m_output_wall_usd=wall["cost_per_m_output_wall_usd"], price_per_hour=price * all_devices)
    return figures


def priced_text(profile: GpuProfile, devices: int) -> tuple[str, str]:
    """(what the price is for, its source) for run.json and the summary's cost line."""
    if devices == 1:
        return profile.name, profile.price_source
    return f"{devices} x {profile.name}", f"{devices} devices at ${profile.price_per_hour:g}/h each: {profile.price_source}"
