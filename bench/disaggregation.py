"""Disaggregated prefill and decode against one engine, measured side by side in one run; and the
prefill:decode split of 8 simulated datacenter GPUs.

    python -m bench.disaggregation [--readme]    (alone on the machine: its figures are timings)

1. The KV hand-off between two processes of this machine, shared memory against a pipe: one
   prompt's KV block of the bundled model (every layer's keys and values) packed in one
   process and written into a cache slot in the other, both transports interleaved.
2. The bundled model under continuous, chunked and disaggregated (1 prefill + 1 decode engine
   process, one core each) with the same total cores, on `long-prompts-during-decode` and on
   steady chat traffic (`poisson-chat`): p50/p99 TTFT and ITL, output tokens/s, and the
   disaggregated run's mean KV transfer time and bytes.
3. `sweep pd-ratio` of llama-8b on 8 x h100-sxm (KV over NVLink) for 2,000-token and 200-token prompts.

With --readme the tables go into bench/README.md between the disaggregation markers.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from backend.config import EngineConfig, ModelChoice, RunConfig, SamplingConfig
from backend.session import execute
from backend.workload.spec import apply_overrides, load_workload
from bench.common import add_readme_flag, log, measured_line, publish


# ---- 1. the hand-off between two processes ------------------------------------------------------

def transport_child(fd: str) -> None:
    """The receiving process: unpack each block into its cache slot, answer when it is there."""
    from multiprocessing.connection import Connection
    import torch
    from backend.engine.kv_transfer import Arena, unpack, view_of
    from backend.models.base import KVCache
    from backend.loaders.weights import model_header
    torch.set_num_threads(1)
    conn = Connection(int(fd))
    shape_name, arena_fd, max_tokens = conn.recv()
    shape, _ = model_header(shape_name)
    cache = KVCache(shape, 1, max_tokens, "cpu", torch.float32)
    arena = None
    buffer = bytearray(0)
    while True:
        message = conn.recv()
        if message[0] == "quit":
            return
        _, transport, block = message
        if transport == "shm":
            arena = arena or Arena.open(arena_fd, num_buffers=1)
            unpack(cache, 0, view_of(block, arena.map))
        else:
            if len(buffer) < block.nbytes:
                buffer = bytearray(block.nbytes)
            conn.recv_bytes_into(buffer)
            unpack(cache, 0, view_of(block, buffer))
        conn.send("done")


def measure_transports(sizes_tokens: list[int], repeats: int) -> list[tuple]:
    """(tokens, MB, shm median ms, pipe median ms) per size, the two transports interleaved."""
    import torch
    from backend.engine.kv_transfer import Arena, block_of, new_memfd, pack, view_of
    from backend.launcher import end_process, start_child
    from backend.loaders.weights import model_header
    from backend.models.base import KVCache
    shape, _ = model_header("smollm2-135m")
    top = max(sizes_tokens)
    cache = KVCache(shape, 1, top, "cpu", torch.float32)
    for k, v in zip(cache.k, cache.v):
        k.normal_()
        v.normal_()
    fd = new_memfd("bench-kv")
    arena = Arena(fd, block_of(cache, top).nbytes, num_buffers=1, create=True)
    process, conn = start_child("bench.disaggregation", "transport_child", (fd,))
    rows = []
    try:
        conn.send(("smollm2-135m", fd, top))
        for n in sizes_tokens:
            block = block_of(cache, n)
            times = {"shm": [], "pipe": []}
            payload = torch.empty(block.shape, dtype=block.torch_dtype)
            for _ in range(repeats + 1):   # the first round warms both paths up and is left out
                for transport in ("shm", "pipe"):
                    start = time.perf_counter()
                    if transport == "shm":
                        pack(cache, 0, block, view_of(block, arena.map))
                        conn.send(("kv", "shm", block))
                    else:
                        pack(cache, 0, block, payload)
                        conn.send(("kv", "pipe", block))
                        conn.send_bytes(payload.view(torch.uint8).reshape(-1).numpy())
                    assert conn.recv() == "done"
                    times[transport].append((time.perf_counter() - start) * 1000.0)
            rows.append((n, block.nbytes / 1e6, statistics.median(times["shm"][1:]),
                         statistics.median(times["pipe"][1:])))
            log(f"hand-off of {n} tokens ({block.nbytes / 1e6:.1f} MB): shm {rows[-1][2]:.2f} ms, "
                f"pipe {rows[-1][3]:.2f} ms")
        conn.send(("quit",))
        process.wait(10)
    finally:
        end_process(process)
        conn.close()
        arena.close()
    return rows


# ---- 2. the bundled model under three policies ----------------------------------------------------

def real_runs(workload: str, overrides: dict, max_batch: int, chunk_tokens: int, cores: int) -> list[tuple]:
    spec = apply_overrides(load_workload(workload), **overrides)
    rows = []
    for policy in ("continuous", "chunked", "disaggregated"):
        engine = EngineConfig(policy=policy, max_batch=max_batch, chunk_tokens=chunk_tokens)
        config = RunConfig(mode="load", model=ModelChoice("smollm2-135m", "cpu", "auto"),
                           sampling=SamplingConfig(ignore_eos=True), workload=spec, engine=engine, threads=cores)
        log(f"{workload}: {policy} on {cores} cores")
        finished = execute(config, lambda e: None, lambda: False)
        if finished.error:
            raise SystemExit(f"{workload} {policy}: {finished.error}")
        rows.append((policy, finished.summary, finished.data.info))
    return rows


def real_table(title: str, spec_text: str, rows: list[tuple]) -> list[str]:
    lines = [f"**{title}**: {spec_text}", "",
             "| policy | layout | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | "
             "KV transfer mean ms | KV bytes mean |",
             "|---|---|---|---|---|---|---|---|---|"]
    for policy, s, info in rows:
        layout = info.disaggregated
        if layout:
            where = ", ".join(f"{w['name']} on core {','.join(map(str, w['cores']))}" for w in layout.workers)
            where += f" (KV by {layout.kv_transport})"
            kv = (f"{s.split_kv_transfer_mean_ms:.1f}", f"{s.kv_bytes_mean / 1e6:.1f} MB")
        else:
            where = f"one engine, {info.host.threads} threads"
            kv = ("-", "-")
        lines.append(f"| {policy} | {where} | {s.output_tokens_per_s:.1f} | {s.ttft_p50_ms:.0f} | "
                     f"{s.ttft_p99_ms:.0f} | {s.itl_p50_ms:.1f} | {s.itl_p99_ms:.1f} | {kv[0]} | {kv[1]} |")
    split = next((s for policy, s, _ in rows if policy == "disaggregated"), None)
    if split is not None:
        lines += ["", f"Disaggregated TTFT, means: queue {split.split_queue_mean_ms:.0f} ms + prefill "
                      f"{split.split_prefill_mean_ms:.0f} ms + KV transfer {split.split_kv_transfer_mean_ms:.1f} ms "
                      f"+ first decode step {split.split_first_decode_mean_ms:.1f} ms."]
    return lines


# ---- 3. the simulated P:D sweep ------------------------------------------------------------------

def simulated_sweeps(requests: int) -> list[str]:
    from backend.config import SweepSpec
    from backend.events import PDPoint
    from backend.session import execute
    lines = []
    for prompt, rate in (("2000", 40.0), ("200", 120.0)):
        spec = apply_overrides(load_workload("poisson-chat"), num_requests=requests, rate=rate, prompt_len=prompt,
                               output_len="200", prompt_source="synthetic")
        config = RunConfig(mode="sweep-pd-ratio", model=ModelChoice("llama-8b"), profile="h100-sxm", simulate=True,
                           engine=EngineConfig(policy="disaggregated", max_batch=128), workload=spec,
                           slo_ttft_ms=1000.0, slo_tpot_ms=50.0, sweep=SweepSpec("pd-ratio", total_devices=8))
        log(f"pd-ratio sweep, {prompt}-token prompts at {rate:g}/s")
        start = time.perf_counter()
        points: list = []
        execute(config, lambda e: points.append(e) if isinstance(e, PDPoint) else None, lambda: False)
        wall = time.perf_counter() - start
        lines += ["", f"**{prompt}-token prompts**, 200 output tokens, {requests} requests, Poisson at {rate:g}/s; "
                      f"SLO TTFT <= 1,000 ms and TPOT <= 50 ms; KV over nvlink4 (450 GB/s, 5 us); "
                      f"{wall:.1f} s to simulate all seven splits", "",
                  "| split | goodput req/s | SLO met | output tok/s | tok/s per device | TTFT p50 ms | TTFT p99 ms | "
                  "ITL p50 ms | ITL p99 ms | KV transfer ms | |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for pt in points:
            lines.append(f"| {pt.split} | {pt.goodput_rps:.1f} | {pt.slo_attainment:.0%} | {pt.output_tokens_per_s:,.0f} | "
                         f"{pt.tokens_per_s_per_device:,.0f} | {pt.ttft_p50_ms:,.0f} | {pt.ttft_p99_ms:,.0f} | "
                         f"{pt.itl_p50_ms:.1f} | {pt.itl_p99_ms:.1f} | {pt.kv_transfer_mean_ms:.2f} | "
                         f"{'**best**' if pt.best else ''} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_readme_flag(parser)
    parser.add_argument("--long-requests", type=int, default=16)
    parser.add_argument("--chat-requests", type=int, default=24)
    parser.add_argument("--sim-requests", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=5, help="timed hand-offs per size and transport")
    parser.add_argument("--skip-real", action="store_true", help="only the hand-off and the simulated sweep")
    args = parser.parse_args()
    cores = min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    lines = [measured_line(), "",
             "**The KV hand-off between two processes** (the bundled model's KV block: 30 layers x keys and values x "
             "3 heads x 64, float32, 46 KB a token; packed in one process, in the other's cache slot when it answers; "
             f"median of {args.repeats}, the two interleaved):", "",
             "| prompt tokens | MB | shared memory ms | GB/s | pipe ms | GB/s |", "|---|---|---|---|---|---|"]
    for n, mb, shm, pipe in measure_transports([64, 512, 1536], args.repeats):
        lines.append(f"| {n} | {mb:.1f} | {shm:.2f} | {mb / shm:.2f} | {pipe:.2f} | {mb / pipe:.2f} |")
    if not args.skip_real:
        long_rows = real_runs("long-prompts-during-decode", {"num_requests": args.long_requests}, 8, 256, cores)
        spec = apply_overrides(load_workload("long-prompts-during-decode"), num_requests=args.long_requests)
        lines += [""] + real_table("long-prompts-during-decode", f"{args.long_requests} requests, constant "
                                   f"{spec.rate:g}/s, prompts {spec.prompt_len.describe()}, outputs "
                                   f"{spec.output_len.describe()} tokens; max batch 8, chunk 256 tokens; "
                                   f"{cores} cores in every run", long_rows)
        chat = apply_overrides(load_workload("poisson-chat"), num_requests=args.chat_requests)
        chat_rows = real_runs("poisson-chat", {"num_requests": args.chat_requests}, 8, 256, cores)
        lines += [""] + real_table("poisson-chat (steady chat traffic)", f"{args.chat_requests} text prompts, Poisson "
                                   f"{chat.rate:g}/s, prompts {chat.prompt_len.describe()}, outputs "
                                   f"{chat.output_len.describe()} tokens; max batch 8, chunk 256 tokens; "
                                   f"{cores} cores in every run", chat_rows)
    lines += ["", "**Simulated: llama-8b on 8 x h100-sxm**, every prefill:decode split (`sweep pd-ratio "
                  "--total-devices 8`)"] + simulated_sweeps(args.sim_requests)
    return publish("disaggregation", lines, args.readme)


if __name__ == "__main__":
    sys.exit(main())
