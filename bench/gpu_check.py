"""The GPU path's smoke check, for the first machine that has one (about five minutes): one table, exit
status 1 on any failure. `bash bench/gpu_check.sh` runs it; `--dry-run` runs what needs no GPU
(the arguments, the table, the torch line, the sizes the checks will use) and reports each GPU
check as skipped, so the script itself is tested on the CPU.

    gpu                nvidia-smi's name, driver and memory
    torch              its version, a CUDA build, at least backend.TORCH_FLOOR
    cuda-tests         the tests named *cuda* only (`pytest -k cuda`), not the CPU suite
    graphs-vs-eager    the same tokens through the engine with CUDA graphs and without (tiny, float32)
    step-clock         CUDA events around each runner step against the step time the engine records (0.5 ms)
    decode-vs-max-len  batch-16 decode at context 256: max_len 4,096 no slower than 256 (within 15%)
    second-runner      a runner at 60% of free memory, dropped, then another: the fit check must pass
    run-device-cuda    `run --device cuda` on the synthetic llama-1b in bfloat16, and its run.json
    oversized-batch    refused in one line (exit status 2) before anything is allocated
    calibrate          the measured bandwidth 60-100% and bf16 rate 40-100% of the shipped profile's datasheet
    spec-greedy        the bundled model's greedy tokens with `--spec ngram --spec-tokens 4` are those without
                       (3 prompts alone and together, CUDA graphs on); tokens per verification
    spec-verify        a K+1 = 5 verification over a one-token decode step, batch 1, 128 cached: at most 1.25x
                       (the bundled model at float32 and bfloat16, llama-8b at bfloat16; bench.speculative's
                       step_costs on CUDA)

The engine-level checks run in this process, each caught on its own (a failure is a row, not a
traceback); the CLI and the tests run as children.
"""
from __future__ import annotations

import argparse
import functools
import gc
import json
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from bench.common import ROOT, add_readme_flag, drive_engine, log, measured_line, publish
from bench.gpu_check_spec import SPEC_DTYPES, SPEC_LARGE, VERIFY_LIMIT, check_spec_greedy, check_spec_verify

CLOCK_TOLERANCE_MS = 0.5
GROWTH_LIMIT = 1.15                 # decode at max_len 4,096 over 256: "does not grow", with noise
BANDWIDTH_RANGE = (0.60, 1.00)      # calibrated / datasheet
BF16_RANGE = (0.40, 1.00)
OVERSIZED = dict(batch=4096, prompt_len=4000, output_len=96)   # llama-1b bf16: about 512 GiB of KV cache
MODEL = "llama-1b"


@dataclass(slots=True)
class Row:
    check: str
    status: str     # pass | fail | skip
    detail: str


@dataclass(slots=True)
class Check:
    name: str
    needs_gpu: bool
    run: Callable[[argparse.Namespace], tuple[str, str]]   # (status, detail)


def within(value: float, reference: float, bounds: tuple[float, float]) -> bool:
    """value / reference inside [low, high]."""
    return reference > 0 and bounds[0] <= value / reference <= bounds[1]


def clock_agrees(event_ms: list[float], step_ms: list[float], tolerance_ms: float = CLOCK_TOLERANCE_MS) -> bool:
    """The median gap between the recorded step time and the device's own time of the step."""
    return bool(event_ms) and abs(statistics.median(s - e for s, e in zip(step_ms, event_ms))) <= tolerance_ms


def does_not_grow(short_ms: float, long_ms: float, limit: float = GROWTH_LIMIT) -> bool:
    return long_ms <= short_ms * limit


def table(rows: list[Row]) -> str:
    """The report: a markdown table (bench/README.md takes it as it is)."""
    width = max(len(r.check) for r in rows)
    lines = [f"| {'check':<{width}} | result | detail |", f"|{'-' * (width + 2)}|--------|--------|"]
    lines += [f"| {r.check:<{width}} | {r.status:<6} | {r.detail} |" for r in rows]
    return "\n".join(lines)


