"""What the targets that drive this project's engine loop share: the local engine
(backend/targets/local.py), the disaggregated pair (backend/targets/disaggregated/) and the simulator
(backend/sim/), each a target of its own that imports these and none of the others.

Before anything loads: the checks of the settings that need no model (`validate`, and for the
disaggregated policy, real or simulated, `validate_disaggregated`), the longest sequence a workload
can draw and the KV cache's size from it. At the end: `drive`, the engine loop over the requests
into the run's files, and the library versions run.json records.
"""
from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Callable

from backend.config import RunConfig, RunKind
from backend.engine.kv_blocks import check_block_size
from backend.engine.scheduler import KV_LAYOUTS, POLICIES
from backend.errors import InputError
from backend.events import RunFinished
from backend.results.recorder import RunRecorder
from backend.run_info import RunInfo
from backend.summary import Summary


def validate(config: RunConfig) -> None:
    """Checks that need no model; each failure is one line naming the setting."""
    def positive(name, value):
        if value is None or value <= 0:
            raise InputError(f"{name} must be a positive number, got {value}")
    b, e, s = config.batch, config.engine, config.sampling
    if config.mode == RunKind.BATCH:
        positive("--batch", b.batch)
        positive("--output-len", b.output_len)
        if b.prompt is None:
            positive("--prompt-len", b.prompt_len)
        elif not b.prompt.strip():
            raise InputError("--prompt is empty: give some text, or use --prompt-len N for synthetic tokens")
    positive("--max-batch", e.max_batch)
    positive("--chunk-tokens", e.chunk_tokens)
    if e.kv_tokens is not None:
        positive("--kv-tokens", e.kv_tokens)
    if e.policy not in POLICIES:
        raise InputError(f"unknown policy {e.policy!r}: use {', '.join(POLICIES[:-1])} or {POLICIES[-1]}")
    check_block_size(e.kv_block_size)   # against the model's context once the lengths are known (SchedulerConfig)
    if s.temperature < 0:
        raise InputError(f"--temperature must be 0 (greedy) or positive, got {s.temperature}")
    if not 0 < s.top_p <= 1:
        raise InputError(f"--top-p must be in (0, 1], got {s.top_p}")


