"""The server's own view of its load, read from its Prometheus `/metrics` while a remote run goes.

vLLM, SGLang, TGI and llama.cpp publish the same few quantities under names of their own
(`SERIES`): how many requests run and wait, how full the KV cache is, and histograms of what each
request spent in prefill, in decode, to its first token and between tokens; vLLM and SGLang also
count the prompt tokens their prefix cache was asked for and found (`COUNTERS`; vLLM also its
speculative verifications, guesses and kept guesses, per draft position), and SGLang keeps a hit-rate
gauge and a speculative accept-length gauge (llama.cpp's /metrics has no cache figure: its responses carry their own, read by
the client). A reading keeps the gauges as they are and the histograms and counters as the
server's cumulative counts; backend.targets.remote.server_log turns a run's readings into its CSV
and its summary (a counter's figure is its value at the end less its value at the start). A server that serves none of
these (or answers 404) simply has no metrics, and sampling stops quietly.
"""
from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Callable

import httpx

SPEC_POSITIONS = 16   # draft positions whose acceptance counters are read (vLLM's `position` label)
POLL_S = 0.25   # 4 readings a second: a step of a busy server's queue shows, the coordinator hardly notices

# quantity -> [(metric name, required labels)] in order of preference, per engine. Gauges with several
# label sets (one per engine core or data-parallel rank) are combined; histograms add their buckets.
Series = list[tuple[str, dict[str, str]]]
SERIES: dict[str, dict[str, Series]] = {
    "vllm": {
        "running": [("vllm:num_requests_running", {})],
        "waiting": [("vllm:num_requests_waiting", {})],
        # a fraction in 0..1 despite the "perc" suffix; gpu_cache_usage_perc is the name before v0.10
        "kv_usage": [("vllm:kv_cache_usage_perc", {}), ("vllm:gpu_cache_usage_perc", {})],
        "queue_s": [("vllm:request_queue_time_seconds", {})],
        "prefill_s": [("vllm:request_prefill_time_seconds", {})],
        "decode_s": [("vllm:request_decode_time_seconds", {})],
        "ttft_s": [("vllm:time_to_first_token_seconds", {})],
        "itl_s": [("vllm:inter_token_latency_seconds", {}), ("vllm:time_per_output_token_seconds", {})],
        "e2e_s": [("vllm:e2e_request_latency_seconds", {})],
        # counters of prompt tokens (vllm/v1/metrics/loggers.py: Counter "vllm:prefix_cache_queries", which
        # prometheus_client exposes with `_total`); the gpu_ names are the same counts before v0.10
        "prefix_queries": [("vllm:prefix_cache_queries_total", {}), ("vllm:gpu_prefix_cache_queries_total", {})],
        "prefix_hits": [("vllm:prefix_cache_hits_total", {}), ("vllm:gpu_prefix_cache_hits_total", {})],
        # speculative decoding (vllm/v1/spec_decode/metrics.py; counters, exposed with `_total`): verifications,
        # guesses verified, guesses kept, and kept at each draft position (label `position`)
        "spec_drafts": [("vllm:spec_decode_num_drafts_total", {})],
        "spec_draft_tokens": [("vllm:spec_decode_num_draft_tokens_total", {})],
        "spec_accepted_tokens": [("vllm:spec_decode_num_accepted_tokens_total", {})],
        **{f"spec_accepted_pos{j}": [("vllm:spec_decode_num_accepted_tokens_per_pos_total", {"position": str(j)})]
           for j in range(SPEC_POSITIONS)},
    },
    "sglang": {
        "running": [("sglang:num_running_reqs", {})],
        "waiting": [("sglang:num_queue_reqs", {})],
        "kv_usage": [("sglang:token_usage", {})],   # tokens held / the pool's: its KV cache's fill
        "queue_s": [("sglang:queue_time_seconds", {})],
        "ttft_s": [("sglang:time_to_first_token_seconds", {})],
        "itl_s": [("sglang:inter_token_latency_seconds", {}), ("sglang:time_per_output_token_seconds", {})],
        "e2e_s": [("sglang:e2e_request_latency_seconds", {})],
        # the radix cache's hit rate of the last prefill batch it logged (python/sglang/srt/metrics/collector.py)
        "cache_hit_rate": [("sglang:cache_hit_rate", {})],
        # each finished request's prompt tokens and the cached part of them; cached_tokens_total appears at the
        # first hit (a labelled counter is published once it is first incremented)
        "prefix_queries": [("sglang:prompt_tokens_total", {})],
        "prefix_hits": [("sglang:cached_tokens_total", {})],
        # speculative decoding: the mean tokens a verification emitted over its last logging interval (a gauge)
        "spec_accept_length": [("sglang:spec_accept_length", {})],
    },
    "tgi": {
        "running": [("tgi_batch_current_size", {})],
        "waiting": [("tgi_queue_size", {})],
        "queue_s": [("tgi_request_queue_duration", {})],
        # TGI times each batch's forward pass, by method: a step's time, not a request's
        "prefill_s": [("tgi_batch_forward_duration", {"method": "prefill"})],
        "decode_s": [("tgi_batch_forward_duration", {"method": "decode"})],
        "itl_s": [("tgi_request_mean_time_per_token_duration", {})],
        "e2e_s": [("tgi_request_duration", {})],
    },
    "llamacpp": {
        "running": [("llamacpp:requests_processing", {})],
        "waiting": [("llamacpp:requests_deferred", {})],
        "kv_usage": [("llamacpp:kv_cache_usage_ratio", {})],
    },
}
GAUGES = ("running", "waiting", "kv_usage", "cache_hit_rate", "spec_accept_length")
HISTOGRAMS = ("queue_s", "prefill_s", "decode_s", "ttft_s", "itl_s", "e2e_s")
# prompt tokens looked up in the prefix cache, and found there; speculative decoding's counts
COUNTERS = ("prefix_queries", "prefix_hits", "spec_drafts", "spec_draft_tokens", "spec_accepted_tokens",
            *(f"spec_accepted_pos{j}" for j in range(SPEC_POSITIONS)))
