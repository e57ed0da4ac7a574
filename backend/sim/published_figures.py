"""Published, measured LLM-serving figures that bench/sim_vs_published.py reproduces with the simulator.

Every figure is copied as printed in its source (no rounding, no reading off a plot) with the setup
the source states; what the source does not state is said in the figure's `note`, never guessed
into a field silently. The list was written, and the held-out rule below fixed, before any of them
was simulated; F46-F111 (the rest of the TensorRT-LLM 0.9.0 page's rows, Mixtral's among them) and F112-F113
(the vLLM CI's Mixtral latency test) were appended later, under the same rule, before any of them was simulated.

Held-out rule (fixed up front, never tuned): figures are numbered F01, F02, ... in the order they
were transcribed (source by source, table row by table row); every third one (F03, F06, F09, ...)
is held out of any fitting, the rest are the fitted set. `is_held_out(fig)` is the rule.

Metrics (what `value` is):
  ttft_ms           time to first token of one request (batch 1, or closed-loop concurrency 1..N: mean)
  itl_ms            mean inter-token latency (= TPOT) of the requests
  e2e_ms            end-to-end latency of one fixed batch: prefill of all prompts then every output token
  tok_s_per_gpu     output tokens per second of a fixed batch (static batching) divided by the GPUs
  tok_s             output tokens per second of the whole deployment under a closed-loop load
No torch, no simulator here: plain data.
"""
from __future__ import annotations

from dataclasses import dataclass

METRICS = ("ttft_ms", "itl_ms", "e2e_ms", "tok_s_per_gpu", "tok_s")
HELD_OUT_EVERY = 3   # F03, F06, ... are held out


@dataclass(slots=True, frozen=True)
class Source:
    title: str
    publisher: str          # who published it (organisation, repository)
    url_or_file: str        # a URL, or repository + file
    date: str               # as precise as the source lets us say
    engine: str             # the serving engine and version that measured it
    method: str             # how it measured (the benchmark tool and its mode)


@dataclass(slots=True, frozen=True)
class Figure:
    id: str
    source: Source
    profile: str            # a GPU profile key of this repo (profiles/*.toml)
    num_gpus: int
    model: str              # a shipped model key (profiles/models/*.json)
    precision: str          # bfloat16 | float16 | fp8 (weights and activations)
    kv_dtype: str           # the KV cache's dtype: auto (the activations') | fp8
    tp: int
    pp: int
    kind: str               # batch: one fixed batch, all prompts at t=0 | closed: a closed loop of `concurrency` users
    prompt_len: int
    output_len: int
    batch: int              # kind batch: the batch size; kind closed: 0
    concurrency: int        # kind closed: users; kind batch: 0
    num_requests: int       # kind closed: requests the simulator runs (modest); kind batch: = batch
    metric: str
    value: float
    unit: str
    quote: str              # where in the source, and its words
    note: str = ""          # what the source leaves unstated, and what we assumed for it


TRT_09 = Source(
    title="Performance of TensorRT-LLM (performance overview), data 'generated using version 0.9.0'",
    publisher="NVIDIA, github.com/NVIDIA/TensorRT-LLM",
    url_or_file="NVIDIA/TensorRT-LLM, the performance page of the docs (docs/source/performance.md, later "
                "docs/source/performance/perf-overview.md), the version whose tables say 'All data was generated "
                "using version 0.9.0'; published at https://nvidia.github.io/TensorRT-LLM/",
    date="2024-04 (release 0.9.0, docs PR #1461 'Update documents for release 0.9')",
    engine="TensorRT-LLM 0.9.0, gptSessionBenchmark (static batching: the whole batch prefilled, then decoded together)",
    method="gptSessionBenchmark --warm_up 1 --num_runs 5 --duration 0 --batch_size B --input_output_len ISL,OSL; "
           "first-token latency with output length 1; H100/H200/L40S with quant_algo FP8 and kv_cache_quant_algo FP8, "
           "A100 in float16")