# ---- the checks ----------------------------------------------------------------------------------

def check_gpu(args) -> tuple[str, str]:
    done = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                          capture_output=True, text=True, timeout=30)
    if done.returncode:
        return "fail", f"nvidia-smi exited with {done.returncode}: {done.stderr.strip()[:120]}"
    return "pass", "; ".join(line.strip() for line in done.stdout.splitlines() if line.strip())


def check_torch(args) -> tuple[str, str]:
    import torch
    from backend.cli.doctor import torch_too_old
    old = torch_too_old(str(torch.__version__))
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
    detail = f"torch {torch.__version__}, {build}" + (f"; {old}" if old else "")
    if old or (not args.dry_run and not torch.cuda.is_available()):
        return "fail", detail + ("" if old else "; no CUDA device visible")
    return "pass", detail


def check_tests(args) -> tuple[str, str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "cuda", "tests",
                           "--ignore=tests/gui"],   # the window's tests: none is a CUDA one, and they need Qt
                          cwd=ROOT, capture_output=True, text=True, timeout=args.tests_timeout)
    last = (done.stdout.strip().splitlines() or ["no output"])[-1]
    return ("pass" if done.returncode == 0 else "fail"), last


@functools.lru_cache(maxsize=1)
def _loaded(dtype: str):
    """llama-1b on the GPU (random weights, filled on the device), kept for the next check that asks."""
    from backend.loaders.weights import load_model
    return load_model(MODEL, device="cuda", dtype=dtype)


def _engine_run(loaded, num_slots: int, max_len: int, specs, graphs: bool | None = None, wrap=None):
    """The engine loop over `specs` on a fresh runner; its recorder (steps, tokens)."""
    from backend.config import SamplingConfig
    from backend.engine.runner import build_runner
    runner = build_runner(loaded, num_slots, max_len, SamplingConfig(ignore_eos=True), use_cuda_graphs=graphs)
    if wrap is not None:
        runner.run = wrap(runner.run)
    return drive_engine(runner, specs, "continuous", num_slots, max_len, "gpu-check")


def _specs(n: int, prompt_len: int, output_len, vocab: int):
    from backend.workload.arrivals import RequestSpec
    lengths = output_len if isinstance(output_len, list) else [output_len] * n
    return [RequestSpec(i, 0.0, [(7 * i + 13 * j) % vocab for j in range(prompt_len)], "", lengths[i])
            for i in range(n)]


def check_graphs(args) -> tuple[str, str]:
    import torch
    from backend.loaders.weights import load_model
    # the tiny shape with large random weights, float32: greedy choices far from ties, so any
    # difference is the graphs' (stale logits, an empty replay), not rounding
    loaded = load_model("tiny", device="cuda", dtype="float32")
    torch.manual_seed(0)
    with torch.no_grad():
        for p in loaded.model.parameters():
            if p.ndim > 1:
                p.normal_(0, 0.3)
    specs = _specs(6, 32, [3 + 2 * i for i in range(6)], loaded.shape.vocab_size)

    def tokens(graphs: bool) -> dict[int, list[int]]:
        records = _engine_run(loaded, 3, 64, specs, graphs)
        return {rid: [t.token_id for t in records.tokens if t.request_id == rid] for rid in range(6)}
    eager, graphs = tokens(False), tokens(True)
    same = sum(a == b for rid in eager for a, b in zip(eager[rid], graphs[rid]))
    total = sum(len(v) for v in eager.values())
    return ("pass" if eager == graphs and total else "fail"), \
        f"{same}/{total} tokens the same (tiny, float32, 6 requests in 3 slots, continuous batching)"


