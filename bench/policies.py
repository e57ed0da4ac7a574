"""Static vs continuous vs chunked-prefill scheduling on one workload, measured in one run.

    python -m bench.policies [--model smollm2-135m] [--requests 24] [--rate 3] [--readme]

Runs the same seeded workload (same arrivals, prompts and output lengths) through the three
policies on this machine and prints a Markdown table: throughput, p50/p99 TTFT and ITL;
--readme also writes it into bench/README.md between its markers.
"""
from __future__ import annotations

import argparse
import sys

from backend.config import EngineConfig, ModelChoice, RunConfig, SamplingConfig
from backend.engine.scheduler import POLICIES
from backend.session import execute
from backend.workload.spec import apply_overrides, load_workload
from bench.common import add_readme_flag, log, measured_line, publish


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--workload", default="long-prompts-during-decode")
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--rate", type=float, default=3.0)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--chunk-tokens", type=int, default=128)
    add_readme_flag(parser)
    args = parser.parse_args()
    spec = apply_overrides(load_workload(args.workload), num_requests=args.requests, rate=args.rate)
    rows = []
    for policy in POLICIES:
        config = RunConfig(mode="load", model=ModelChoice(args.model, "auto", "auto"),
                           sampling=SamplingConfig(ignore_eos=True), workload=spec,
                           engine=EngineConfig(policy=policy, max_batch=args.max_batch, chunk_tokens=args.chunk_tokens))
        log(policy)
        s = execute(config, lambda e: None, lambda: False).summary
        rows.append((policy, s))
    lines = [measured_line(), "",
             f"Model {args.model}; workload {args.workload}: {args.requests} requests, {spec.arrival} at {args.rate}/s, "
             f"prompts {spec.prompt_len.describe()}, outputs {spec.output_len.describe()}; max batch {args.max_batch}, "
             f"chunk {args.chunk_tokens} tokens", "",
             "| policy | duration s | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | preemptions |",
             "|---|---|---|---|---|---|---|---|"]
    for policy, s in rows:
        lines.append(f"| {policy} | {s.duration_s:.1f} | {s.output_tokens_per_s:.1f} | {s.ttft_p50_ms:.0f} | "
                     f"{s.ttft_p99_ms:.0f} | {s.itl_p50_ms:.0f} | {s.itl_p99_ms:.0f} | "
                     f"{int(s.num_preemptions)} |")
    return publish("policies", lines, args.readme)


if __name__ == "__main__":
    sys.exit(main())
