"""The disaggregated policy's lines in a run's printed summary: the workers and the TTFT split."""
from __future__ import annotations

import math


def print_layout(layout: dict, summary: dict, out) -> None:
    from backend.engine.threads import describe_cores
    workers = layout.get("workers", [])
    parts = []
    for w in workers:
        if w.get("cores"):
            parts.append(f"{w['name']} on {describe_cores(w['cores'])}")
        else:
            parts.append(w["name"])
    transport = layout.get("kv_transport", "")
    link = layout.get("kv_link")
    if link:
        transport = f"simulated link {link['name']} ({link['gbs']:,.1f} GB/s, {link['us']:g} us)"
    shared = "; cores SHARED: fewer cores than workers" if layout.get("shared_cores") else ""
    print(f"layout  {layout.get('prefill_workers')} prefill + {layout.get('decode_workers')} decode: "
          f"{', '.join(parts)}; KV by {transport}{shared}", file=out)
    n = summary.get("num_handed_off", 0)
    if not n:
        return

    def ms(key):
        value = summary.get(key, math.nan)
        return "-" if value is None or math.isnan(value) else f"{value:,.1f} ms"
    mb = summary.get("kv_bytes_mean", math.nan)
    gbs = summary.get("kv_transfer_gb_per_s", math.nan)
    print(f"TTFT    mean = queue {ms('split_queue_mean_ms')} + prefill {ms('split_prefill_mean_ms')} + KV transfer "
          f"{ms('split_kv_transfer_mean_ms')} + first decode step {ms('split_first_decode_mean_ms')}", file=out)
    print(f"KV      {int(n)} hand-offs, {mb / 1e6:,.2f} MB each on average, "
          f"{'-' if math.isnan(gbs) else f'{gbs:,.2f}'} GB/s over the transfer time", file=out)
