"""`load`: a workload of requests through the scheduler, with flags overriding the workload file."""
from __future__ import annotations

from backend.config import EngineConfig, RunConfig, RunKind
from backend.engine.scheduler import POLICIES


def add_load_parser(sub, model_flags) -> None:
    p = sub.add_parser("load", help="drive a workload of requests through static / continuous / chunked scheduling")
    load_flags(p, model_flags)
    p.add_argument("--definitions", action="store_true",
                   help="print TTFT, ITL and TPOT under each tool's definition side by side (docs/metrics.md)")


def load_flags(p, model_flags) -> None:
    """The flags of `load`, which the load sweeps (`sweep rate|concurrency`) take too."""
    model_flags(p)
    p.add_argument("--workload", default="poisson-chat", help="a preset name (profiles/workloads/) or a TOML path")
    p.add_argument("--policy", default=EngineConfig().policy, choices=(*POLICIES, "disaggregated"),
                   help="disaggregated: prompts on prefill engine processes, their KV handed to decode ones")
    from backend.cli.disaggregated_flags import add_disaggregated_flags
    add_disaggregated_flags(p)
    p.add_argument("--max-batch", type=int, default=32, help="requests running at once (KV cache slots)")
    p.add_argument("--chunk-tokens", type=int, default=512, help="per-step token budget (chunked policy)")
    p.add_argument("--kv-tokens", type=int, help="KV cache capacity in tokens (default: every slot full length)")
    from backend.cli.flags import kv_flags, spec_flags
    kv_flags(p)
    spec_flags(p)
    p.add_argument("--requests", type=int, help="number of requests")
    p.add_argument("--duration", type=float, help="seconds of arrivals (instead of a request count)")
    p.add_argument("--arrival", choices=["burst", "constant", "poisson", "gamma", "closed"])
    p.add_argument("--rate", type=float, help="arrivals per second")
    p.add_argument("--burstiness", type=float, help="gamma shape factor (1 = Poisson, < 1 burstier)")
    p.add_argument("--concurrency", type=int, help="closed loop: users each with one request in flight")
    p.add_argument("--ramp-ms", type=float, help="closed loop: users start spread evenly over this many ms "
                   "(0: all at once; default: 20 ms per mean output token)")
    p.add_argument("--think-ms", type=float, help="closed loop or conversation: a user waits this long after an "
                   "answer before its next request (default 0)")
    p.add_argument("--turns", type=int, help="conversations of N turns: each arrival (or closed-loop user) "
                   "starts one, each later turn's prompt the conversation so far plus a new message; "
                   "--requests then counts conversations")
    p.add_argument("--turn-len", help="a conversation's later messages (a user's, or a tool's result), "
                   "N or A:B tokens (default: drawn as --prompt-len)")
    p.add_argument("--shared-prefix-len", type=int, metavar="L",
                   help="the first L tokens of every first prompt are the same (a shared system prompt)")
    p.add_argument("--trace", metavar="FILE", help="replay a trace's arrivals and lengths: an Azure LLM inference "
                   "trace CSV, a Mooncake JSONL, or a run's requests.csv (or its folder)")
    p.add_argument("--trace-speed", type=float, metavar="X", help="replay the trace X times as fast (default 1)")
    p.add_argument("--prompt-len", help="N or A:B (uniform)")
    p.add_argument("--output-len", help="N or A:B (uniform)")
    p.add_argument("--slo-ttft-ms", type=float, help="goodput: TTFT objective")
    p.add_argument("--slo-tpot-ms", type=float, help="goodput: TPOT objective")
    from backend.cli.flags import simulate_flag
    simulate_flag(p)
    from backend.targets.remote.target import add_remote_flags
    add_remote_flags(p)


def load_config(args) -> RunConfig:
    from backend.cli.flags import common_config
    from backend.workload.spec import apply_overrides, load_workload
    spec = load_workload(args.workload)
    overrides = {} if args.seed is None else {"seed": args.seed}   # else the workload file's seed
    for flag, field in [("requests", "num_requests"), ("duration", "duration_s"), ("arrival", "arrival"),
                        ("rate", "rate"), ("burstiness", "burstiness"), ("concurrency", "concurrency"),
                        ("prompt_len", "prompt_len"), ("output_len", "output_len"), ("ramp_ms", "ramp_ms"),
                        ("think_ms", "think_ms"), ("trace", "trace"), ("trace_speed", "trace_speed"),
                        ("turns", "turns"), ("turn_len", "turn_len"), ("shared_prefix_len", "shared_prefix_len")]:
        value = getattr(args, flag)
        if value is not None:
            overrides[field] = value
    config = common_config(args, RunKind.LOAD)
    config.workload = apply_overrides(spec, **overrides)
    config.engine = EngineConfig(policy=args.policy, max_batch=args.max_batch, chunk_tokens=args.chunk_tokens,
                                 kv_tokens=args.kv_tokens)
    from backend.cli.flags import apply_kv_flags
    apply_kv_flags(args, config.engine)
    from backend.cli.disaggregated_flags import apply_disaggregated_flags
    apply_disaggregated_flags(args, config.engine)
    config.slo_ttft_ms = args.slo_ttft_ms
    config.slo_tpot_ms = args.slo_tpot_ms
    from backend.targets.remote.target import endpoint_from_args
    config.endpoint = endpoint_from_args(args)
    return config