VLLM_CI = Source(
    title="vLLM performance benchmark (nightly CI), latency tests",
    publisher="vLLM project, buildkite.com/vllm/performance-benchmark; tests in "
              "vllm-project/vllm .buildkite/nightly-benchmarks/tests/latency-tests.json",
    url_or_file="https://buildkite.com/vllm/performance-benchmark/builds/9555 (8xH100), /builds/9513 (H200), "
                "/builds/9523 (A100-SXM4-80GB)",
    date="not printed on the stored pages: builds 9513-9555, after 2024-07 (their description names Llama 3.1)",
    engine="vLLM (the CI build's own version), dtype auto (bfloat16 for these checkpoints), load_format dummy",
    method="benchmarks/benchmark_latency.py defaults as the page states them: input 32 tokens, output 128 tokens, "
           "batch fixed at 8; mean end-to-end latency over 15 iterations after 5 warm-up")
NIM = Source(
    title="NIM for LLMs benchmarking: Performance (Llama-3.3-70b-instruct results, NIM version 1.8.0)",
    publisher="NVIDIA, docs.nvidia.com",
    url_or_file="https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance",
    date="not printed on the stored page; NIM 1.8.0 of Llama-3.3-70B, so after that model's release (2024-12)",
    engine="NVIDIA NIM 1.8.0 for Llama-3.3-70b-instruct (TensorRT-LLM backend profile, fp8, TP2)",
    method="client-side benchmark (AIPerf/genai-perf) at fixed concurrency, fixed input/output tokens; TTFT and "
           "ITL as means; Throughput(Tokens/s) = output tokens per second")
OCI = Source(
    title="Serving Llama 3.1 405B model with AMD Instinct MI300X Accelerators",
    publisher="Oracle Cloud Infrastructure blog (A. Gowda, S. Srinivasa Raghavan, S. Padgaonkar)",
    url_or_file="https://blogs.oracle.com/cloud-infrastructure/post/serving-llama-31-405b-model-with-amd-mi300x-gpus",
    date="2024-10-10",
    engine="vLLM (ROCm) on BM.GPU.MI300X.8, Llama 3.1 405B FP8",
    method="vLLM scripts/benchmark_latency.py, input 128 and output 128 tokens, 'Average latency in seconds' per batch size")


def _trt(num: int, gpu: str, model: str, tp: int, batch: int, isl: int, osl: int, metric: str, value: float,
         quote: str) -> Figure:
    """One row of the TensorRT-LLM 0.9.0 tables (A100 rows in float16, the others FP8 with an FP8 KV cache)."""
    fp16 = gpu == "a100-80gb-sxm"
    note = "static batching: every request of the batch starts together (this simulator's `run`)"
    if fp16:
        note += "; the page says 'A100 GPUs (FP16)' without the variant: SXM4 80GB assumed (the v0.5 H100vsA100 blog's)"
    if model == "llama-2-7b":
        note += "; 'LLaMA 7B' is Llama-2-7b (the page's build section: Llama2-7b, 32 layers, 32 heads, 11008)"
    if model == "llama-2-70b":
        note += "; 'LLaMA 70B' is Llama-2-70b (80 layers, 64 heads, 8 KV heads, 28672)"
    if model == "mixtral-8x7b":
        note += ("; 'Mixtral 8x7B' taken as Mixtral-8x7B-v0.1 (the page gives no build for it); no expert "
                 "parallelism stated: the experts split by TP as TensorRT-LLM 0.9 does by default")
    if model == "mistral-7b":
        note += ("; 'Mistral 7B' taken as Mistral-7B-v0.1 (the page gives no build for it); its 4096-token "
                 "window never caps a context of these lengths")
    unit = "ms" if metric == "ttft_ms" else "output tok/s/GPU"
    return Figure(f"F{num:02d}", TRT_09, gpu, tp, model, "float16" if fp16 else "fp8", "auto" if fp16 else "fp8",
                  tp, 1, "batch", isl, osl, batch, 0, batch, metric, value, unit, quote, note)


def _thr(num, gpu, model, tp, batch, isl, osl, value):
    table = {"h100-sxm": "H100 GPUs (FP8)", "h200-sxm": "H200 GPUs (FP8)", "a100-80gb-sxm": "A100 GPUs (FP16)",
             "l40s": "L40S GPUs (FP8)"}[gpu]
    return _trt(num, gpu, model, tp, batch, isl, osl, "tok_s_per_gpu", value,
                f"Peak Throughput, {table}: batch {batch}, TP {tp}, input {isl}, output {osl}: "
                f"{value:,.0f} out tok/s/GPU")


