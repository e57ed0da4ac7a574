"""The flags every sub-command shares, and the parser that reports a bad one in one line."""
from __future__ import annotations

import argparse

from backend.errors import InputError
from backend.config import ROUTERS, Deployment, ModelChoice, RunConfig, RunKind, SamplingConfig, SpecConfig
from backend.kernels.matmath import MIN_ROWS, MODES
from backend.kernels import decodemath


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


class Parser(argparse.ArgumentParser):
    """A bad flag is one line on stderr (exit 2), not the whole usage block above it."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="smollm2-135m", help="a known name (see `models`), a HF folder, a .gguf file or a hub id")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda[:N] | mps")
    p.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16 | float16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | "
                   "q4_k | q5_k | q6_k | f16 | bf16w | int8 (int8: not on CUDA; auto: float32 on the CPU, or each tensor of a GGUF in "
                   "its own format: Q8_0, Q4_K, Q6_K, F16, ...; bfloat16 on CUDA); with --simulate also fp8 (E4M3 "
                   "weights and activations at the FP8 tensor peak), nvfp4 and mxfp4 (Blackwell's FP4 peak)")
    rows = min(MIN_ROWS.values())
    p.add_argument("--prefill-math", default="auto", choices=MODES,
                   help=f"the CPU kernels' arithmetic for products of {rows}+ rows (prefill, mixed steps, decode "
                        f"batches of {rows}+): bf16 = bfloat16 products with float32 accumulation on the CPU's "
                        "AVX512-BF16 or AMX unit (fewer rows stay float32); fp32 = float32 FMAs throughout; auto (the "
                        "default) = bf16 where the CPU has such a unit and the model's logits stay within the fidelity "
                        "bound (mean KL and top-1 agreement against float32, measured at load), else fp32. See `doctor`")
    p.add_argument("--decode-math", default="fp32", choices=decodemath.MODES,
                   help=f"the CPU kernels' arithmetic for products of up to {decodemath.MAX_ROWS} rows (decode, "
                        "verification) of Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 weights (and the K-quants where the kernels have AVX2): fp32 (the default) = the weights dequantized "
                        "and multiplied by float32 activations; int8 = the activations quantized per block of 32 "
                        "to int8 and integer dot products (as llama.cpp does): fewer instructions a weight, "
                        "logits moved a little (bench/README.md)")
    p.add_argument("--seed", type=int, help="seeds sampling and synthetic prompts (default 0; for load, the workload's)")
    p.add_argument("--temperature", type=number, default=0.0, help="0 (the default) is greedy")
    p.add_argument("--top-p", type=number, default=1.0)
    p.add_argument("--ignore-eos", action="store_true", help="always generate the full output length")
    p.add_argument("--out", help="write steps.csv, requests.csv, tokens.csv, summary.csv, run.json, trace.json here")
    p.add_argument("--profile", help="GPU profile name or TOML path (see `profiles`)")
    p.add_argument("--repeats", type=positive_int, default=1,
                   help="run the same settings N times back to back, the model loaded once; with --out, each repeat "
                        "is written to OUT/repeat-K and OUT/repeats.csv holds each metric's mean, 95%% interval and CV")
    threads_flag(p)


def spec_flags(p: argparse.ArgumentParser) -> None:
    """Speculative decoding on the local engine (backend/engine/spec/; docs/speculative.md)."""
    g = p.add_argument_group("speculative decoding")
    g.add_argument("--spec", help="ngram (prompt lookup: guess what followed the last tokens' earlier occurrence) | "
                   "draft:MODEL[@DTYPE] (a model of the same vocabulary guesses greedily, e.g. "
                   "draft:smollm2-135m@q4_0); each step verifies the guesses in one pass. Default: off")
    g.add_argument("--spec-tokens", type=int, default=SpecConfig().num_tokens,
                   help="K: guesses per verification step (the step checks K+1 positions)")
    g.add_argument("--spec-ngram-min", type=int, default=SpecConfig().ngram_min,
                   help="ngram: the shortest suffix looked up")
    g.add_argument("--spec-ngram-max", type=int, default=SpecConfig().ngram_max,
                   help="ngram: the longest suffix looked up (tried first)")
    g.add_argument("--spec-acceptance", type=float, default=None,
                   help="--simulate: the per-guess acceptance rate alpha the simulated guesses are kept with "
                        "(default 0.7, or --spec-from's)")
    g.add_argument("--spec-draft-cost", type=float, default=None,
                   help="--simulate: a draft pass's time as a fraction of the target's decode step (default: 0 "
                        "for ngram, a draft model priced by the cost model, or --spec-from's)")
    g.add_argument("--spec-from", default="",
                   help="--simulate: a run folder that speculated; its measured spec_alpha and draft time")


def spec_of(args) -> SpecConfig:
    """The SpecConfig the flags describe (off where a sub-command has none of them)."""
    return SpecConfig.parse(getattr(args, "spec", None), getattr(args, "spec_tokens", SpecConfig().num_tokens),
                            getattr(args, "spec_ngram_min", SpecConfig().ngram_min),
                            getattr(args, "spec_ngram_max", SpecConfig().ngram_max),
                            acceptance=getattr(args, "spec_acceptance", None),
                            draft_cost=getattr(args, "spec_draft_cost", None),
                            spec_from=getattr(args, "spec_from", "") or "")


def threads_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=positive_int, help="CPU threads, pinned to as many cores (default: all cores; "
                   "the window's engine takes all but one)")


def simulate_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--simulate", action="store_true",
                   help="no model: the real scheduler and workload, each step's time priced on --profile by a cost "
                        "model, on a virtual clock (--model: a known shape such as llama-8b, a shipped config such as "
                        "llama-3.1-70b or deepseek-v3, or a config.json)")
    deployment_flags(p)


def deployment_flags(p: argparse.ArgumentParser) -> None:
    """How a simulated model is spread over devices (backend/sim/parallel.py)."""
    g = p.add_argument_group("simulated deployment (with --simulate)")
    g.add_argument("--tp", type=positive_int, default=1, help="tensor parallel: every matrix split over N devices, "
                   "two all-reduces a layer on the link")
    g.add_argument("--pp", type=positive_int, default=1, help="pipeline parallel: the layers in N stages, the step's "
                   "requests as microbatches")
    g.add_argument("--dp", type=positive_int, default=1, help="data parallel: N replicas behind --router (load only)")
    g.add_argument("--ep", type=positive_int, default=1, help="expert parallel (MoE): the experts over N of the --tp "
                   "devices, all-to-all dispatch and combine on the link")
    g.add_argument("--router", default=Deployment().router, choices=ROUTERS, help="how --dp replicas share arrivals")
    g.add_argument("--link", help="the link between a replica's devices (profiles/links/interconnects.toml; default: "
                   "the profile's, e.g. nvlink4 for h100-sxm)")
    g.add_argument("--kv-dtype", default="auto", help="the KV cache's dtype: auto (the activations') | fp8 | bfloat16 | "
                   "float16 | float32")
    engine_flag(g)


def engine_flag(p) -> None:
    """--engine: the serving engine family whose host costs the simulated steps pay (the run and `plan`)."""
    from backend.sim.engines import DEFAULT_ENGINE, ENGINE_CHOICES
    p.add_argument("--engine", default=DEFAULT_ENGINE.value, choices=ENGINE_CHOICES,
                   help="the serving engine whose host costs (per step, request and layer; the collectives' fixed "
                        "cost) the simulated steps pay, as the profile's [simulation.ENGINE] table fitted them on "
                        "published figures of that engine (a family without one: the shared terms). Default: "
                        f"{DEFAULT_ENGINE.value}. compiled: a compiled batch-1 loop such as gpt-fast")


def deployment_of(args) -> Deployment:
    """The Deployment the flags describe (defaults where a sub-command has none of them)."""
    get = lambda name, default: getattr(args, name, None) or default   # noqa: E731
    return Deployment(tp=get("tp", 1), pp=get("pp", 1), dp=get("dp", 1), ep=get("ep", 1),
                      router=get("router", Deployment().router), link=getattr(args, "link", None),
                      kv_dtype=get("kv_dtype", "auto"), prefill_tp=getattr(args, "prefill_tp", None),
                      decode_tp=getattr(args, "decode_tp", None), engine=get("engine", Deployment().engine))


def kv_flags(p: argparse.ArgumentParser) -> None:
    """The KV cache's layout (backend/engine/kv_blocks.py); the defaults are the target's (see kv_settings)."""
    g = p.add_argument_group("KV cache")
    g.add_argument("--kv-layout", choices=("paged", "slots"),
                   help="paged: blocks of --kv-block-size tokens taken as tokens arrive (admission and preemption by "
                        "free blocks); slots: every request reserves a whole slot. Default: paged with --simulate, "
                        "slots on this engine")
    g.add_argument("--kv-block-size", type=positive_int, default=16, help="tokens per KV block (a power of two)")
    g.add_argument("--prefix-caching", choices=("on", "off"),
                   help="paged: reuse the cached full blocks of prompts seen before (default: on with --simulate, "
                        "off on this engine, whose cache does not share blocks yet)")


def apply_kv_flags(args, engine) -> None:
    """The KV flags onto an EngineConfig (a sub-command without them leaves its defaults)."""
    engine.kv_layout = getattr(args, "kv_layout", None)
    engine.kv_block_size = getattr(args, "kv_block_size", None) or engine.kv_block_size
    caching = getattr(args, "prefix_caching", None)
    engine.prefix_caching = None if caching is None else caching == "on"


def common_config(args, mode: RunKind) -> RunConfig:
    deployment = deployment_of(args)
    if deployment != Deployment() and not getattr(args, "simulate", False):
        raise InputError("--tp, --pp, --dp, --ep, --router, --link, --kv-dtype, --engine, --prefill-tp and --decode-tp describe "
                         "a simulated deployment: add --simulate --profile NAME")
    return RunConfig(mode=mode, model=ModelChoice(args.model, args.device, args.dtype, args.prefill_math,
                                                   args.decode_math),
                     sampling=SamplingConfig(args.temperature, args.top_p, args.seed or 0, args.ignore_eos),
                     profile=args.profile, out_dir=args.out, threads=args.threads, repeats=args.repeats,
                     simulate=getattr(args, "simulate", False), deployment=deployment, spec=spec_of(args))