# fractions and per-rank means: each rank has its own cache, its own verifications
_MEAN_OVER_RANKS = ("kv_usage", "cache_hit_rate", "spec_accept_length")


@dataclass(slots=True)
class Histogram:
    """A Prometheus histogram as the server keeps it: cumulative since it started."""

    count: float
    total: float                                   # the _sum: seconds
    buckets: list[tuple[float, float]] = field(default_factory=list)   # (upper bound, cumulative count), +inf last


@dataclass(slots=True)
class ServerMetrics:
    """One reading of the server's gauges and histograms; None (absent) where it does not publish one."""

    time_ms: float
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None    # fraction of the KV cache in use, 0..1
    cache_hit_rate: float | None = None   # SGLang's prefix-cache hit rate gauge, 0..1
    spec_accept_length: float | None = None   # SGLang's mean tokens a verification emitted (its last interval)
    engine: str = ""                 # vllm | sglang | tgi | llamacpp
    histograms: dict[str, Histogram] = field(default_factory=dict)   # quantity ("prefill_s", ...) -> histogram
    counters: dict[str, float] = field(default_factory=dict)         # quantity ("prefix_hits", ...) -> total

    def fields(self) -> list[str]:
        """The quantities this reading holds."""
        return [g for g in GAUGES if getattr(self, g) is not None] + list(self.histograms) + list(self.counters)


Sample = tuple[str, dict[str, str], float]


def _labels(text: str) -> dict[str, str]:
    """`a="x",le="0.5"` -> {"a": "x", "le": "0.5"}; values may hold escaped quotes, backslashes, commas."""
    out, i, n = {}, 0, len(text)
    while i < n:
        eq = text.find("=", i)
        if eq < 0:
            break
        name = text[i:eq].strip().lstrip(",").strip()
        j = text.find('"', eq) + 1
        value = []
        while j < n and text[j] != '"':
            if text[j] == "\\" and j + 1 < n:
                value.append({"n": "\n"}.get(text[j + 1], text[j + 1]))
                j += 2
            else:
                value.append(text[j])
                j += 1
        out[name] = "".join(value)
        i = j + 1
    return out


