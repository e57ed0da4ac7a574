"""The disaggregated policy's flags on `load` (and the link flags of `sweep pd-ratio`)."""
from __future__ import annotations

from backend.cli.flags import number, positive_int


def add_link_flags(p) -> None:
    p.add_argument("--kv-link", help="simulated: the KV link between prefill and decode devices, a name of "
                   "profiles/links/interconnects.toml (default: the profile's own, e.g. nvlink4 for h100-sxm)")
    p.add_argument("--kv-link-gbs", type=number, help="simulated: the KV link's bandwidth in GB/s (overrides the link's)")
    p.add_argument("--kv-link-us", type=number, help="simulated: the KV link's latency per hand-off in microseconds")


def add_disaggregated_flags(p) -> None:
    p.add_argument("--prefill-workers", type=positive_int, default=1,
                   help="disaggregated: engine processes (simulated: devices) that run prompts only")
    p.add_argument("--decode-workers", type=positive_int, default=1,
                   help="disaggregated: engine processes (simulated: devices) that run decode steps only")
    p.add_argument("--kv-transport", default="auto", choices=("auto", "shm", "pipe"),
                   help="disaggregated: how a prompt's KV goes from a prefill to a decode process (auto: shared "
                        "memory where the system has it, measured the faster here)")
    p.add_argument("--prefill-tp", type=positive_int, help="simulated disaggregated: each prefill device group's "
                   "tensor parallelism (default: --tp)")
    p.add_argument("--decode-tp", type=positive_int, help="simulated disaggregated: each decode device group's "
                   "tensor parallelism (default: --tp)")
    add_link_flags(p)


def apply_disaggregated_flags(args, engine) -> None:
    engine.prefill_workers = args.prefill_workers
    engine.decode_workers = args.decode_workers
    engine.kv_transport = args.kv_transport
    engine.kv_link = args.kv_link
    engine.kv_link_gbs = args.kv_link_gbs
    engine.kv_link_us = args.kv_link_us
