"""`sweep depth`: its flags, its rows as each depth is measured, and the lines it ends with (the sweep
itself runs through session: backend/sweeps/depth.py)."""
from __future__ import annotations

import math

from backend.config import RunConfig, SweepKind, SweepSpec

DEPTH_HEADER = (f"{'depth':>7} {'pp':>5} {'tg':>5} {'prefill tok/s':>14} {'decode tok/s':>13} {'prefill ms':>11} "
                f"{'TTFT ms':>9} {'TPOT ms':>9} {'cached':>7}")


def add_depth_parser(kinds, model_flags) -> None:
    from backend.cli.flags import simulate_flag
    d = kinds.add_parser(SweepKind.DEPTH, help="prefill and decode tokens/s at each context depth (llama-bench's -d), "
                         "on the local engine or against a server, every prompt unique so no prefix cache serves it")
    model_flags(d)
    simulate_flag(d)
    d.add_argument("--depths", default="0,4096,16384", help="comma-separated tokens already in the context")
    d.add_argument("--prompt-len", type=int, default=512, help="pp: tokens whose prefill is timed at each depth")
    d.add_argument("--output-len", type=int, default=128, help="tg: decode steps timed at each depth")
    d.add_argument("--steps", type=int, default=3, help="repetitions per depth, a pair of requests each (median "
                   "reported)")
    g = d.add_argument_group("remote target (an OpenAI-compatible server instead of the local engine)")
    g.add_argument("--endpoint", help="base URL of the server's OpenAI API, e.g. http://127.0.0.1:8000/v1")
    g.add_argument("--served-model", help="model name the server serves (its GET /v1/models)")
    g.add_argument("--api-key", help="bearer token; better given as PHASESCOPE_API_KEY or OPENAI_API_KEY. Never "
                   "written to any file")
    g.add_argument("--request-timeout", type=float, default=120.0, metavar="S",
                   help="seconds to wait to connect or for the next streamed event")
    g.add_argument("--no-server-metrics", action="store_true",
                   help="do not read the server's /metrics prefix-cache counters before and after")
    g.add_argument("--tokenizer", metavar="GGUF|FOLDER|HUB_ID",
                   help="the served model's tokenizer, for a server that takes text only: prompts of words it reads "
                   "as one token each (default: the bundled one when the served model is SmolLM2)")
    # token ids (or words of one token) to /v1/completions, one request at a time: no chat API or client workers
    d.set_defaults(api="completions", client_workers=None, ray=None)


def depth_config(args) -> RunConfig:
    from backend.cli.flags import common_config
    from backend.sweeps.parse import parse_depths
    from backend.targets.remote.target import endpoint_from_args
    config = common_config(args, SweepKind.DEPTH.run_kind)
    config.sweep = SweepSpec(SweepKind.DEPTH, depths=parse_depths(args.depths), prompt_len=args.prompt_len,
                             output_len=args.output_len, steps=args.steps)
    config.endpoint = endpoint_from_args(args)
    from backend.sweeps.depth import check_spec
    check_spec(config)
    return config


def _cell(value: float, spec: str) -> str:
    return "-" if value is None or math.isnan(value) else format(value, spec)


def depth_row(p) -> str:
    return (f"{p.depth:>7} {p.prompt_len:>5} {p.output_len:>5} {_cell(p.prefill_tokens_per_s, '>14,.1f')} "
            f"{_cell(p.decode_tokens_per_s, '>13,.1f')} {_cell(p.prefill_ms, '>11,.1f')} {_cell(p.ttft_ms, '>9,.1f')} "
            f"{_cell(p.tpot_ms, '>9,.2f')} {'-' if p.cached_tokens is None else p.cached_tokens:>7}")


def finish_depth(finished, config: RunConfig) -> None:
    from backend.sweeps.depth import cache_line
    info = finished.data.info
    where = info.remote.endpoint if info.remote else f"{info.device_name or info.device} ({info.dtype})"
    print(f"\nmodel {info.model} on {where}" + (" (SIMULATED)" if info.is_simulated else ""))
    print("prefill tok/s = pp / (TTFT of depth + pp tokens - TTFT of depth tokens); decode tok/s = tg / the time "
          "of the tg tokens after the first (docs/sweeps.md)")
    print(cache_line(finished.summary, info))
    if finished.summary.note:
        print(finished.summary.note)
    if config.out_dir:
        print(f"written to {config.out_dir}/sweep.csv (and run.json)")
