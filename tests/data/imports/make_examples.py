"""Writes the example result files beside it, each built to its tool's documented schema, with the
headline figures computed the way that tool's own code computes them (see README.md for the sources).

    python tests/data/imports/make_examples.py

Deterministic (seeded); the files are committed, this script says how they were made. The
computation here follows each tool's source, not backend.results.importers: the tests then check that
the importers, which rebuild token timelines and run this project's summary, reproduce these figures.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
rng = np.random.default_rng(44)


def streams(n: int):
    """n requests: start offset (s), prompt tokens, TTFT (s), chunk gaps (s), tokens per chunk, tail (s)."""
    out = []
    for i in range(n):
        chunks = int(rng.integers(4, 12))
        gaps = [float(round(g, 6)) for g in rng.gamma(4.0, 0.005, chunks - 1)]
        per_chunk = [1] * chunks
        if i == 2:   # one stream whose third chunk carries three tokens (a bundled chunk)
            per_chunk[2] = 3
        out.append({"start": round(0.05 * i + float(rng.uniform(0, 0.02)), 6), "prompt": int(rng.integers(20, 200)),
                    "ttft": round(float(rng.uniform(0.03, 0.12)), 6), "gaps": gaps, "per_chunk": per_chunk,
                    "tail": round(float(rng.uniform(0.0002, 0.0008)), 6)})
    return out


def vllm_example() -> None:
    """vllm/benchmarks/serve.py: calculate_metrics() and the result dict of benchmark() and main_async()."""
    reqs = streams(8)
    ok = [i != 5 for i in range(8)]   # request 5 failed
    base = 1523.25
    ttfts = [r["ttft"] if o else 0.0 for r, o in zip(reqs, ok)]
    itls = [r["gaps"] if o else [] for r, o in zip(reqs, ok)]
    latencies = [r["ttft"] + sum(r["gaps"]) + r["tail"] if o else 0.0 for r, o in zip(reqs, ok)]
    output_lens = [sum(r["per_chunk"]) if o else 0 for r, o in zip(reqs, ok)]
    duration = max(r["start"] + lat for r, lat in zip(reqs, latencies)) + 0.004
    # calculate_metrics: successful requests only; tpot over output_len > 1; itls pooled
    s_ttft = [t for t, o in zip(ttfts, ok) if o]
    s_itl = [g for gaps, o in zip(itls, ok) if o for g in gaps]
    s_e2e = [lat for lat, o in zip(latencies, ok) if o]
    s_tpot = [(lat - t) / (n - 1) for lat, t, n, o in zip(latencies, ttfts, output_lens, ok) if o and n > 1]
    total_input = sum(r["prompt"] for r, o in zip(reqs, ok) if o)
    total_output = sum(output_lens)
    result = {"date": "20261204-101530", "endpoint_type": "openai", "backend": "openai", "label": None,
              "model_id": "meta-llama/Llama-3.1-8B-Instruct", "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
              "num_prompts": 8, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 4,
              "duration": duration, "completed": sum(ok), "failed": 8 - sum(ok),
              "total_input_tokens": total_input, "total_output_tokens": total_output,
              "request_throughput": sum(ok) / duration, "request_goodput": None,
              "output_throughput": total_output / duration,
              "total_token_throughput": (total_input + total_output) / duration,
              "input_lens": [r["prompt"] for r in reqs], "output_lens": output_lens, "ttfts": ttfts, "itls": itls,
              "latencies": latencies, "start_times": [base + r["start"] for r in reqs],
              "queue_times": [0.0] * 8, "generated_texts": ["" if not o else "text" for o in ok],
              "errors": ["" if o else "HTTP 500: Internal Server Error" for o in ok],
              "max_output_tokens_per_s": float(total_output), "max_concurrent_requests": 4, "rtfx": 0.0}
    for name, values in (("ttft", s_ttft), ("tpot", s_tpot), ("itl", s_itl), ("e2el", s_e2e)):
        result[f"mean_{name}_ms"] = float(np.mean(values) * 1000)
        result[f"median_{name}_ms"] = float(np.median(values) * 1000)
        result[f"std_{name}_ms"] = float(np.std(values) * 1000)
        result[f"p99_{name}_ms"] = float(np.percentile(values, 99) * 1000)
    (HERE / "vllm-bench-serve.json").write_text(json.dumps(result, indent=2) + "\n")


def aiperf_example() -> None:
    """AIPerf: MetricRecordInfo lines (working-with-profile-exports.md) and JsonExportData (export_models.py)."""
    reqs = streams(6)
    t0 = 1764843330_000_000_000
    folder = HERE / "aiperf"
    folder.mkdir(exist_ok=True)
    lines, ttft, itl, lat, osl_total, ends, starts = [], [], [], [], 0, [], []
    for i, r in enumerate(reqs):
        start = t0 + int(r["start"] * 1e9)
        starts.append(start)
        gaps_ms = [g * 1000 for g in r["gaps"]]
        n = len(r["per_chunk"]) if i != 2 else sum(r["per_chunk"])
        latency_ms = r["ttft"] * 1000 + sum(gaps_ms) + r["tail"] * 1000
        end = start + int(round(latency_ms * 1e6))
        meta = {"session_num": i, "x_request_id": f"req-{i}", "x_correlation_id": f"corr-{i}",
                "conversation_id": f"conv-{i}", "turn_index": 0, "request_start_ns": start,
                "request_ack_ns": start + 1_000_000, "request_end_ns": end, "worker_id": "worker_0",
                "record_processor_id": "record_processor_0", "benchmark_phase": "profiling",
                "was_cancelled": False, "cancellation_time_ns": None}
        if i == 4:   # a failed request: metrics hold only its input length
            lines.append({"metadata": meta, "metrics": {"error_isl": {"value": r["prompt"], "unit": "tokens"}},
                          "error": {"code": 500, "type": "HTTPError", "message": "Internal Server Error"}})
            continue
        per_request_itl = (latency_ms - r["ttft"] * 1000) / (n - 1)
        metrics = {"input_sequence_length": {"value": r["prompt"], "unit": "tokens"},
                   "time_to_first_token": {"value": r["ttft"] * 1000, "unit": "ms"},
                   "request_latency": {"value": latency_ms, "unit": "ms"},
                   "output_token_count": {"value": n, "unit": "tokens"},
                   "inter_chunk_latency": {"value": gaps_ms, "unit": "ms"},
                   "output_sequence_length": {"value": n, "unit": "tokens"},
                   "inter_token_latency": {"value": per_request_itl, "unit": "ms"},
                   "output_token_throughput_per_user": {"value": 1000 / per_request_itl, "unit": "tokens/sec/user"}}
        lines.append({"metadata": meta, "metrics": metrics, "error": None})
        ttft.append(r["ttft"] * 1000)
        itl.append(per_request_itl)
        lat.append(latency_ms)
        osl_total += n
        ends.append(end)
    (folder / "profile_export.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    duration_s = (max(ends) - min(starts)) / 1e9   # max_response_timestamp - min_request_timestamp

    def result(values, unit):
        v = np.asarray(values, dtype=float)
        out = {"unit": unit, "avg": float(v.mean())}
        out.update({f"p{q}": float(np.percentile(v, q)) for q in (1, 5, 10, 25, 50, 75, 90, 95, 99)})
        out.update({"min": float(v.min()), "max": float(v.max()), "std": float(v.std())})
        return out
    summary = {"schema_version": "1.0", "aiperf_version": "0.3.0", "benchmark_id": "example-44",
               "request_throughput": {"unit": "requests/sec", "avg": len(ttft) / duration_s},
               "request_latency": result(lat, "ms"), "request_count": {"unit": "requests", "avg": len(ttft)},
               "time_to_first_token": result(ttft, "ms"), "inter_token_latency": result(itl, "ms"),
               "output_token_throughput": {"unit": "tokens/sec", "avg": osl_total / duration_s},
               "benchmark_duration": {"unit": "sec", "avg": duration_s},
               "error_request_count": {"unit": "requests", "avg": 1},
               "input_config": {"endpoint": {"model_names": ["Qwen/Qwen3-0.6B"], "type": "chat", "streaming": True}},
               "was_cancelled": False}
    (folder / "profile_export_aiperf.json").write_text(json.dumps(summary, indent=2) + "\n")


def guidellm_summary(pairs):
    """statistics.py DistributionSummary.from_values -> from_pdf -> Percentiles.from_pdf."""
    a = np.asarray(pairs, dtype=float)
    order = np.argsort(a[:, 0])
    values, inverse = np.unique(a[order, 0], return_inverse=True)
    weights = np.zeros_like(values)
    np.add.at(weights, inverse, a[order, 1])
    probs = weights / weights.sum()
    cdf = np.cumsum(probs)
    pct = {k: float(values[np.searchsorted(cdf, q, side="left")])
           for k, q in (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99))}
    mean = float(np.sum(values * probs))
    return {"mean": mean, "median": pct["p50"], "mode": float(values[np.argmax(probs)]),
            "variance": float(np.sum((values - mean) ** 2 * probs)), "min": float(values[0]),
            "max": float(values[-1]), "count": int(round(a[:, 1].sum())), "percentiles": pct}


def guidellm_example() -> None:
    """GuideLLM: GenerativeBenchmarksReport (report.py) of one GenerativeBenchmark (benchmark.py, metrics.py)."""
    reqs = streams(6)
    t0 = 1764843330.0
    successful, ttft, itl, tpot, latency = [], [], [], [], []
    for i, r in enumerate(reqs):
        start = t0 + r["start"]
        first = start + r["ttft"]
        last = first + sum(r["gaps"])
        end = last + r["tail"]
        n = sum(r["per_chunk"])
        timings = {"request_start": start, "first_token_iteration": first, "last_token_iteration": last,
                   "request_end": end, "resolve_end": end + 0.0001, "token_iterations": len(r["per_chunk"])}
        stats = {"type_": "generative_request_stats", "request_id": f"req-{i}", "info": {"timings": timings},
                 "input_metrics": {"total_tokens": r["prompt"]}, "output_metrics": {"total_tokens": n},
                 "request_start_time": start, "request_end_time": end, "request_latency": end - start,
                 "prompt_tokens": r["prompt"], "output_tokens": n, "total_tokens": r["prompt"] + n,
                 "time_to_first_token_ms": 1000 * (first - start),
                 "time_per_output_token_ms": 1000 * (last - start) / n,
                 "inter_token_latency_ms": 1000 * (last - first) / (n - 1)}
        successful.append(stats)
        ttft.append((stats["time_to_first_token_ms"], 1.0))
        tpot.append((stats["time_per_output_token_ms"], float(n)))
        itl.append((stats["inter_token_latency_ms"], n - 1.0))
        latency.append((end - start, 1.0))
    empty = {"mean": 0.0, "median": 0.0, "mode": 0.0, "variance": 0.0, "min": 0.0, "max": 0.0, "count": 0,
             "percentiles": {"p50": 0.0, "p90": 0.0, "p95": 0.0, "p99": 0.0}}

    def status(pairs):
        s = guidellm_summary(pairs)
        return {"successful": s, "incomplete": empty, "errored": empty, "total": s}
    bench = {"type_": "generative_benchmark", "config": {"strategy": {"type_": "synchronous"}},
             "metrics": {"request_totals": {"successful": 6, "incomplete": 0, "errored": 0, "total": 6},
                         "time_to_first_token_ms": status(ttft), "inter_token_latency_ms": status(itl),
                         "time_per_output_token_ms": status(tpot), "request_latency": status(latency)},
             "requests": {"successful": successful, "incomplete": [], "errored": [], "total": None},
             "start_time": t0, "end_time": t0 + 1.0, "duration": 1.0}
    report = {"args": {"target": "http://localhost:8000", "model": "Qwen/Qwen3-0.6B", "profile": "synchronous",
                       "rate": None}, "benchmarks": [bench]}
    (HERE / "guidellm-benchmarks.json").write_text(json.dumps(report, indent=2) + "\n")


FIELDS = ["build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename", "model_type",
          "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads", "cpu_mask", "cpu_strict", "poll",
          "type_k", "type_v", "n_gpu_layers", "n_cpu_moe", "split_mode", "main_gpu", "no_kv_offload", "flash_attn",
          "devices", "tensor_split", "tensor_buft_overrides", "load_mode", "embeddings", "no_op_offload", "no_host",
          "fit_target", "fit_min_ctx", "n_prompt", "n_gen", "n_depth", "test_time", "avg_ns", "stddev_ns",
          "avg_ts", "stddev_ts"]


def llama_bench_example() -> None:
    """tools/llama-bench/llama-bench.cpp: test::get_fields()/get_values(), json_printer and csv_printer."""
    rows = []
    for n_prompt, n_gen, base_ns in ((512, 0, 180_000_000), (0, 128, 1_450_000_000)):
        samples = [int(base_ns * f) for f in (1.0, 1.013, 0.991, 1.042, 1.004)]
        ts = [1e9 * (n_prompt + n_gen) / t for t in samples]
        avg_ns = sum(samples) // len(samples)                     # avg<uint64_t>: an integer mean
        mean_ts = sum(ts) / len(ts)
        n = len(samples)
        # stdev<T>: sqrt(sq_sum / (n - 1) - mean * mean * n / (n - 1)), in T's arithmetic (uint64_t for the times)
        sq_ns = sum(t * t for t in samples) % 2**64
        stddev_ns = int(np.sqrt(sq_ns // (n - 1) - avg_ns * avg_ns * n // (n - 1)))
        stddev_ts = float(np.sqrt(sum(x * x for x in ts) / (n - 1) - mean_ts * mean_ts * n / (n - 1)))
        row = {"build_commit": "b7f3a1c", "build_number": 7120, "cpu_info": "AMD EPYC 9454 48-Core Processor",
               "gpu_info": "NVIDIA H100 80GB HBM3", "backends": "CUDA", "model_filename": "models/qwen3-0.6b-q8_0.gguf",
               "model_type": "qwen3 0.6B Q8_0", "model_size": 639446688, "model_n_params": 596049920,
               "n_batch": 2048, "n_ubatch": 512, "n_threads": 48, "cpu_mask": "0x0", "cpu_strict": False, "poll": 50,
               "type_k": "f16", "type_v": "f16", "n_gpu_layers": 99, "n_cpu_moe": 0, "split_mode": "layer",
               "main_gpu": 0, "no_kv_offload": False, "flash_attn": 0, "devices": "auto", "tensor_split": "0.00",
               "tensor_buft_overrides": "none", "load_mode": "mmap", "embeddings": False, "no_op_offload": 0,
               "no_host": False, "fit_target": 0, "fit_min_ctx": 0, "n_prompt": n_prompt, "n_gen": n_gen,
               "n_depth": 0, "test_time": "2026-12-04T10:15:30Z", "avg_ns": avg_ns,
               "stddev_ns": stddev_ns, "avg_ts": round(mean_ts, 6), "stddev_ts": round(stddev_ts, 6),   # to_string: %f
               "samples_ns": samples, "samples_ts": [float(f"{x:.6g}") for x in ts]}   # ostream <<: 6 digits
        rows.append(row)
    (HERE / "llama-bench.json").write_text(json.dumps(rows, indent=2) + "\n")
    with open(HERE / "llama-bench.csv", "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\n")   # csv_printer quotes every value
        f.write(",".join(FIELDS) + "\n")                                 # ... but not the header
        for row in rows:
            w.writerow([_csv_value(row[k]) for k in FIELDS])


def _csv_value(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return f"{v:.6f}"                                                # std::to_string(double)
    return str(v)


if __name__ == "__main__":
    vllm_example()
    aiperf_example()
    guidellm_example()
    llama_bench_example()