def validate_disaggregated(config: RunConfig) -> None:
    """The disaggregated policy's own checks (its workers and transport), on the real pair or the simulated one."""
    e = config.engine
    if config.mode != RunKind.LOAD:
        raise InputError("the disaggregated policy runs `load` (a workload), not one batch")
    if config.endpoint is not None:
        raise InputError("--policy disaggregated runs engines here; it cannot be combined with --endpoint")
    for flag, value in (("--prefill-workers", e.prefill_workers), ("--decode-workers", e.decode_workers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{flag} must be a whole number of at least 1, got {value!r}")
    from backend.engine.kv_transfer import resolve_transport
    resolve_transport(e.kv_transport)


def shared_settings(config: RunConfig) -> RunConfig:
    """The config as `validate` checks it: the settings every policy shares (it knows the scheduler's only)."""
    from dataclasses import replace
    return replace(config, engine=replace(config.engine, policy="continuous"))


def longest_sequence(spec) -> int:
    """Prompt + output tokens of the longest request the workload can draw (sizes the cache slots)."""
    def upper(dist) -> int:
        return dist.value if dist.kind == "fixed" else dist.high
    turns = getattr(spec, "turns", 1)   # a conversation's last turn holds every earlier message and answer
    later = upper(spec.turn_len or spec.prompt_len) if turns > 1 else 0
    return upper(spec.prompt_len) + upper(spec.output_len) + (turns - 1) * (later + upper(spec.output_len))


@dataclass(slots=True, frozen=True)
class KVSettings:
    """The KV cache layout a run's scheduler uses (SchedulerConfig's kv_layout, block_size, prefix_caching)."""

    kv_layout: str
    block_size: int
    prefix_caching: bool


def kv_settings(config: RunConfig) -> KVSettings:
    """The engine config's layout, or the default: paged, with prefix caching (as vLLM), for every target
    that runs this engine: the local one, the simulator and the disaggregated workers (whose prefill
    workers keep the cache; a decode worker's KV arrives whole). One line for a combination that cannot run."""
    e = config.engine
    layout = e.kv_layout or "paged"
    if layout not in KV_LAYOUTS:
        raise InputError(f"--kv-layout: unknown layout '{layout}' (choose one of {', '.join(KV_LAYOUTS)})")
    caching = layout == "paged" if e.prefix_caching is None else bool(e.prefix_caching)
    if caching and layout != "paged":
        raise InputError("--prefix-caching on needs --kv-layout paged: cached prefixes are whole blocks")
    return KVSettings(layout, e.kv_block_size, caching)


def with_kv_settings(config: RunConfig) -> RunConfig:
    """The config with its KV layout resolved (kv_settings): what the targets run, and run.json records."""
    from dataclasses import replace
    kv = kv_settings(config)
    return replace(config, engine=replace(config.engine, kv_layout=kv.kv_layout, prefix_caching=kv.prefix_caching))


def kv_capacity_of(config: RunConfig, num_slots: int, max_len: int) -> int:
    """The KV cache's tokens: --kv-tokens, at most (and by default) every slot at full length. Paged, every slot
    at full length is a whole number of blocks (a sequence of max_len tokens ends in a partial block)."""
    full = num_slots * max_len
    if config.engine.kv_layout == "paged":
        bs = config.engine.kv_block_size
        full = num_slots * -(-max_len // bs) * bs
    return min(config.engine.kv_tokens or full, full)


def drive(engine, source, recorder: RunRecorder, should_stop: Callable[[], bool], info: Callable[[], RunInfo],
          priced_on=None, costs: Callable[[Summary], tuple[dict, tuple[str, str] | None]] | None = None) -> RunFinished:
    """Run the engine loop over the source to the end, every record batch into the recorder; then
    the run's files (info() is asked after the run). The local and the simulated targets both end
    this way. With a profile that has a price (`priced_on`, the device the steps ran or were priced
    on) the summary gains the cost per million tokens; `costs(summary)` gives (figures, (what the price
    is for, its source)) instead where the price is a deployment's (the simulator's many devices)."""
    from backend.results.cost import cost_figures
    result = engine.run(source, recorder.emit, should_stop)
    summary = recorder.summary()
    done = info()
    if costs is not None:
        figures, price = costs(summary)
        summary = summary.merged(figures)
        if price is not None:
            done.priced_on, done.price_source = price
    elif priced_on is not None and priced_on.price_per_hour is not None:
        summary = summary.merged(cost_figures(summary, priced_on.price_per_hour))
        done.priced_on, done.price_source = priced_on.name, priced_on.price_source
    return recorder.finish(done, result.stopped, result.error, summary)


def library_versions() -> dict:
    """The versions run.json records: this project's, Python's and the libraries' a run's figures depend on."""
    from importlib import metadata
    from backend import __version__
    versions = {"phasescope": __version__, "python": platform.python_version()}
    for package in ("torch", "numpy", "gguf", "tokenizers", "safetensors", "transformers"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def ceiling_figures(source, block_size: int, num_blocks: int | None, max_len: int | None = None,
                    prefill_only: bool = False) -> dict[str, float]:
    """The summary's prefix_ideal_* figures for a WorkloadSource (backend/results/prefix_ceiling.py says
    what they mean), leaving out requests longer than max_len (the engine's sequence limit); {} for any
    other source: a fixed batch has no workload to replay. prefill_only: the cache of a disaggregated
    prefill worker, which computes each prompt but its last token and never sees an answer. Here, above the
    engine's layers, because backend.results sits below them."""
    if not hasattr(source, "prompts_and_outputs"):
        return {}
    from backend.engine.kv_blocks import theoretical_hit_rate
    prompts, outputs = source.prompts_and_outputs()
    if max_len is not None:   # the scheduler rejects these: they compute nothing and count in no measured rate
        kept = [(p, o) for p, o in zip(prompts, outputs) if len(p) + len(o) <= max_len]
        prompts, outputs = [p for p, _ in kept], [o for _, o in kept]
    if prefill_only:
        prompts, outputs = [p[:-1] for p in prompts], None
    if not prompts:
        return {}
    out: dict[str, float] = {"prefix_ideal_block_size": block_size,
                             "prefix_ideal_hit_rate": theoretical_hit_rate(prompts, block_size, None, outputs).tokens}
    if num_blocks:
        out["prefix_ideal_num_blocks"] = num_blocks
        out["prefix_ideal_sized_hit_rate"] = theoretical_hit_rate(prompts, block_size, num_blocks, outputs).tokens
    return out
