"""`load --endpoint`: the same workloads sent to an OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp).

The server's engine steps are invisible from outside, so a remote run has request and token
records only, timed on this machine's clock: sent, first token, every later token, end. The
coordinator (backend.targets.remote.coordinator, an asyncio loop on a helper thread) draws the workload's arrivals and builds each
prompt to its true length; the streams themselves run in client worker processes
(backend.targets.remote.worker: one event loop and one connection pool each, `--client-workers N`,
default one per core), whose records come back as one merged stream. The calling thread
receives the events, so a slow `emit` never delays the clock readings. At the end the run says
what it knows about its own figures (backend.targets.remote.honesty).
"""
from __future__ import annotations

import argparse
import os
import platform
from collections import Counter
from dataclasses import replace
from typing import Callable
from urllib.parse import urlsplit

import httptools
import httpx

from backend.config import APIS, RemoteEndpoint, RunConfig, safe_url
from backend.errors import InputError
from backend.events import Emit, Progress, RunFinished
from backend.results.export import RunWriter
from backend.records import RequestStatus, RunData
from backend.run_info import RemoteInfo, RunInfo, TargetKind, now_created
from backend.targets.remote.honesty import client_report, early_stop_line, token_count_lines
from backend.targets.remote.pool import default_workers
from backend.targets.remote.coordinator import RESERVE, RemoteRun
from backend.targets.remote.prompts import SYNTHETIC_FIRST_ID, SYNTHETIC_VOCAB, PromptBuilder, load_tokenizer

def add_remote_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("remote target (an OpenAI-compatible server instead of the local engine)")
    g.add_argument("--endpoint", help="base URL of the server's OpenAI API, e.g. http://127.0.0.1:8000/v1")
    g.add_argument("--served-model", help="model name the server serves (its GET /v1/models)")
    g.add_argument("--api-key", help="bearer token; better given as PHASESCOPE_API_KEY or OPENAI_API_KEY "
                   "(a flag shows in the process list). Never written to any file")
    g.add_argument("--api", choices=APIS, default="completions", help="/v1/completions or /v1/chat/completions")
    g.add_argument("--request-timeout", type=float, default=120.0, metavar="S",
                   help="seconds to wait to connect or for the next streamed event")
    g.add_argument("--no-server-metrics", action="store_true", help="do not poll the server's /metrics")
    g.add_argument("--tokenizer", metavar="GGUF|FOLDER|HUB_ID",
                   help="the served model's tokenizer, so text prompts are exactly --prompt-len tokens and counts "
                   "are true (default: the bundled one when the served model is SmolLM2, else estimates)")
    g.add_argument("--client-workers", type=int, metavar="N",
                   help=f"client processes sharing the streams, one event loop each (default: one per core, "
                   f"{default_workers()} here; with --ray, one per CPU of the cluster)")
    g.add_argument("--ray", metavar="HOST:PORT",
                   help="run the client workers as actors on this running Ray cluster (pip install "
                   "'phasescope[ray]'), when this host's cores cannot hold the streams")


def env_api_key() -> str:
    """The API key from the environment: PHASESCOPE_API_KEY, else OPENAI_API_KEY ("" for none)."""
    return (os.environ.get("PHASESCOPE_API_KEY") or os.environ.get("OPENAI_API_KEY") or "").strip()


def endpoint_from_args(args) -> RemoteEndpoint | None:
    """The endpoint the flags name, or None for a local run; InputError for bad flags."""
    if args.endpoint is None:
        for flag in ("served_model", "api_key", "tokenizer", "client_workers", "ray"):
            if getattr(args, flag) is not None:
                raise InputError(f"--{flag.replace('_', '-')} needs --endpoint URL")
        return None
    if not args.served_model:
        raise InputError("--endpoint needs --served-model NAME (the name the server serves, see GET <endpoint>/models)")
    url = args.endpoint.rstrip("/")
    if urlsplit(url).path == "":
        url += "/v1"   # a bare host:port means the usual /v1 root
    key = (args.api_key or env_api_key()).strip() or None   # a key read from a file often ends in a newline
    endpoint = RemoteEndpoint(url, args.served_model, key, args.api, args.request_timeout,
                              not args.no_server_metrics, args.tokenizer, args.client_workers, args.ray)
    endpoint.validate()
    return endpoint


