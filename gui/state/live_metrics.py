"""The numbers the metrics panel shows, computed from a RunStore. No Qt, so tested alone.

Everything is recomputed from the store's columns (vectorized), so running requests count
as soon as they have a first token, not only once they finish.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from backend.config import RunKind
from backend.precision import from_info
from backend.roofline.profiles import local_profile_path, run_profile
from backend.records import Phase, RequestStatus, RunData
from backend.run_info import RunInfo
from backend.results.text import roofline_lines
from backend.roofline.roofs import math_from_info

from gui.state.run_store import STATUS_CODE, RunStore

RECENT_WINDOW_MS = 1000.0   # "tokens/s now" averages the steps of the last second


@dataclass(slots=True)
class LiveMetrics:
    num_requests: int = 0
    num_with_first_token: int = 0
    num_finished: int = 0
    ttft_mean_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_mean_ms: float | None = None
    tpot_p99_ms: float | None = None
    output_tokens_per_s: float | None = None   # every output token over the run so far
    decode_tokens_per_s: float | None = None   # decode tokens per second of the last second's steps
    num_running: int | None = None
    num_waiting: int | None = None
    kv_tokens: int | None = None
    kv_capacity: int | None = None
    load_source: str = "engine"                # "engine", "server" (its /metrics) or "client" (requests in flight)
    kv_usage: float | None = None              # fraction in use, as a remote server reports it
    # where the time goes: each request's latency is its TTFT plus its decode steps' time (by the
    # definition of TPOT), so the means break the latency down, they do not check it
    example_requests: int = 0                  # requests with two output tokens or more, running ones included
    example_ttft_ms: float | None = None
    example_output_tokens: float | None = None
    example_decode_steps: tuple[int, int] | None = None   # fewest and most decode steps among them
    example_tpot_ms: float | None = None
    example_decode_ms: float | None = None     # mean time after the first token
    example_total_ms: float | None = None      # example_ttft_ms + example_decode_ms: the mean latency so far
    decode_share: float | None = None          # decode part of the total
    # each phase under the roof of the run's own device: (label, text) from backend.results.text.roofline_lines
    roofline: list[tuple[str, str]] = field(default_factory=list)
    prefill_ms_per_token: float | None = None  # prefill steps' time per prompt token
    decode_ms_per_token: float | None = None   # decode steps' time per generated token
    cost_ratio: float | None = None            # decode_ms_per_token / prefill_ms_per_token
    simulated_on: str = ""                     # the profile a simulated run's steps were priced on ("" if measured)
    # a disaggregated run: TTFT's means split into queue, prefill, KV transfer and first decode step,
    # over the finished requests that were handed from a prefill worker to a decode worker
    handed_off: int = 0
    ttft_split: dict[str, float] | None = None
    kv_bytes_mean: float | None = None
    # the weights the last second's decode-only steps read, per step (where the engine measured
    # them), and for a mixture of experts the experts per layer they touched, of how many
    weights_per_step: float | None = None
    experts_per_layer: float | None = None
    num_experts: int = 0
    # which matrix unit ran each phase's products, and why that arithmetic (run.json's "matmul" and
    # "matmul_steps": known once the run has finished; "" for a run that recorded none)
    units: str = ""                            # "AVX512-BF16 / AVX-512 FMA + AVX512-BF16": prefill's / decode's
    products_note: str = ""


def _mean(x: np.ndarray) -> float | None:
    return float(x.mean()) if len(x) else None


def _p99(x: np.ndarray) -> float | None:
    return float(np.percentile(x, 99)) if len(x) else None


def compute(store: RunStore) -> LiveMetrics:
    m = LiveMetrics(num_requests=store.num_requests, num_finished=len(store.records))
    lanes = store.lanes
    arrival, first = lanes.column("arrival_ms"), lanes.column("first_token_ms")
    last, out = lanes.column("last_token_ms"), lanes.column("output_tokens")
    has_first = ~np.isnan(first) & ~np.isnan(arrival)
    m.num_with_first_token = int(has_first.sum())
    ttft = (first - arrival)[has_first]
    m.ttft_mean_ms, m.ttft_p99_ms = _mean(ttft), _p99(ttft)
    # TPOT: mean gap between output tokens after the first (the backend's definition)
    multi = has_first & (out >= 2) & ~np.isnan(last)
    tpot = ((last - first) / np.maximum(out - 1, 1))[multi]
    m.tpot_mean_ms, m.tpot_p99_ms = _mean(tpot), _p99(tpot)

    now = store.now_ms()
    total_out = float(np.nansum(out))
    if now > 0 and total_out > 0:
        m.output_tokens_per_s = total_out / (now / 1000.0)
    _step_metrics(store, m)
    if store.remote:
        _remote_load(store, m)

    if multi.any():
        n = out[multi]
        m.example_requests = int(multi.sum())
        m.example_ttft_ms = float(ttft[multi[has_first]].mean())
        m.example_output_tokens = float(n.mean())
        m.example_decode_steps = (int(n.min()) - 1, int(n.max()) - 1)
        m.example_tpot_ms = float(tpot.mean())
        m.example_decode_ms = float((last - first)[multi].mean())
        m.example_total_ms = m.example_ttft_ms + m.example_decode_ms
        if m.example_total_ms > 0:
            m.decode_share = m.example_decode_ms / m.example_total_ms
    if not store.remote:
        m.roofline = _roofline(store)
        _products(store, m)
    _ttft_split(store, m)
    device = str(store.model.device if store.model is not None else store.info.device)
    if device.startswith("simulated "):
        m.simulated_on = device.removeprefix("simulated ")
    return m


_profiles: dict = {}   # (device, device name, the calibrated file and its mtime) -> the profile


def device_profile(device: str, device_name: str):
    """backend.roofline.profiles.run_profile, read again only when the calibrated profile changes (calibrate in the window)."""
    path = local_profile_path()
    try:
        stamp = os.stat(path).st_mtime_ns
    except OSError:
        stamp = None
    key = (device, device_name, str(path), stamp)
    if key not in _profiles:
        _profiles.clear()
        _profiles[key] = run_profile(device, device_name)
    return _profiles[key]


def _roofline(store: RunStore) -> list[tuple[str, str]]:
    """The same lines as the CLI's summary, from the store's whole-run sums of the prefill and decode steps."""
    if store.config.get("mode") == RunKind.SWEEP_PRECISION:   # its steps ran at several precisions: no one roof
        return []
    if store.model is not None:   # a live run
        shape, device, name = store.model.shape, store.model.device, store.model.device_name
        dtype = store.model.precision or store.model.dtype
    else:                         # a saved run: run.json's info
        info = store.info
        shape, device, name = info.shape, info.device, info.device_name
        dtype = from_info(info) or info.dtype
    totals = {"prefill": store.roofline[Phase.PREFILL], "decode": store.roofline[Phase.DECODE]}
    if shape is None or not any(t.steps for t in totals.values()):
        return []
    if str(device).startswith("simulated "):   # judged against the profile its steps were priced on
        from backend.sim.parallel import replica_profile
        profile = simulated_profile(store.config.get("profile") or str(device).removeprefix("simulated ").split(" x ")[0])
        if profile is not None:   # a replica of tp x pp devices judged as one
            deployment = store.config.get("deployment") or {}   # the config's dict (the runkind change types it)
            profile = replica_profile(profile, deployment.get("tp", 1), deployment.get("pp", 1))
    else:
        profile = device_profile(device, name)
    # the products' arithmetic (a CPU run's bf16 roof): the model's event says it, run.json too
    return roofline_lines(shape, dtype, device, name, totals, profile, math_from_info(_run_info(store)))


def _run_info(store: RunStore) -> RunInfo:
    """The finished run's info (its matmul_steps included), else what the run's events have said."""
    done = store.finished.data if store.finished is not None else None
    return done.info if isinstance(done, RunData) and done.info.model else store.info


def _products(store: RunStore, m: LiveMetrics) -> None:
    """Which unit ran each phase and the arithmetic and why, from the finished run's info (else the store's)."""
    from backend.results.matmul import products_text, steps_text
    info = _run_info(store)
    matmul, steps = info.host.matmul, info.host.matmul_steps or {}
    products = products_text(matmul)
    if not products:
        return
    prefill = dict(steps.get("prefill", {}))
    for unit, n in steps.get("mixed", {}).items():   # a mixed step's products carry its prompt chunk
        prefill[unit] = prefill.get(unit, 0) + n

    def units(counts: dict) -> str:   # most steps first; the counts are in the note
        return " + ".join(sorted(counts, key=lambda unit: -counts[unit])) or "—"
    m.units = f"{units(prefill)} / {units(steps.get('decode', {}))}"
    m.products_note = "; ".join(part for part in (products, steps_text(steps), matmul.get("note")) if part)


def simulated_profile(name: str):
    from backend.errors import InputError
    from backend.roofline.profiles import find_profile
    try:
        return find_profile(name)
    except InputError:
        return None


def _ttft_split(store: RunStore, m: LiveMetrics) -> None:
    from backend.targets.disaggregated.summary import ttft_split
    splits, sizes = [], []
    for r in store.records.values():
        split = ttft_split(r) if r.status is RequestStatus.FINISHED else None
        if split is not None:
            splits.append(split)
            sizes.append(r.kv_bytes or 0)
    if splits:
        m.handed_off = len(splits)
        m.ttft_split = {k: float(np.mean([s[k] for s in splits])) for k in splits[0]}
        m.kv_bytes_mean = float(np.mean(sizes))


def _step_metrics(store: RunStore, m: LiveMetrics) -> None:
    steps = store.steps
    if len(steps) == 0:
        return
    m.num_running = int(steps.column("num_running")[-1])
    m.num_waiting = int(steps.column("num_waiting")[-1])
    m.kv_tokens = int(steps.column("kv_tokens")[-1])
    m.kv_capacity = int(steps.column("kv_capacity")[-1])

    duration, start = steps.column("duration_ms"), steps.column("start_ms")
    decode_tokens = steps.column("num_decode_tokens")
    # steps are in time order: the last second's begin where their end passes the cut
    cut = start[-1] + duration[-1] - RECENT_WINDOW_MS
    first = int(np.searchsorted(start + duration, cut, side="left"))
    busy_ms = float(duration[first:].sum())
    recent_tokens = float(decode_tokens[first:].sum())
    if busy_ms > 0 and recent_tokens > 0:
        span_ms = max(float(start[-1] + duration[-1] - start[first]), busy_ms)
        m.decode_tokens_per_s = recent_tokens / (span_ms / 1000.0)

    decode_only = (steps.column("num_prefill_tokens")[first:] == 0) & (decode_tokens[first:] > 0)
    read = steps.column("weight_bytes")[first:][decode_only]
    if len(read) and read.mean() > 0:
        m.weights_per_step = float(read.mean())
        shape = store.model.shape if store.model is not None else None
        m.num_experts = getattr(shape, "num_experts", 0) if shape is not None else 0
        if m.num_experts:
            m.experts_per_layer = float(steps.column("experts_touched")[first:][decode_only].mean()) / shape.num_layers

    # whole-run sums, kept by the store as steps arrive
    if store.prefill_tokens > 0:
        m.prefill_ms_per_token = store.prefill_ms / store.prefill_tokens
    if store.decode_tokens > 0:
        m.decode_ms_per_token = store.decode_ms / store.decode_tokens
    if m.prefill_ms_per_token and m.decode_ms_per_token:
        m.cost_ratio = m.decode_ms_per_token / m.prefill_ms_per_token


def _remote_load(store: RunStore, m: LiveMetrics) -> None:
    """A remote run's load: the server's own gauges when it serves them, else what the client has in flight."""
    server = store.server
    if server is not None and (server.running is not None or server.waiting is not None):
        m.load_source = "server"
        m.num_running = None if server.running is None else round(server.running)
        m.num_waiting = None if server.waiting is None else round(server.waiting)
    else:
        m.load_source = "client"
        done = store.lanes.column("status") >= STATUS_CODE[RequestStatus.FINISHED]
        m.num_running, m.num_waiting = int((~done).sum()), 0
    if server is not None:
        m.kv_usage = server.kv_usage