def _ttft(num, gpu, model, tp, isl, value):
    table = {"h100-sxm": "H100 GPUs (FP8)", "h200-sxm": "H200 GPUs (FP8)", "a100-80gb-sxm": "A100 GPUs (FP16)",
             "l40s": "L40S GPUs (FP8)"}[gpu]
    return _trt(num, gpu, model, tp, 1, isl, 1, "ttft_ms", value,
                f"Low Latency, {table}: batch 1, TP {tp}, input {isl}: 1st token latency {value} ms")


def _vllm(num, gpu, n, model, tp, value, build, label):
    if model == "mixtral-8x7b":
        test = "mixtral8x7B_tp2"
        note = (f"the page's description says 'mixtral 8x7B' (the dashboard: 'Mixtral 8x7B on 2xA100'); {label} "
                f"assumed, the base model's shape either way; no expert parallelism (vLLM's default then). ")
    else:
        test = "llama8B_tp1" if tp == 1 else "llama70B_tp4"
        note = (f"the tests file names {label} (the page's description says llama-3.1 8B / llama-3 70B); the same "
                f"shape either way. ")
    note += "GPU column reads " + ("'8xH100' (an 8-GPU H100 node; SXM assumed)" if gpu == "h100-sxm" else
                                   "'H200'" if gpu == "h200-sxm" else "'A100-SXM4-80GB'")
    return Figure(f"F{num:02d}", VLLM_CI, gpu, n, model, "bfloat16", "auto", tp, 1, "batch", 32, 128, 8, 0, 8,
                  "e2e_ms", value, "ms", f"build {build}, Latency tests: latency_{test}: Mean latency {value} ms", note)


def _nim(num, isl, osl, conc, metric, value, requests):
    unit = "output tok/s" if metric == "tok_s" else "ms"
    col = {"ttft_ms": "TTFT (ms)", "itl_ms": "ITL (ms)", "tok_s": "Throughput(Tokens/s)"}[metric]
    return Figure(f"F{num:02d}", NIM, "h100-sxm", 2, "llama-3.1-70b", "fp8", "fp8", 2, 1, "closed", isl, osl, 0,
                  conc, requests, metric, value, unit,
                  f"Llama-3.3-70b-instruct, Version 1.8.0, 2 x H100 80G, fp8 TP2, {isl} Input Tokens / {osl} Output "
                  f"Tokens, Concurrency {conc}: {col} {value}",
                  "Llama-3.3-70B has Llama-3.1-70B's shape; 'H100 80G' taken as SXM; KV cache dtype not stated "
                  "(NIM's fp8 profiles quantize it: fp8 assumed); the simulator runs fewer requests than the client")


def _oci(num, batch, seconds):
    return Figure(f"F{num:02d}", OCI, "mi300x", 8, "llama-3.1-405b", "fp8", "auto", 8, 1, "batch", 128, 128, batch,
                  0, batch, "e2e_ms", seconds * 1000.0, "ms",
                  f"Latency measurements table: Batch Size {batch}: Average latency in seconds {seconds:.3f}",
                  "TP not printed: 'a single instance ... All eight GPUs were assigned' (vLLM TP8 assumed); "
                  "KV cache dtype not stated (the activations' assumed); value converted from seconds to ms")


