"""The local engine as a target: load (or reuse) the model, build the runner, the scheduler and
the engine loop, run the batch or the workload through them, summarize and write.

`run_local` is what `session.execute` dispatches a `run` or `load` to (the same signature as
every target: config, emit, should_stop).
"""
from __future__ import annotations

import random
from dataclasses import asdict
from typing import Callable

from backend.config import RunConfig, RunKind
from backend.errors import DoesNotFit, InputError
from backend.events import Emit, Progress, RunFinished
from backend.loaders.cache import ModelCache
from backend.results.recorder import RunRecorder
from backend.targets.engine_run import (drive, kv_capacity_of, library_versions, longest_sequence,
                                       validate, with_kv_settings)
from backend.run_info import LocalInfo, RunInfo, TargetKind, now_created


def run_local(config: RunConfig, emit: Emit, should_stop: Callable[[], bool], retain_records: bool = True,
              models: ModelCache | None = None) -> RunFinished:
    """`run` (one batch) or `load` (a workload through the scheduler) on the local engine."""
    validate(config)
    # a layout this engine cannot run fails before the model loads; run.json records the one it ran
    config = with_kv_settings(config)
    with RunRecorder(config, emit, retain_records) as recorder:   # a bad folder fails before the model loads
        return _execute(config, recorder, should_stop, models or ModelCache())


def _execute(config: RunConfig, recorder: RunRecorder, should_stop, models: ModelCache) -> RunFinished:
    from backend.engine.loop import Engine
    from backend.engine.kv_blocks import check_block_size
    from backend.engine.runner import PagedPool, build_runner
    from backend.engine.paged_scheduler import scheduler_for
    from backend.engine.scheduler import SchedulerConfig
    from backend.engine.warmup import warmup_steps

    emit = recorder.emit
    loaded, dev_name, reused = models.get(config, emit)
    shape = loaded.shape
    if config.mode == RunKind.BATCH:
        source = batch_source(config, loaded, emit)
        num_slots = config.batch.batch
        policy = "static"
        max_len = source.max_sequence_len
    else:
        source = workload_source(config, loaded)
        num_slots = config.engine.max_batch
        policy = config.engine.policy
        max_len = config.engine.max_len or longest_sequence(config.workload)
        max_len = min(max_len, shape.max_position)
        check_kv_fits(loaded, num_slots, max_len, largest_step(config, num_slots))
    kv_capacity = kv_capacity_of(config, num_slots, max_len)
    emit(loaded.loaded_event(dev_name, kv_capacity, reused))
    emit(Progress("warming up", None))
    steps = warmup_steps(policy, num_slots, max_len, config.engine.chunk_tokens, config.sampling.temperature,
                         shape.sliding_window)   # every step shape the run will time
    kv = config.engine   # its layout and prefix caching resolved once, by run_local's with_kv_settings
    check_block_size(kv.kv_block_size, shape.max_position)
    scheduler_config = SchedulerConfig(policy=policy, max_batch=num_slots, chunk_tokens=config.engine.chunk_tokens,
                                       kv_capacity=kv_capacity, max_len=max_len, kv_layout=kv.kv_layout,
                                       block_size=kv.kv_block_size, prefix_caching=kv.prefix_caching)
    paged = PagedPool(kv.kv_block_size, scheduler_config.num_blocks) if kv.kv_layout == "paged" else None
    if kv.prefix_caching:   # the workload's own ceiling beside the measured hit rate
        from backend.targets.engine_run import ceiling_figures
        recorder.accumulator.prefix_ideal = ceiling_figures(source, kv.kv_block_size, scheduler_config.num_blocks,
                                                            min(max_len, kv_capacity))
    runner = build_runner(loaded, num_slots, max_len, config.sampling, warmup=steps, paged=paged)
    scheduler = scheduler_for(scheduler_config)
    engine = Engine(scheduler, runner, recorder.run_id, tokenizer=loaded.tokenizer,
                    stop_ids=loaded.tokenizer.eos_ids, ignore_eos=config.sampling.ignore_eos)
    emit(Progress("running", None))
    from backend.roofline.profiles import run_profile
    from backend.results.matmul import unit_steps

    def info() -> RunInfo:   # after the run: which unit ran its steps
        done = run_info(loaded, dev_name, kv_capacity, max_len, num_slots)
        done.local.matmul_steps = unit_steps(loaded, recorder.step_rows)
        return done
    return drive(engine, source, recorder, should_stop, info, priced_on=run_profile(str(loaded.device), dev_name))


