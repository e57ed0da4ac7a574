"""The server's own view of its load, read from its Prometheus `/metrics` while a remote run goes.

Each engine names the same three quantities differently; a server that serves none of them (or
answers 404) simply has no metrics, and polling stops quietly.
"""
from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Callable

import httpx

POLL_S = 1.0

# name -> quantity; gauges with several label sets (one per engine or data-parallel rank) are combined
RUNNING = ("vllm:num_requests_running", "llamacpp:requests_processing", "sglang:num_running_reqs",
           "tgi_batch_current_size")
WAITING = ("vllm:num_requests_waiting", "llamacpp:requests_deferred", "sglang:num_queue_reqs", "tgi_queue_size")
# fractions in 0..1 despite vLLM's "perc" suffix
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "llamacpp:kv_cache_usage_ratio",
            "sglang:token_usage")


@dataclass(slots=True)
class ServerMetrics:
    """One reading of the server's gauges; None where the server does not publish that quantity."""

    time_ms: float
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None    # fraction of the KV cache in use, 0..1


def parse_prometheus(text: str) -> dict[str, list[float]]:
    """Sample values by metric name (labels dropped), from the Prometheus text exposition format."""
    values: dict[str, list[float]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, _, rest = line.partition("{")
            rest = rest.rpartition("}")[2]
        else:
            name, _, rest = line.partition(" ")
        parts = rest.split()
        if not parts:
            continue
        try:
            value = float(parts[0])
        except ValueError:
            continue
        if math.isfinite(value):
            values.setdefault(name.strip(), []).append(value)
    return values


def server_metrics(text: str, time_ms: float) -> ServerMetrics | None:
    """The three quantities from one `/metrics` page, or None when it names none of them."""
    values = parse_prometheus(text)

    def pick(names, combine):
        for name in names:
            if name in values:
                return combine(values[name])
        return None

    running = pick(RUNNING, sum)
    waiting = pick(WAITING, sum)
    kv = pick(KV_USAGE, lambda v: sum(v) / len(v))   # mean over ranks: each has its own cache
    if running is None and waiting is None and kv is None:
        return None
    return ServerMetrics(time_ms, running, waiting, kv)


def metrics_url(base_url: str) -> str:
    """`/metrics` lives at the server root, beside `/v1` rather than under it."""
    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root + "/metrics"


async def poll_metrics(client: httpx.AsyncClient, url: str, headers: dict[str, str],
                       now_ms: Callable[[], float], publish: Callable[[ServerMetrics], None]) -> None:
    """Read `url` every second until cancelled; stop for good on 404 or a page without known gauges."""
    while True:
        try:
            response = await client.get(url, headers=headers, timeout=POLL_S * 2)
        except httpx.HTTPError:
            response = None   # a busy or restarting server: try again next second
        if response is not None:
            if response.status_code == 404:
                return
            if response.status_code == 200:
                reading = server_metrics(response.text, now_ms())
                if reading is None:
                    return
                publish(reading)
        await asyncio.sleep(POLL_S)