FIGURES: list[Figure] = [
    # TensorRT-LLM 0.9.0, Peak Throughput (static batches)
    _thr(1, "h100-sxm", "llama-2-7b", 1, 896, 128, 128, 19854),
    _thr(2, "h100-sxm", "llama-2-7b", 1, 120, 128, 2048, 6944),
    _thr(3, "h100-sxm", "llama-2-7b", 1, 84, 2048, 128, 2163),
    _thr(4, "h100-sxm", "llama-2-7b", 1, 56, 2048, 2048, 2826),
    _thr(5, "h100-sxm", "llama-2-70b", 2, 1024, 128, 128, 3214),
    _thr(6, "h100-sxm", "llama-2-70b", 4, 512, 128, 2048, 2725),
    _thr(7, "h100-sxm", "llama-2-70b", 2, 96, 2048, 128, 346),
    _thr(8, "h100-sxm", "llama-2-70b", 2, 64, 2048, 2048, 1011),
    _thr(9, "h200-sxm", "llama-2-7b", 1, 896, 128, 128, 20618),
    _thr(10, "h200-sxm", "llama-2-7b", 1, 120, 128, 2048, 8348),
    _thr(11, "h200-sxm", "llama-2-70b", 1, 1024, 128, 128, 3989),
    _thr(12, "h200-sxm", "llama-2-70b", 1, 64, 2048, 128, 418),
    _thr(13, "a100-80gb-sxm", "llama-2-7b", 1, 256, 128, 128, 5390),
    _thr(14, "a100-80gb-sxm", "llama-2-7b", 1, 32, 128, 2048, 1484),
    _thr(15, "a100-80gb-sxm", "llama-2-70b", 4, 1024, 128, 128, 686),
    _thr(16, "l40s", "llama-2-7b", 1, 256, 128, 128, 5885),
    _thr(17, "l40s", "llama-2-7b", 1, 64, 128, 2048, 1654),
    _thr(18, "h100-sxm", "mixtral-8x7b", 2, 512, 128, 128, 5255),
    # TensorRT-LLM 0.9.0, Low Latency (batch 1, first-token latency)
    _ttft(19, "h100-sxm", "llama-2-7b", 1, 128, 6.3),
    _ttft(20, "h100-sxm", "llama-2-7b", 1, 2048, 30.8),
    _ttft(21, "h100-sxm", "llama-2-70b", 4, 128, 19.6),
    _ttft(22, "h100-sxm", "llama-2-70b", 8, 2048, 85.1),
    _ttft(23, "h200-sxm", "llama-2-7b", 1, 2048, 30.2),
    _ttft(24, "h200-sxm", "llama-2-70b", 4, 2048, 103.0),
    _ttft(25, "a100-80gb-sxm", "llama-2-7b", 1, 128, 16.2),
    _ttft(26, "a100-80gb-sxm", "llama-2-7b", 1, 2048, 132.4),
    _ttft(27, "a100-80gb-sxm", "llama-2-70b", 4, 128, 45.6),
    _ttft(28, "a100-80gb-sxm", "llama-2-70b", 8, 2048, 249.2),
    _ttft(29, "l40s", "llama-2-7b", 1, 2048, 80.1),
    _ttft(30, "h100-sxm", "mixtral-8x7b", 2, 2048, 89.5),
    # vLLM nightly CI, benchmark_latency (batch 8, 32 in, 128 out, bfloat16)
    _vllm(31, "h100-sxm", 1, "llama-3.1-8b", 1, 997.542, 9555, "meta-llama/Meta-Llama-3-8B"),
    _vllm(32, "h100-sxm", 4, "llama-3.1-70b", 4, 2444.47, 9555, "meta-llama/Meta-Llama-3-70B-Instruct"),
    _vllm(33, "h200-sxm", 1, "llama-3.1-8b", 1, 834.059, 9513, "meta-llama/Meta-Llama-3-8B"),
    _vllm(34, "h200-sxm", 4, "llama-3.1-70b", 4, 2075.08, 9513, "meta-llama/Meta-Llama-3-70B-Instruct"),
    _vllm(35, "a100-80gb-sxm", 1, "llama-3.1-8b", 1, 1579.27, 9523, "meta-llama/Meta-Llama-3-8B"),
    _vllm(36, "a100-80gb-sxm", 4, "llama-3.1-70b", 4, 3990.59, 9523, "meta-llama/Meta-Llama-3-70B-Instruct"),
    # NVIDIA NIM 1.8.0, Llama-3.3-70B fp8 TP2 on 2 x H100 (closed loop at fixed concurrency)
    _nim(37, 5000, 500, 1, "ttft_ms", 406.77, 4),
    _nim(38, 5000, 500, 1, "itl_ms", 18.58, 4),
    _nim(39, 500, 2000, 1, "ttft_ms", 47.77, 4),
    _nim(40, 500, 2000, 1, "itl_ms", 18.91, 4),
    _nim(41, 5000, 500, 25, "itl_ms", 38.75, 100),
    _nim(42, 5000, 500, 25, "tok_s", 623.4, 100),
    # Oracle (OCI), vLLM on 8 x MI300X, Llama 3.1 405B FP8, benchmark_latency 128 in / 128 out
    _oci(43, 1, 3.530),
    _oci(44, 32, 5.130),
    _oci(45, 256, 17.750),
    # Appended 2026-12-02 (a second pass over the same TensorRT-LLM 0.9.0 page, whose other rows the first pass
    # had not transcribed), written down in full, and the held-out rule below applied to them unchanged, before any
    # of them was simulated. Order: the page's order (Peak Throughput H200, H100, L40S, A100; then Low Latency
    # H200, H100, L40S, A100; each table top to bottom), skipping the rows already above and the models without a
    # shipped shape (GPT-J 6B, Falcon 180B).
    # Peak Throughput, H200 GPUs (FP8)
    _thr(46, "h200-sxm", "mistral-7b", 1, 896, 128, 128, 20460),
    _thr(47, "h200-sxm", "mistral-7b", 1, 120, 128, 2048, 8950),
    _thr(48, "h200-sxm", "mistral-7b", 1, 64, 2048, 128, 2423),
    _thr(49, "h200-sxm", "mistral-7b", 1, 56, 2048, 2048, 3867),
    _thr(50, "h200-sxm", "mixtral-8x7b", 2, 1024, 128, 128, 5444),
    _thr(51, "h200-sxm", "mixtral-8x7b", 2, 256, 128, 2048, 4973),
    _thr(52, "h200-sxm", "mixtral-8x7b", 2, 64, 2048, 128, 605),
    _thr(53, "h200-sxm", "mixtral-8x7b", 2, 64, 2048, 2048, 1821),
    _thr(54, "h200-sxm", "llama-2-7b", 1, 64, 2048, 128, 2391),
    _thr(55, "h200-sxm", "llama-2-7b", 1, 56, 2048, 2048, 3522),
    _thr(56, "h200-sxm", "llama-2-70b", 2, 512, 128, 2048, 3963),
    _thr(57, "h200-sxm", "llama-2-70b", 1, 64, 2048, 2048, 1458),
    # Peak Throughput, H100 GPUs (FP8)
    _thr(58, "h100-sxm", "mistral-7b", 1, 896, 128, 128, 20404),
    _thr(59, "h100-sxm", "mistral-7b", 1, 120, 128, 2048, 8623),
    _thr(60, "h100-sxm", "mistral-7b", 1, 84, 2048, 128, 2405),
    _thr(61, "h100-sxm", "mistral-7b", 1, 56, 2048, 2048, 3731),
    _thr(62, "h100-sxm", "mixtral-8x7b", 2, 128, 128, 2048, 3408),
    _thr(63, "h100-sxm", "mixtral-8x7b", 2, 64, 2048, 128, 588),
    _thr(64, "h100-sxm", "mixtral-8x7b", 2, 32, 2048, 2048, 1317),
    # Peak Throughput, L40S GPUs (FP8)
    _thr(65, "l40s", "mistral-7b", 1, 896, 128, 128, 9562),
    _thr(66, "l40s", "mistral-7b", 1, 120, 128, 2048, 4387),
    _thr(67, "l40s", "mistral-7b", 1, 84, 2048, 128, 971),
    _thr(68, "l40s", "mistral-7b", 1, 56, 2048, 2048, 1721),
    _thr(69, "l40s", "mixtral-8x7b", 4, 256, 128, 128, 1266),
    _thr(70, "l40s", "mixtral-8x7b", 4, 256, 128, 2048, 1490),
    _thr(71, "l40s", "mixtral-8x7b", 4, 64, 2048, 128, 155),
    _thr(72, "l40s", "mixtral-8x7b", 4, 32, 2048, 2048, 412),
    _thr(73, "l40s", "llama-2-7b", 1, 32, 2048, 128, 574),
    _thr(74, "l40s", "llama-2-7b", 1, 16, 2048, 2048, 537),
    _thr(75, "l40s", "llama-2-70b", 2, 256, 128, 128, 562),
    _thr(76, "l40s", "llama-2-70b", 4, 256, 128, 2048, 478),
    _thr(77, "l40s", "llama-2-70b", 2, 16, 2048, 128, 49),
    _thr(78, "l40s", "llama-2-70b", 4, 64, 2048, 2048, 185),
    # Peak Throughput, A100 GPUs (FP16)
    _thr(79, "a100-80gb-sxm", "mistral-7b", 1, 896, 128, 128, 6251),
    _thr(80, "a100-80gb-sxm", "mistral-7b", 1, 120, 128, 2048, 3776),
    _thr(81, "a100-80gb-sxm", "mistral-7b", 1, 64, 2048, 128, 698),
    _thr(82, "a100-80gb-sxm", "mistral-7b", 1, 56, 2048, 2048, 1576),
    _thr(83, "a100-80gb-sxm", "mixtral-8x7b", 2, 512, 128, 128, 2842),
    _thr(84, "a100-80gb-sxm", "mixtral-8x7b", 2, 128, 128, 2048, 1724),
    _thr(85, "a100-80gb-sxm", "mixtral-8x7b", 2, 64, 2048, 128, 319),
    _thr(86, "a100-80gb-sxm", "mixtral-8x7b", 2, 32, 2048, 2048, 801),
    _thr(87, "a100-80gb-sxm", "llama-2-7b", 1, 32, 2048, 128, 533),
    _thr(88, "a100-80gb-sxm", "llama-2-7b", 1, 16, 2048, 2048, 603),
    _thr(89, "a100-80gb-sxm", "llama-2-70b", 8, 512, 128, 2048, 684),
    _thr(90, "a100-80gb-sxm", "llama-2-70b", 4, 96, 2048, 128, 80),
    _thr(91, "a100-80gb-sxm", "llama-2-70b", 4, 64, 2048, 2048, 289),
    # Low Latency, H200 GPUs (FP8)
    _ttft(92, "h200-sxm", "mistral-7b", 1, 128, 5.9),
    _ttft(93, "h200-sxm", "mistral-7b", 1, 2048, 31.7),
    _ttft(94, "h200-sxm", "mixtral-8x7b", 2, 128, 12.1),
    _ttft(95, "h200-sxm", "mixtral-8x7b", 2, 2048, 87.7),
    _ttft(96, "h200-sxm", "llama-2-7b", 1, 128, 5.7),
    _ttft(97, "h200-sxm", "llama-2-70b", 4, 128, 17.8),
    # Low Latency, H100 GPUs (FP8)
    _ttft(98, "h100-sxm", "mistral-7b", 1, 128, 6.5),
    _ttft(99, "h100-sxm", "mistral-7b", 1, 2048, 32.4),
    _ttft(100, "h100-sxm", "mixtral-8x7b", 2, 128, 13.4),
    # Low Latency, L40S GPUs (FP8)
    _ttft(101, "l40s", "mistral-7b", 1, 128, 15.4),
    _ttft(102, "l40s", "mistral-7b", 1, 2048, 87.3),
    _ttft(103, "l40s", "mixtral-8x7b", 4, 128, 19.5),
    _ttft(104, "l40s", "mixtral-8x7b", 4, 2048, 165.6),
    _ttft(105, "l40s", "llama-2-7b", 1, 128, 14.1),
    _ttft(106, "l40s", "llama-2-70b", 8, 128, 70.4),
    _ttft(107, "l40s", "llama-2-70b", 4, 2048, 673.3),
    # Low Latency, A100 GPUs (FP16)
    _ttft(108, "a100-80gb-sxm", "mistral-7b", 1, 128, 16.3),
    _ttft(109, "a100-80gb-sxm", "mistral-7b", 1, 2048, 139.6),
    _ttft(110, "a100-80gb-sxm", "mixtral-8x7b", 2, 128, 23.8),
    _ttft(111, "a100-80gb-sxm", "mixtral-8x7b", 2, 2048, 160.9),
    # Appended 2026-12-02 under the same rule, before simulating them: the vLLM nightly CI's Mixtral latency test on
    # the two builds above whose stored pages print it (H200, then A100; build 9555's H100 row was not found)
    _vllm(112, "h200-sxm", 2, "mixtral-8x7b", 2, 1921.1, 9513, "mistralai/Mixtral-8x7B-Instruct-v0.1"),
    _vllm(113, "a100-80gb-sxm", 2, "mixtral-8x7b", 2, 3643.84, 9523, "mistralai/Mixtral-8x7B-Instruct-v0.1"),
]


def is_held_out(fig: Figure) -> bool:
    """The fixed rule: every third figure by number (F03, F06, ...) is held out of the fit."""
    return int(fig.id[1:]) % HELD_OUT_EVERY == 0


def held_out() -> list[Figure]:
    return [f for f in FIGURES if is_held_out(f)]


def fitted() -> list[Figure]:
    return [f for f in FIGURES if not is_held_out(f)]