def run_info(loaded, dev_name: str, kv_capacity: int, max_len: int, num_slots: int) -> RunInfo:
    import torch
    from backend.loaders.device import dtype_name
    from backend.models.packed import kernels_in_use
    from backend.engine.threads import current_affinity
    from backend.results.matmul import matmul_info
    return RunInfo(target=TargetKind.LOCAL, model=loaded.name, source=loaded.source,
                   random_weights=loaded.random_weights, arch=loaded.shape.arch, num_params=loaded.shape.num_params(),
                   weight_bytes=loaded.weight_bytes, shape=asdict(loaded.shape), device=str(loaded.device),
                   device_name=dev_name, dtype=loaded.precision.name, weight_bits=loaded.precision.weight_bits,
                   activation_dtype=dtype_name(loaded.dtype), kv_capacity=kv_capacity, kv_slots=num_slots,
                   max_len=max_len, versions=library_versions(), created=now_created(),
                   local=LocalInfo(threads=torch.get_num_threads(), affinity=current_affinity(),
                                   kernels=kernels_in_use(loaded.device, loaded.dtype, loaded.precision),
                                   matmul=matmul_info(loaded)))



def check_kv_fits(loaded, num_slots: int, max_len: int, step_tokens: int) -> None:
    """Refuse, before allocating, a runner larger than the device's free memory: on CUDA everything
    the runner allocates and a headroom (backend/engine/memory_fit.py), elsewhere its KV cache."""
    from backend.engine.memory_fit import runner_memory, shortfall
    from backend.engine.runner import uses_cuda_graphs
    from backend.loaders.weights import free_memory
    device = loaded.device
    if device.type == "cuda":
        import gc
        gc.collect()   # a previous runner caught in a reference cycle holds its cache until collected
    need = runner_memory(loaded.shape, num_slots, max_len, loaded.dtype.itemsize, device.type,
                         uses_cuda_graphs(device, loaded.shape), step_tokens)
    free = free_memory(device)
    if shortfall(need, free):
        parts = f" ({need.describe()})" if need.total != need.kv else ""
        raise DoesNotFit(f"the KV cache for {num_slots:,} sequences of {max_len:,} tokens needs "
                         f"{need.total / 2**30:,.2f} GiB{parts}; {free / 2**30:,.2f} GiB is free on {device}: "
                         f"lower the batch size or the lengths")


def largest_step(config: RunConfig, num_slots: int) -> int:
    """The most tokens a step of this workload can carry: every slot's longest prompt at once, or the
    chunked policy's budget."""
    out = config.workload.output_len   # a conversation's last prompt holds its earlier turns: the longest sequence less one answer
    tokens = num_slots * (longest_sequence(config.workload) - (out.value if out.kind == "fixed" else out.high))
    return min(tokens, config.engine.chunk_tokens) if config.engine.policy == "chunked" else tokens


def batch_source(config: RunConfig, loaded, emit: Emit):
    """`run`: B requests arriving together, each the same text prompt or its own random tokens."""
    from backend.workload.arrivals import FixedSource, RequestSpec
    b = config.batch
    tok = loaded.tokenizer
    ids = None
    if b.prompt is not None:
        ids = tok.apply_chat_template(b.prompt) if b.chat else tok.encode(b.prompt)
        if not ids:
            raise InputError("the prompt encodes to no tokens")
        if tok.decode(tok.encode(b.prompt)).strip() != b.prompt.strip():
            emit(Progress(f"note: {loaded.name}'s tokenizer does not round-trip this prompt exactly "
                          f"(characters outside its vocabulary are replaced); the model sees the replaced text"))
    prompt_len = len(ids) if ids is not None else b.prompt_len
    limit = loaded.shape.max_position
    if prompt_len + b.output_len > limit:
        raise InputError(f"prompt of {prompt_len} tokens + {b.output_len} output tokens exceeds "
                         f"{loaded.name}'s context of {limit} tokens")
    check_kv_fits(loaded, b.batch, prompt_len + b.output_len, b.batch * prompt_len)   # one prefill of every prompt
    if ids is not None:
        prompts = [list(ids)] * b.batch
    else:
        rng = random.Random(config.sampling.seed)
        vocab = loaded.shape.vocab_size
        prompts = [[rng.randrange(vocab) for _ in range(b.prompt_len)] for _ in range(b.batch)]
    text = b.prompt or ""
    return FixedSource([RequestSpec(i, 0.0, p, text, b.output_len) for i, p in enumerate(prompts)])


def workload_source(config: RunConfig, loaded):
    """`load`: the workload's requests, drawn from its seed."""
    from backend.workload.arrivals import WorkloadSource
    tok = loaded.tokenizer
    return WorkloadSource(config.workload, tokenize=tok.encode, vocab_size=loaded.shape.vocab_size,
                          max_prompt_len=loaded.shape.max_position)