def check_clock(args) -> tuple[str, str]:
    import torch
    loaded = _loaded("bfloat16")
    events: list[float] = []

    def wrap(run):
        def timed(out):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            sampled = run(out)   # it ends by reading the tokens back: the device is done
            end.record()
            end.synchronize()
            events.append(start.elapsed_time(end))
            return sampled
        return timed
    records = _engine_run(loaded, 8, 256, _specs(8, 128, 32, loaded.shape.vocab_size), wrap=wrap)
    steps = [s.duration_ms for s in records.steps]
    gap = statistics.median(s - e for s, e in zip(steps, events))
    detail = (f"median recorded - CUDA events {gap:+.3f} ms over {len(events)} steps "
              f"(step median {statistics.median(steps):.2f} ms)")
    return ("pass" if clock_agrees(events, steps) else "fail"), detail


def check_max_len(args) -> tuple[str, str]:
    loaded = _loaded("bfloat16")
    medians = {}
    for max_len in (256, 4096):
        records = _engine_run(loaded, 16, max_len, _specs(16, 240, 16, loaded.shape.vocab_size))
        decode = [s.duration_ms for s in records.steps if s.phase.value == "decode"]
        medians[max_len] = statistics.median(decode)
        gc.collect()
    detail = f"batch-16 decode at context 256: {medians[256]:.2f} ms (max_len 256), {medians[4096]:.2f} ms (4,096)"
    return ("pass" if does_not_grow(medians[256], medians[4096]) else "fail"), detail


def check_second_runner(args) -> tuple[str, str]:
    import torch
    from backend.config import SamplingConfig
    from backend.engine.runner import build_runner
    from backend.loaders.weights import free_memory
    from backend.targets.local import check_kv_fits
    loaded = _loaded("bfloat16")
    max_len = 4096
    per_slot = max_len * loaded.shape.kv_bytes_per_token(2)
    slots = max(1, int(0.6 * free_memory(loaded.device)) // per_slot)
    first = build_runner(loaded, slots, max_len, SamplingConfig())
    del first
    gc.collect()
    held = torch.cuda.memory_reserved(loaded.device) / 2**30
    check_kv_fits(loaded, slots, max_len, 512)   # DoesNotFit here is the defect this row is for
    second = build_runner(loaded, slots, max_len, SamplingConfig())
    del second
    gc.collect()
    return "pass", f"{slots} slots of {max_len:,} tokens twice; {held:.1f} GiB reserved by torch between them"


def check_cli_run(args) -> tuple[str, str]:
    from backend.results.export import read_run
    out = Path(args.out) / "run-cuda"
    done = _cli("run", "--model", MODEL, "--device", "cuda", "--dtype", "bfloat16", "--batch", "4",
                "--prompt-len", "128", "--output-len", "32", "--out", str(out))
    if done.returncode:
        return "fail", f"exit {done.returncode}: {_last_line(done)}"
    info = read_run(out).info
    ok = info.device.startswith("cuda") and info.dtype == "bfloat16"
    return ("pass" if ok else "fail"), f"run.json: device {info.device} ({info.device_name}), dtype {info.dtype}"


def check_oversized(args) -> tuple[str, str]:
    sizes = [f"--{k.replace('_', '-')}={v}" for k, v in OVERSIZED.items()]
    done = _cli("run", "--model", MODEL, "--device", "cuda", "--dtype", "bfloat16", *sizes)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    ok = done.returncode == 2 and len(errors) == 1 and "GiB is free" in errors[0] and "Traceback" not in done.stderr
    return ("pass" if ok else "fail"), f"exit {done.returncode}: {_last_line(done)[:140]}"


def check_calibrate(args) -> tuple[str, str]:
    from backend.roofline.calibrate import calibrate
    from backend.roofline.profiles import match_profile
    measured = calibrate("cuda", quick=True)
    shipped = match_profile(measured.name)
    if shipped is None:
        return "skip", f"no shipped profile matches {measured.name}"
    bandwidth = within(measured.bandwidth_gbs, shipped.bandwidth_gbs, BANDWIDTH_RANGE)
    bf16 = "bf16" in measured.tflops and shipped.has_peak("bf16") and \
        within(measured.tflops["bf16"], shipped.tflops["bf16"], BF16_RANGE)
    detail = (f"{measured.name} against {shipped.key}: {measured.bandwidth_gbs:,.0f} of {shipped.bandwidth_gbs:,.0f} "
              f"GB/s, bf16 {measured.tflops.get('bf16', 0):,.0f} of {shipped.tflops.get('bf16', 0):,.0f} TFLOP/s")
    return ("pass" if bandwidth and bf16 else "fail"), detail


def _cli(*words: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "main.py", *words], cwd=ROOT, capture_output=True, text=True, timeout=240)


