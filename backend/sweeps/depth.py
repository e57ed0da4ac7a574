"""`sweep depth`: prefill and decode tokens/s at each context depth, llama-bench's `-d` for any target.

llama-bench's `-d` (`--n-depth`; asked for servers in llama.cpp issue #13671) at depth d first fills the
context with d tokens, untimed, then times pp more tokens of prefill (pp tokens/s) and, separately,
tg decode steps (tg tokens/s), each starting at depth d. A server cannot be told to keep a context
without its prefix cache, which is exactly what must not serve the timed tokens, so here each
repetition at depth d is a pair of requests, each prompt unique from its first token on
(backend/sweeps/depth_probes.py), sent one at a time:

- A: NONCE_LEN + d tokens, then tg + 1 output tokens (ignore EOS): its tg decode gaps are the decode
  at depth d (decode tokens/s = tg / (last token - first token)); its TTFT is the prefill of d tokens;
- B: NONCE_LEN + d + pp tokens, one output token: its TTFT less A's is the time the pp tokens took
  on top of the d before them, the network and the server's own overhead cancelling out.

prefill tokens/s = pp / median over pairs of (TTFT_B - TTFT_A); decode tokens/s = the median over
the A requests. The pairs alternate A B, B A, so a drift over the sweep cancels rather than tilts. The engine (local, or --simulate) runs the same pairs, timed by its own steps: each
request one `run` with a fresh KV cache. A warm-up pair, untimed, goes first. The server's
prefix-cache counters (vLLM, SGLang /metrics) are read before and after, and each answer's cached
tokens kept (llama.cpp's timings.cache_n, OpenAI's cached_tokens): any hit is warned of in one line.
"""
from __future__ import annotations

import math
import secrets
import statistics
from dataclasses import replace
from typing import Callable

from backend.config import RunConfig, SweepKind, config_dict, safe_url
from backend.errors import InputError, RunError
from backend.events import DepthPoint, Emit, Progress, RunFinished, Target
from backend.records import RunData, new_run_id
from backend.results.export import ensure_writable
from backend.run_info import RemoteInfo, RunInfo, SweepInfo, TargetKind, now_created
from backend.summary import Summary
from backend.sweeps.depth_probes import NONCE_LEN, EngineProbe, Probe, ServerProbe, Stopped
from backend.sweeps.points import write_points


def check_spec(config: RunConfig) -> None:
    """One line for settings the sweep cannot run."""
    spec = config.sweep_spec
    if not spec.depths or any(d < 0 for d in spec.depths):
        raise InputError(f"--depths needs whole numbers of 0 or more, got {spec.depths}")
    for flag, value in (("--prompt-len", spec.prompt_len), ("--output-len", spec.output_len), ("--steps", spec.steps)):
        if value < 1:
            raise InputError(f"{flag} must be positive, got {value}")
    if config.endpoint is not None and config.endpoint.api == "chat":
        raise InputError("sweep depth sends token ids to /v1/completions, so each prompt's length and unique start "
                         "are exact: drop --api chat")


def check_context(spec, context: int | None, model: str) -> None:
    """The deepest request must fit the model's context (known once the engine has loaded it)."""
    if context is None:
        return
    deepest = max(spec.depths)
    need = NONCE_LEN + deepest + max(spec.prompt_len, spec.output_len) + 1
    if need > context:
        raise InputError(f"--depths {deepest}: with the {NONCE_LEN}-token unique prefix, {spec.prompt_len} prompt "
                         f"and {spec.output_len} output tokens that is {need:,} tokens, beyond {model}'s context of "
                         f"{context:,}")


def point(depth: int, spec, pairs: list[tuple[Probe, Probe]]) -> DepthPoint:
    nan = math.nan
    diffs = [b.ttft_ms - a.ttft_ms for a, b in pairs]
    prefill_ms = statistics.median(diffs) if diffs else nan
    decoded = [a for a, _ in pairs if a.decode_tokens > 0 and a.decode_ms > 0]
    tpot = statistics.median(a.decode_ms / a.decode_tokens for a in decoded) if decoded else nan
    decode = statistics.median(a.decode_tokens / a.decode_ms * 1000.0 for a in decoded) if decoded else nan
    known = [p.cached_tokens for pair in pairs for p in pair if p.cached_tokens is not None]
    return DepthPoint(depth, spec.prompt_len, spec.output_len, len(pairs),
                      spec.prompt_len / prefill_ms * 1000.0 if prefill_ms > 0 else nan, decode, prefill_ms,
                      statistics.median(a.ttft_ms for a, _ in pairs) if pairs else nan,
                      statistics.median(b.ttft_ms for _, b in pairs) if pairs else nan, tpot,
                      sum(known) if known else None)