def run_remote(config: RunConfig, emit: Emit, should_stop: Callable[[], bool]) -> RunFinished:
    """Send `config.workload` to `config.endpoint`, emitting events as for a local run; InputError for bad settings."""
    from backend.workload.spec import validate_workload
    endpoint = config.endpoint
    endpoint.validate()
    if config.workload is None:
        raise InputError("a remote run needs a workload (--workload NAME|PATH)")
    spec = validate_workload(config.workload)
    if endpoint.api == "chat" and spec.prompt_source != "text":
        raise InputError("--api chat sends text: use a workload with prompt_source = \"text\", or --api completions "
                         "(synthetic token ids go to /v1/completions)")
    tokenizer = None
    if spec.prompt_source == "text" or endpoint.tokenizer or spec.is_conversation:   # a token-id turn appends its answer's ids
        if endpoint.tokenizer or "smollm2" in endpoint.model.lower():
            emit(Progress("loading the served model's tokenizer", None))
        tokenizer = load_tokenizer(endpoint.tokenizer, endpoint.model)
    builder = PromptBuilder(tokenizer, chat=endpoint.api == "chat")
    if endpoint.ray_address:
        from backend.targets.remote import ray_pool
        emit(Progress(f"joining the Ray cluster at {endpoint.ray_address}", None))
        ray_pool.connect(endpoint.ray_address)
        try:
            cpus = ray_pool.cluster_cpus()
            if (endpoint.client_workers or 0) > cpus:
                raise InputError(f"--client-workers {endpoint.client_workers}: the Ray cluster at "
                                 f"{endpoint.ray_address} has {cpus} CPUs, one for each worker")
            return _run(config, emit, should_stop, spec, builder, endpoint.client_workers or cpus)
        finally:
            ray_pool.disconnect()
    _freeze_heap()
    return _run(config, emit, should_stop, spec, builder, endpoint.client_workers or default_workers())


def _freeze_heap() -> None:
    """What this process holds before the run (its imports, a window's or an earlier run's objects) leaves the
    cyclic collector's sight, as backend.loaders.cache does after a model load. The coordinator shares the cores
    with the client workers: on a 2-core machine, with one worker on the other core, its full collections walked
    the earlier runs' records in the same process and held that core for tens of ms, late enough to stretch a
    256-stream closed loop's ITL p99 past twice the server's (bench.closed_loop_flag run after a 1 ms one).
    Where the automatic collector is off (a window's thread collects, gui/collector.py) nothing is touched."""
    import gc
    if gc.isenabled():
        gc.collect()
        gc.freeze()