def _last_line(done: subprocess.CompletedProcess) -> str:
    return ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]


CHECKS = [Check("gpu", True, check_gpu), Check("torch", False, check_torch), Check("cuda-tests", True, check_tests),
          Check("graphs-vs-eager", True, check_graphs), Check("step-clock", True, check_clock),
          Check("decode-vs-max-len", True, check_max_len), Check("second-runner", True, check_second_runner),
          Check("run-device-cuda", True, check_cli_run), Check("oversized-batch", True, check_oversized),
          Check("calibrate", True, check_calibrate), Check("spec-greedy", True, check_spec_greedy),
          Check("spec-verify", True, check_spec_verify)]


def dry_run_detail(check: Check) -> str:
    """What a skipped GPU check would do, with the sizes worked out here where there are any."""
    if check.name == "oversized-batch":
        from backend.engine.memory_fit import runner_memory
        from backend.models.shapes import SHAPES
        b = OVERSIZED
        need = runner_memory(SHAPES[MODEL], b["batch"], b["prompt_len"] + b["output_len"], 2, "cuda", True, 512)
        return f"dry run (needs a GPU): batch {b['batch']:,} would need {need.total / 2**30:,.0f} GiB"
    if check.name == "spec-verify":
        return (f"dry run (needs a GPU): passes at <= {VERIFY_LIMIT}x at {', '.join(SPEC_DTYPES)} "
                f"({SPEC_LARGE} at bfloat16 beside); no quantized row, CUDA loads none")
    return "dry run (needs a GPU)"


def run_checks(args) -> list[Row]:
    rows = []
    for check in CHECKS:
        if args.only and check.name not in args.only:
            continue
        if check.needs_gpu and args.dry_run:
            rows.append(Row(check.name, "skip", dry_run_detail(check)))
            continue
        log(check.name)
        try:
            status, detail = check.run(args)
        except Exception as exc:   # noqa: BLE001 -- a failed check is a row of the table
            from backend.errors import one_line
            status, detail = "fail", one_line(exc, typed=True, limit=160)
        rows.append(Row(check.name, status, detail.replace("|", "/")))
    return rows


def _cuda_visible() -> bool:
    import torch
    return torch.cuda.is_available()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/gpu_check.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="run only what needs no GPU; report the rest skipped")
    parser.add_argument("--only", nargs="+", choices=[c.name for c in CHECKS], metavar="CHECK",
                        help="run these checks alone: " + ", ".join(c.name for c in CHECKS))
    parser.add_argument("--out", help="where the CLI's run folder goes (a temporary folder without it)")
    parser.add_argument("--tests-timeout", type=int, default=240, help="seconds for the CUDA tests")
    add_readme_flag(parser)
    args = parser.parse_args(argv)
    if not args.dry_run and not _cuda_visible():
        print("gpu_check: this python's torch sees no CUDA device; --dry-run runs the parts that need none",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        args.out = args.out or scratch
        rows = run_checks(args)
    gpu = next((r.detail for r in rows if r.check == "gpu" and r.status == "pass"), "")
    report = table(rows) if args.dry_run else f"{measured_line(gpu or 'GPU unknown')}\n\n{table(rows)}"
    publish("gpu_check", report, args.readme and not args.dry_run)   # a dry run's table is no measurement
    failed = [r.check for r in rows if r.status == "fail"]
    summary = {"passed": sum(r.status == "pass" for r in rows), "failed": failed,
               "skipped": sum(r.status == "skip" for r in rows)}
    print(json.dumps(summary), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
