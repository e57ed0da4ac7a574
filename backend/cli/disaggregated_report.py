"""The disaggregated policy's lines in a run's printed summary: the workers and the TTFT split."""
from __future__ import annotations

import math

from backend.run_info import DisaggregatedInfo
from backend.summary import Summary, figure


def print_layout(layout: DisaggregatedInfo, summary: Summary, out) -> None:
    from backend.engine.threads import describe_cores
    workers = layout.workers
    parts = []
    for w in workers:
        if w.get("cores"):
            parts.append(f"{w['name']} on {describe_cores(w['cores'])}")
        else:
            parts.append(w["name"])
    transport = layout.kv_transport
    link = layout.kv_link
    if link:
        transport = f"simulated link {link['name']} ({link['gbs']:,.1f} GB/s, {link['us']:g} us)"
    shared = "; cores SHARED: fewer cores than workers" if layout.shared_cores else ""
    print(f"layout  {layout.prefill_workers} prefill + {layout.decode_workers} decode: "
          f"{', '.join(parts)}; KV by {transport}{shared}", file=out)
    n = summary.num_handed_off or 0
    if not n:
        return

    def ms(value):
        return "-" if value is None or math.isnan(value) else f"{value:,.1f} ms"
    s = summary
    mb = figure(s.kv_bytes_mean)
    gbs = figure(s.kv_transfer_gb_per_s)
    print(f"TTFT    mean = queue {ms(s.split_queue_mean_ms)} + prefill {ms(s.split_prefill_mean_ms)} + KV transfer "
          f"{ms(s.split_kv_transfer_mean_ms)} + first decode step {ms(s.split_first_decode_mean_ms)}", file=out)
    print(f"KV      {int(n)} hand-offs, {mb / 1e6:,.2f} MB each on average, "
          f"{'-' if math.isnan(gbs) else f'{gbs:,.2f}'} GB/s over the transfer time", file=out)
