"""The simulated target: the real scheduler, workload, KV capacity and preemption, with each step's
time priced by a cost model instead of measured from a forward pass, on a virtual clock.

`run_simulated` has the signature of every target (config, emit, should_stop) and emits the same
events and records as `run_local`, so the summary, the files and the views work unchanged. No
weights are loaded: the model name must be a known shape (backend.models.shapes.SHAPES), and
every sampled token is one fixed id, so a request ends only at its output length.

The virtual clock starts at 0; the runner advances it by each step's price and the engine's idle
`sleep` advances it to the next arrival, so 1,000 requests of a GPU's workload run in seconds of
this machine's time while every time in the records is the simulated device's.

config.deployment spreads the model over devices (backend/sim/parallel.py prices a replica of
tp x pp devices; `dp` replicas run behind a router, backend/sim/replicas.py); run.json records the
layout, and the memory check is each device's.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

from backend.config import Deployment, RunConfig, RunKind
from backend.errors import InputError
from backend.events import Emit, ModelLoaded, Progress, RunFinished
from backend.roofline.profiles import find_profile
from backend.run_info import RunInfo
from backend.sim import bands, parallel
from backend.sim.fitted import priced_profile, simulated_dtype, simulated_math
from backend.sim.info import costs_of, deployment_info, simulated_info
from backend.sim.model import check_memory, model_bytes, resolve_model, resolve_precision
from backend.sim.parallel import Layout
from backend.sim.runner import SIM_TOKEN, SimRunner, VirtualClock, sim_vocab
from backend.sim.step_time import CostModel


def run_simulated(config: RunConfig, emit: Emit, should_stop: Callable[[], bool], retain_records: bool = True,
                  cost_model: CostModel | None = None) -> RunFinished:
    """`run` (one batch) or `load` (a workload) with every step priced on config.profile."""
    from backend.targets.engine_run import (drive, kv_capacity_of, kv_settings, longest_sequence, validate,
                                           with_kv_settings)
    from backend.sim.replicas import ReplicaSet
    from backend.engine.loop import Engine
    from backend.engine.paged_scheduler import scheduler_for
    from backend.engine.scheduler import Scheduler, SchedulerConfig
    from backend.results.recorder import RunRecorder
    from backend.workload.arrivals import FixedSource, RequestSpec, WorkloadSource

    if not config.profile:
        raise InputError("--simulate needs --profile NAME (see `profiles`), the device whose steps are priced")
    if config.endpoint is not None:
        raise InputError("--simulate prices a local engine's steps; it cannot be combined with --endpoint")
    if config.mode not in (RunKind.BATCH, RunKind.LOAD):
        raise InputError(f"--simulate runs `run` and `load`, not {config.mode}")
    validate(config)
    if config.mode == RunKind.BATCH and config.batch.prompt is not None:
        raise InputError("--simulate needs synthetic prompts (--prompt-len N), not --prompt text: it has no tokenizer")
    # a fitted profile prices as its runs ran: their roofs, their precision at --dtype auto, their matrix unit
    profile = priced_profile(find_profile(config.profile))
    math = simulated_math(profile)
    shape = resolve_model(config.model.name)
    deployment = config.deployment
    parallel.validate(deployment, shape, config.model.name)
    prec = resolve_precision(simulated_dtype(profile, config.model.name, config.model.dtype), profile,
                             deployment.kv_dtype)
    model = cost_model or CostModel.for_profile(profile, prec, deployment.engine)
    model.validate()
    layout = Layout.of(deployment, profile)
    kv = kv_settings(config)
    config = with_kv_settings(config)   # run.json records the layout the run used
    with RunRecorder(config, emit, retain_records) as recorder:
        emit = recorder.emit
        if config.mode == RunKind.BATCH:
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
            source = WorkloadSource(spec, tokenize=None, vocab_size=sim_vocab(shape, kv.prefix_caching),
                                    max_prompt_len=shape.max_position)
            num_slots, policy = config.engine.max_batch, config.engine.policy
            max_len = min(config.engine.max_len or longest_sequence(config.workload), shape.max_position)
        if config.mode == RunKind.BATCH and deployment.dp > 1:
            raise InputError("--dp spreads a workload's requests over replicas: use `load`, not `run`")
        kv_capacity = kv_capacity_of(config, num_slots, max_len)
        check_memory(shape, prec, profile, kv_capacity, layout)
        devices = layout.devices * deployment.dp
        device = f"simulated {profile.key}" + (f" x {devices}" if devices > 1 else "")
        source_text = (f"simulated on {profile.key} ({profile.name})"
                       + (f", {describe(deployment, layout)}" if devices > 1 else "")
                       + ": step times from a cost model, no weights loaded"
                       + (f"; products of {math.min_rows}+ rows in bfloat16 on {math.unit}, as the fitted runs"
                          if math is not None and math.bf16 else ""))
        sim_spec = None
        if config.spec.is_on:   # how the guesses are priced, said where the run says what priced it
            from backend.sim.spec import describe as describe_spec, sim_spec_of
            sim_spec = sim_spec_of(config.spec, config.sampling.seed)
            source_text += f"; {describe_spec(config.spec, sim_spec)}"
        weight_bytes = model_bytes(shape, prec)
        emit(ModelLoaded(config.model.name, device, profile.name, prec.name, source_text, False, shape.num_params(),
                         weight_bytes, kv_capacity * deployment.dp, shape, False, prec.weight_bits, prec.activation))
        clock = VirtualClock()

        def make_scheduler() -> Scheduler:
            return scheduler_for(SchedulerConfig(policy=policy, max_batch=num_slots, kv_capacity=kv_capacity,
                                                 max_len=max_len, chunk_tokens=config.engine.chunk_tokens,
                                                 kv_layout=kv.kv_layout, block_size=kv.block_size,
                                                 prefix_caching=kv.prefix_caching))

        def make_runner() -> SimRunner:
            return SimRunner(shape, prec, profile, model, clock, layout, math)

        if kv.prefix_caching:   # the workload's own ceiling beside the measured hit rate (one replica's pool)
            from backend.targets.engine_run import ceiling_figures
            num_blocks = make_scheduler().config.num_blocks
            recorder.accumulator.prefix_ideal = ceiling_figures(source, kv.block_size, num_blocks,
                                                                min(max_len, kv_capacity))
        speculator = make_speculator = None
        if config.spec.is_on:
            from backend.sim.spec import build_sim_speculator

            def make_speculator(runner: SimRunner, index: int = 0):
                # each replica draws its kept guesses from its own stream (seed + its index)
                return build_sim_speculator(config, replace(sim_spec, seed=sim_spec.seed + index), runner, shape,
                                            profile, model, layout, math)
        if deployment.dp > 1:
            # a replica's runner has a clock of its own, which only its proposer's guessing moves (ReplicaSet
            # times the steps): the guesses' priced time
            engine = ReplicaSet(deployment.dp, make_scheduler,
                                lambda: SimRunner(shape, prec, profile, model, VirtualClock(), layout, math),
                                deployment.router, recorder.run_id, make_speculator=make_speculator)
        else:
            runner = make_runner()
            if make_speculator is not None:
                speculator = make_speculator(runner)
            engine = Engine(make_scheduler(), runner, recorder.run_id, clock=clock.now, sleep=clock.advance,
                            speculator=speculator)
        emit(Progress("simulating", None))
        wall_start = time.perf_counter()

        def info() -> RunInfo:
            virtual_s = engine.now_ms / 1000.0 if deployment.dp > 1 else clock.seconds
            return simulated_info(config, profile, shape, prec, model, device, source_text, kv_capacity=kv_capacity,
                                  kv_slots=num_slots, max_len=max_len, virtual_s=virtual_s,
                                  wall_s=time.perf_counter() - wall_start,
                                  replicas=deployment_info(deployment, layout, prec, devices))

        setup = bands.setup_regimes(getattr(shape, "num_experts", 0) > 0, layout.tp, prec.weight_bits)

        def figures(summary):   # the cost at the profile's price, then every simulated figure's band (cost's too)
            costs, price = costs_of(summary, profile, layout.devices, layout.devices, devices)
            return {**costs, **bands.summary_bands(summary.merged(costs), setup,
                                                   requests=recorder.accumulator.requests)}, price

        return drive(engine, source, recorder, should_stop, info, costs=figures)


def describe(deployment: Deployment, layout: Layout) -> str:
    """'tp 4, pp 2, dp 2 (least-loaded), over nvlink4': the layout in words."""
    parts = [f"tp {layout.tp}"] if layout.tp > 1 else []
    parts += [f"pp {layout.pp}"] if layout.pp > 1 else []
    parts += [f"ep {layout.ep}"] if layout.ep > 1 else []
    parts += [f"dp {deployment.dp} ({deployment.router})"] if deployment.dp > 1 else []
    text = ", ".join(parts) or "1 device"
    return text + (f", over {layout.link.name}" if layout.link is not None else "")


