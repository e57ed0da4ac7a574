"""The disaggregated policy's figures, added to a run's summary: the KV hand-off and the TTFT split.

Over finished requests that were handed from a prefill worker to a decode worker:
TTFT = queue + prefill + KV transfer + first decode step (each a mean and percentiles), the
bytes moved per request, and the hand-off's effective bandwidth (bytes over transfer time).
"""
from __future__ import annotations

from backend.records import RequestRecord, RequestStatus

SPLIT = ("queue_ms", "prefill_ms", "kv_transfer_ms", "first_decode_ms")


def fill_split(record: RequestRecord, kv_bytes: int, scheduled_ms: float | None, prefill_done_ms: float,
               kv_ready_ms: float) -> None:
    """The TTFT split of a request handed over (the queue is in the record already): prefill from its
    first scheduled step to its prompt's KV complete, transfer to the KV in the decode worker's cache,
    first decode from there to the first token. The real and the simulated policies both record it so."""
    record.kv_bytes = kv_bytes
    if scheduled_ms is not None:
        record.prefill_ms = prefill_done_ms - scheduled_ms
    record.kv_transfer_ms = kv_ready_ms - prefill_done_ms
    if record.first_token_ms is not None:
        record.first_decode_ms = record.first_token_ms - kv_ready_ms


def disaggregated_figures(requests: list[RequestRecord]) -> dict[str, float]:
    from backend.results.summary import NAN, percentiles
    handed = [r for r in requests if r.status is RequestStatus.FINISHED and r.kv_transfer_ms is not None]
    out: dict[str, float] = {"num_handed_off": len(handed)}
    for name in SPLIT:
        values = [getattr(r, name) for r in handed if getattr(r, name) is not None]
        stem = name.removesuffix("_ms")
        for stat, value in percentiles(values).items():
            out[f"split_{stem}_{stat}_ms"] = value
    sizes = [r.kv_bytes for r in handed if r.kv_bytes is not None]
    out["kv_bytes_mean"] = sum(sizes) / len(sizes) if sizes else NAN
    out["kv_bytes_total"] = float(sum(sizes))
    seconds = sum(r.kv_transfer_ms for r in handed) / 1000.0
    out["kv_transfer_gb_per_s"] = sum(sizes) / seconds / 1e9 if seconds > 0 else NAN
    return out


def ttft_split(record: RequestRecord) -> dict[str, float] | None:
    """One request's TTFT split (None for a request that was not handed off)."""
    if record.kv_transfer_ms is None:
        return None
    return {name.removesuffix("_ms"): getattr(record, name) or 0.0 for name in SPLIT}