def _run(config: RunConfig, emit: Emit, should_stop: Callable[[], bool], spec, builder: PromptBuilder,
         num_workers: int) -> RunFinished:
    from backend.results.summary import summarize
    from backend.results.definitions import differences
    from backend.targets.remote.prefix_cache import client_figures
    from backend.config import config_dict
    from backend.records import new_run_id
    from backend.workload.arrivals import WorkloadSource, closed_loop_ramp_ms
    endpoint = config.endpoint
    drawn = spec
    # a conversation's next turn needs its answer, so the source plans every arrival (a closed loop's
    # users too) and the workers send each at its time; otherwise a closed loop's workers hold their
    # users' next requests in reserve (see RemoteRun)
    users = spec.concurrency if spec.arrival == "closed" and not spec.is_conversation else None
    if users is not None:
        drawn = replace(spec, concurrency=spec.concurrency + RESERVE * min(num_workers, spec.concurrency))
    source = WorkloadSource(drawn, tokenize=builder.content_ids, vocab_size=SYNTHETIC_VOCAB - SYNTHETIC_FIRST_ID)
    writer = RunWriter(config.out_dir) if config.out_dir else None
    run = RemoteRun(new_run_id(), endpoint, config.sampling, source, builder, num_workers,
                     synthetic=spec.prompt_source != "text",
                     users=users, ramp_ms=closed_loop_ramp_ms(spec) if users is not None else 0.0,
                     think_ms=spec.think_ms, turns=spec.turns)
    if writer is not None:
        run.server.write_to(writer.folder)   # appended as the readings come: a crash keeps them
    try:
        where = f" on the Ray cluster at {endpoint.ray_address}" if endpoint.ray_address else ""
        emit(Progress(f"sending {spec.name} to {safe_url(endpoint.url)} ({endpoint.model}) from {num_workers} "
                      f"client worker{'s' * (num_workers > 1)}{where}", None))
        run.start()
        run.pump(emit, writer, should_stop)
        summary = summarize([], run.requests, run.tokens, config.slo_ttft_ms, config.slo_tpot_ms)
        summary.errors = dict(sorted(run.errors.items()))
        summary = summary.merged(run.server.summary())
        summary = summary.merged(client_figures(run.requests))   # beside the server's: the answers' own counts
        if spec.is_conversation or spec.shared_prefix_len or spec.trace is not None:   # prompts that can share
            from backend.targets.engine_run import ceiling_figures   # the server's pool is unknown: infinite only
            # the workload as asked (not `drawn`, whose reserve users never all send)
            asked = WorkloadSource(spec, tokenize=builder.content_ids, vocab_size=SYNTHETIC_VOCAB - SYNTHETIC_FIRST_ID)
            summary = summary.merged(ceiling_figures(asked, config.engine.kv_block_size, None))
        load = run.client_load()
        load.itl_p50_ms = float("nan") if summary.itl_p50_ms is None else summary.itl_p50_ms   # against its own gaps
        figures, client_info, warnings = client_report(load)
        summary = summary.merged(figures)
        finished = [r for r in run.requests if r.status is RequestStatus.FINISHED]
        prompt_estimates = sum(r.prompt_tokens_source == "estimate" for r in finished)
        output_estimates = sum(r.output_tokens_source == "estimate" for r in finished)
        summary.num_stopped_early = run.num_early
        summary.num_prompt_tokens_estimated = prompt_estimates
        summary.num_output_tokens_estimated = output_estimates
        warnings += token_count_lines(len(finished), prompt_estimates, output_estimates)
        warnings += early_stop_line(run.num_early, len(finished), run.early_reasons)
        warnings += [f"definitions: {line}" for line in differences(summary)]   # streams that bend the figures
        warnings += run.lost   # "client worker 1 on HOST was lost: ...": its requests failed with that reason
        if run.server.error:
            warnings.append(run.server.error)
        cfg = config_dict(config)
        cfg["remote"] = {"url": safe_url(endpoint.url), "model": endpoint.model, "api": endpoint.api,
                         "timeout_s": endpoint.timeout_s, "read_metrics": endpoint.read_metrics,
                         "tokenizer": endpoint.tokenizer, "client_workers": num_workers, "ray": endpoint.ray_address}
        info = _info(endpoint, run)
        remote = info.remote
        remote.client, remote.warnings, remote.tokenizer = client_info, warnings, builder.name
        remote.connections_opened = client_info["connections_opened"]
        remote.token_counts = {"prompt": dict(Counter(r.prompt_tokens_source for r in finished)),
                               "output": dict(Counter(r.output_tokens_source for r in finished))}
        if endpoint.ray_address:   # each actor's clock against the coordinator's, and whether it was lost
            remote.ray = {"address": endpoint.ray_address, "workers": getattr(run.pool, "clocks", [])}
        data = RunData(run_id=run.run_id, config=cfg, info=info, requests=run.requests, tokens=run.tokens,
                       summary=summary)
        run.server.close()
        if writer is not None:
            writer.close(data)
        return RunFinished(run.run_id, summary, run.stopped, run.error_message(), data)
    finally:
        run.server.close()
        if writer is not None:
            writer.abandon()


def _info(endpoint: RemoteEndpoint, run: RemoteRun) -> RunInfo:
    from backend import __version__
    return RunInfo(target=TargetKind.REMOTE, model=endpoint.model, device="remote",
                   versions={"phasescope": __version__, "python": platform.python_version(),
                             "httpx": httpx.__version__, "httptools": httptools.__version__},
                   created=now_created(),
                   remote=RemoteInfo(endpoint=safe_url(endpoint.url), served_model=endpoint.model, api=endpoint.api,
                                     server_metrics=run.server.info(),   # {} when the server published none
                                     note="server engine steps are not visible from outside: steps.csv is empty, "
                                          "queue_ms is 0"))
