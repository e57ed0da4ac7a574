"""`example`: the seed's worked example, simulated on a datacenter profile and measured here.

The project's founding text works one request through by hand: an 8B model on a datacenter
GPU, a 2,000-token prompt and 300 output tokens, TTFT about 200 ms, TPOT about 20 ms, 6,200 ms
in all, 97% of it decoding. This command prints that row beside the same request simulated
for llama-8b on a profile (the cost model's terms as the profile gives them) and measured on
this machine with the bundled model, so the three can be read side by side.
"""
from __future__ import annotations

from backend.results.example import OUTPUT_LEN, PROMPT_LEN, SEED_ROW, example_config, format_rows, row_of


def add_example_parser(sub) -> None:
    p = sub.add_parser("example", help="the seed's worked example (8B model, 2,000-token prompt, 300 output tokens): "
                       "simulated on a datacenter profile beside the bundled model measured here")
    p.add_argument("--profile", default="h100-sxm", help="the datacenter profile to simulate llama-8b on")
    p.add_argument("--no-measure", action="store_true", help="skip the measured run of the bundled model")
    from backend.cli.flags import threads_flag
    threads_flag(p)


def run_example(args) -> int:
    import sys
    from backend.cli.report import print_table
    from backend.roofline.profiles import find_profile
    from backend.session import execute
    profile = find_profile(args.profile)
    rows = [SEED_ROW]
    print(f"... simulating llama-8b on {profile.key}", file=sys.stderr)
    simulated = execute(example_config("llama-8b", True, profile.key, None), lambda e: None, lambda: False)
    rows.append(row_of(f"llama-8b on {profile.key}, simulated", simulated))
    if not args.no_measure:
        print(f"... measuring smollm2-135m here: {PROMPT_LEN}-token prompt, {OUTPUT_LEN} tokens", file=sys.stderr)
        measured = execute(example_config("smollm2-135m", False, None, args.threads), lambda e: None, lambda: False)
        if measured.error:
            print(f"error: {measured.error}", file=sys.stderr)
            return 1
        rows.append(row_of(f"smollm2-135m on {measured.data.info.device_name}, measured", measured))
    print(f"one request, {PROMPT_LEN:,}-token prompt, {OUTPUT_LEN} output tokens: total = TTFT + "
          f"{OUTPUT_LEN - 1} decode steps x TPOT\n")
    print_table(format_rows(rows))
    info = simulated.data.info
    print(f"\nsimulated: {info.simulated.cost_model_source if info.simulated is not None else None}")
    print("decoded / prefilled token: one decode step's time over one prompt token's share of the prefill")
    return 0