def parse_prometheus(text: str) -> list[Sample]:
    """Every sample of a page in the Prometheus text exposition format: (name, labels, value).

    NaN and infinite values are kept out (a gauge with nothing to report); timestamps are ignored."""
    samples: list[Sample] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        brace = line.find("{")
        space = line.find(" ")
        if 0 <= brace < (space if space >= 0 else len(line)):
            close = line.rfind("}")
            if close < brace:
                continue
            name, labels, rest = line[:brace], _labels(line[brace + 1:close]), line[close + 1:]
        else:
            name, labels, rest = line[:space], {}, line[space:]
        parts = rest.split()
        if not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        if math.isfinite(value):
            samples.append((name.strip(), labels, value))
    return samples


def _matching(samples: list[Sample], name: str, want: dict[str, str]) -> list[Sample]:
    return [s for s in samples if s[0] == name and all(s[1].get(k) == v for k, v in want.items())]


def _histogram(samples: list[Sample], name: str, want: dict[str, str]) -> Histogram | None:
    counts = _matching(samples, name + "_count", want)
    if not counts:
        return None
    buckets: dict[float, float] = {}
    for _, labels, value in _matching(samples, name + "_bucket", want):
        try:
            le = float(labels.get("le", "nan"))   # "+Inf" parses as inf
        except ValueError:
            continue
        if not math.isnan(le):
            buckets[le] = buckets.get(le, 0.0) + value   # label sets (ranks, models) add up
    return Histogram(sum(v for *_, v in counts), sum(v for *_, v in _matching(samples, name + "_sum", want)),
                     sorted(buckets.items()))


def server_metrics(text: str, time_ms: float) -> ServerMetrics | None:
    """What one `/metrics` page says of the server's load, or None when it names none of SERIES."""
    samples = parse_prometheus(text)
    names = {s[0] for s in samples}
    for engine, table in SERIES.items():
        reading = ServerMetrics(time_ms, engine=engine)
        for quantity, series in table.items():
            for name, want in series:
                if quantity in GAUGES:
                    if name not in names:
                        continue
                    values = [v for *_, v in _matching(samples, name, want)]
                    # each rank has its own cache: the mean; requests add up over ranks
                    setattr(reading, quantity,
                            sum(values) / len(values) if quantity in _MEAN_OVER_RANKS else sum(values))
                    break
                if quantity in COUNTERS:
                    found = _matching(samples, name, want) if name in names else []
                    if found:   # ranks (engine="0", "1") each count their own tokens: they add up
                        reading.counters[quantity] = sum(v for *_, v in found)
                        break
                    continue
                if name + "_count" in names:
                    found = _histogram(samples, name, want)
                    if found is not None:
                        reading.histograms[quantity] = found
                        break
        if reading.fields():
            return reading
    return None


def metrics_url(base_url: str) -> str:
    """`/metrics` lives at the server root, beside `/v1` rather than under it."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root + "/metrics"


async def read_metrics(client: httpx.AsyncClient, url: str, headers: dict[str, str],
                       now_ms: Callable[[], float]) -> tuple[int | None, ServerMetrics | None]:
    """One reading: (HTTP status or None when unreachable, the reading or None), timed at the middle of
    the request (the server answered somewhere in between)."""
    before = now_ms()
    try:
        response = await client.get(url, headers=headers, timeout=2.0)
    except httpx.HTTPError:
        return None, None
    if response.status_code != 200:
        return response.status_code, None
    return 200, server_metrics(response.text, (before + now_ms()) / 2.0)


async def poll_metrics(client: httpx.AsyncClient, url: str, headers: dict[str, str],
                       now_ms: Callable[[], float], publish: Callable[[ServerMetrics], None],
                       every_s: float = POLL_S) -> None:
    """Read `url` every `every_s` until cancelled; stop for good on 404 or a page without known series
    (a busy or restarting server that does not answer is tried again at the next tick)."""
    loop = asyncio.get_running_loop()
    next_at = loop.time()
    while True:
        status, reading = await read_metrics(client, url, headers, now_ms)
        if status == 404 or (status == 200 and reading is None):
            return
        if reading is not None:
            publish(reading)
        next_at = max(next_at + every_s, loop.time())   # a slow answer skips ticks rather than bunching them
        await asyncio.sleep(next_at - loop.time())