def run_depth_sweep(config: RunConfig, emit: Emit, should_stop: Callable[[], bool],
                    target: Target | None = None) -> RunFinished:
    """Every depth of config.sweep: against config.endpoint, else through `target` (a `run`'s)."""
    check_spec(config)
    spec = config.sweep_spec
    out = ensure_writable(config.out_dir) if config.out_dir else None
    seed = secrets.randbits(31)   # a new one each sweep: a second sweep against the same server shares nothing
    remote = config.endpoint is not None
    probe = ServerProbe(config, seed) if remote else EngineProbe(config, target, emit, should_stop, seed)
    points: list[DepthPoint] = []
    requests: list[Probe] = []
    note, error = "", None
    before = probe.counters() if remote and config.endpoint.read_metrics else None
    try:
        emit(Progress("sweep depth: warming up", 0.0))
        probe.measure(NONCE_LEN + spec.prompt_len, 2)   # untimed: loads the model, opens the connection
        check_context(spec, probe.context, config.model.name)
        for i, depth in enumerate(spec.depths):
            pairs = []
            for r in range(spec.steps):
                if should_stop():
                    raise Stopped
                emit(Progress(f"sweep depth: {depth} (repetition {r + 1} of {spec.steps})",
                              (i + r / spec.steps) / len(spec.depths)))
                try:   # A B, then B A: a machine or server slowing over the pairs tilts neither way
                    first_a = r % 2 == 0
                    one = probe.measure(NONCE_LEN + depth + (0 if first_a else spec.prompt_len),
                                        spec.output_len + 1 if first_a else 1)
                    two = probe.measure(NONCE_LEN + depth + (spec.prompt_len if first_a else 0),
                                        1 if first_a else spec.output_len + 1)
                    a, b = (one, two) if first_a else (two, one)
                except RunError as exc:
                    raise RunError(f"at depth {depth}: {exc}") from None
                pairs.append((a, b))
                requests += [a, b]
            p = point(depth, spec, pairs)
            points.append(p)
            emit(p)
    except Stopped:
        note = "stopped by user"
    except RunError as exc:
        error = str(exc)
    finally:
        after = probe.counters() if remote and config.endpoint.read_metrics else None
        if remote:
            probe.close()
    emit(Progress("sweep depth done", 1.0))
    stopped = note == "stopped by user"
    unmeasured = [f"{p.depth:,}" for p in points if not p.prefill_tokens_per_s == p.prefill_tokens_per_s]
    if unmeasured:   # noise larger than the pp tokens' cost: said, never shown as an infinite or negative rate
        note = "; ".join(filter(None, [note, f"no prefill figure at depth {', '.join(unmeasured)}: TTFT with the "
                                            "prompt was not longer than without it (noise beyond the pp tokens' "
                                            "cost: more --steps, or a longer --prompt-len)"]))
    summary = depth_summary(points, requests, before, after, note)
    info = depth_info(config, probe, before, after, seed)
    data = RunData(new_run_id(), config_dict(config), info, [], [], [], summary)
    if remote:
        data.config["remote"] = {"url": safe_url(config.endpoint.url), "model": config.endpoint.model,
                                 "api": "completions"}
    if out is not None:
        write_points(out, SweepKind.DEPTH, points, data)
    return RunFinished(data.run_id, summary, stopped, error, data)


def depth_summary(points: list[DepthPoint], requests: list[Probe], before, after, note: str) -> Summary:
    summary = Summary(kind=SweepKind.DEPTH.value, num_points=len(points), note=note)
    known = [p.cached_tokens for p in requests if p.cached_tokens is not None]
    if known:
        summary.client_cached_requests = len(known)
        summary.client_cached_prompt_tokens = sum(known)
    if before is not None and after is not None:
        gained = {k: after[1].get(k, 0.0) - before[1].get(k, 0.0) for k in ("prefix_queries", "prefix_hits")}
        summary.server_prefix_queries = gained["prefix_queries"]
        summary.server_prefix_hits = gained["prefix_hits"]
    return summary


def depth_info(config: RunConfig, probe, before, after, seed: int) -> RunInfo:
    if config.endpoint is not None:
        e = config.endpoint
        metrics = {"engine": before[0], "before": before[1], "after": after[1]} \
            if before is not None and after is not None else {}
        info = RunInfo(target=TargetKind.REMOTE, model=e.model, device="remote", created=now_created(),
                       remote=RemoteInfo(endpoint=safe_url(e.url), served_model=e.model, api="completions",
                                         server_metrics=metrics))
    else:
        last = probe.info or RunInfo(model=config.model.name, device=config.model.device)
        info = replace(last, kv_capacity=None, kv_slots=None, max_len=None, wall_s=None, created=now_created())
    info.sweep = SweepInfo(nonce_seed=seed)
    return info


def cache_line(summary: Summary, info: RunInfo) -> str:
    """One line: whether any prompt token of the sweep came from a prefix cache, and who says so."""
    remote = info.target is TargetKind.REMOTE
    metrics = (info.remote.server_metrics or {}) if info.remote else {}
    hits = summary.server_prefix_hits or 0
    cached = summary.client_cached_prompt_tokens or 0
    says = []
    if summary.server_prefix_queries is not None:
        says.append(f"server /metrics ({metrics.get('engine', '?')}): {hits:,.0f} of "
                    f"{summary.server_prefix_queries:,.0f} prompt tokens hit over the sweep")
    elif remote:
        says.append("server /metrics: no prefix-cache counters")
    if summary.client_cached_requests is not None:
        says.append(f"{'answers' if remote else 'engine records'}: {cached:,} cached prompt tokens in "
                    f"{summary.client_cached_requests} requests")
    else:
        says.append("the answers reported no cached tokens" if remote else "the engine recorded no prefix cache")
    if hits > 0 or cached > 0:
        return ("WARNING: a prefix cache served part of the prompts (another client sharing the server, or a "
                "cache keyed on more than the prefix): the prefill figures are too fast; " + "; ".join(says))
    return "prefix cache: no hits (" + "; ".join(says) + ")"

