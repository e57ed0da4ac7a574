"""Speculative decoding on the CPU engine: what a verification step costs, and what speculation buys.

    python -m bench.speculative [--repeats 3] [--threads 1] [--costs-only | --skip-costs] [--readme]

On the bundled model (SmolLM2-135M), greedy, in one process, the sides interleaved round by round (A B,
B A) at the same thread count:
  1. the step costs: a verification of K+1 = 5 tokens of one request (its cache 128 tokens deep) over a
     one-token decode step, at every weight format the C kernels run (float32, bf16w, f16, q8_0, q4_0, q4_1),
     both ways a verification can run: as 5 decode rows of the request's table row (the runner's route on
     the C kernels; for the block formats also with --decode-math int8) and as a 5-token prefill segment
     with logits at every position (the route before it, and the one off the C kernels);
  2. decode tokens/s with `--spec ngram --spec-tokens 4` against without, at batch 1, on an
     input-grounded task (repeat a paragraph) and on open chat; the same with a q4_0 draft of the model
     (`--spec draft:...@q4_0 --spec-tokens 3`, the draft's time counted); then ngram at batch 8 and 32;
  3. the mean acceptance length beside transformers' `generate(prompt_lookup_num_tokens=4)` on the same
     prompts (tokens per forward pass of the model, counted with a hook), where transformers is installed.
Decode tokens/s = tokens emitted by decode steps / those steps' time (and the draft's before them).
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import torch  # noqa: E402

from backend.config import SamplingConfig  # noqa: E402
from backend.engine.runner import Runner, kernel_math  # noqa: E402
from backend.engine.spec.draft import DraftProposer  # noqa: E402
from backend.engine.spec.ngram import NgramProposer  # noqa: E402
from backend.engine.spec.speculator import Speculator  # noqa: E402
from backend.loaders.device import device_scope, synchronize  # noqa: E402
from backend.kernels import decodemath  # noqa: E402
from backend.loaders.weights import BUNDLED, load_model  # noqa: E402
from backend.models import fidelity  # noqa: E402
from backend.models import make_step_batch  # noqa: E402
from backend.records import Phase  # noqa: E402
from backend.workload.arrivals import RequestSpec  # noqa: E402
from bench.common import (add_readme_flag, drive_engine, interleaved, log, measured_line, publish,  # noqa: E402
                          ratio_median)

PARAGRAPH = ("The committee met on Tuesday to review the budget for the coming year. After a long discussion, "
             "the members agreed to increase funding for the library and the community garden, while reducing "
             "spending on new office furniture. The chair thanked everyone for their patience and promised to "
             "publish the final figures by the end of the month.")
GROUNDED = "Repeat the following text exactly, word for word:\n\n" + PARAGRAPH
OPEN_CHAT = "Tell me a story about a dragon who learns to bake bread."
OUTPUT_LEN, K, DRAFT_K = 64, 4, 3
COST_DEPTH = 128                   # the verified request's cache depth in the step-cost rounds
# every weight format the C kernels run, widest first: the ratio follows the bytes a weight (the read a
# row's arithmetic hides behind), not the format
COST_DTYPES = ("float32", "bf16w", "f16", "q8_0", "q4_0", "q4_1")
BYTES_A_WEIGHT = {"float32": 4.0, "bf16w": 2.0, "f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32}
CALLS = 5                          # forward passes per side and round in the step-cost rounds
COST_ROUNDS = 9                    # rounds of them: many short rounds, as load on a shared machine drifts


# ---- 1. the step costs ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class StepCosts:
    """A verification of K+1 tokens over a one-token decode step, both ways it can run: medians of the
    rounds' ratios."""

    rows: float        # as K+1 decode rows of the request's table row (the C kernels' route)
    segment: float     # as a (K+1)-token prefill segment with logits at every position (the route elsewhere)
    decode_ms: float   # the one-token decode step itself, median of the rounds (the ratios' scale)


def step_costs(dtype: str, repeats: int, device: str = "cpu", model: str = BUNDLED,
               decode_math: str = "fp32") -> StepCosts:
    """The verification's cost on `device` (bench/gpu_check.py's spec-verify row asks on CUDA): the model
    called directly on each step's tensors, eagerly on every device (no CUDA graph), so the sides differ
    only in their rows; each side's calls end with a synchronize, so a GPU's queued work is in its time.
    decode_math "int8": the C kernels' products of up to 8 rows on int8 activations (--decode-math int8)."""
    loaded = load_model(model, device, dtype)
    if decode_math != "fp32":
        loaded.math = fidelity.with_decode(fidelity.choose(loaded, "fp32", model, lambda line: None), decode_math)
    runner = Runner(loaded, 1, COST_DEPTH + 2 * (K + 1), SamplingConfig(), use_cuda_graphs=False)
    model_, cache, dev = runner.model, runner.cache, runner.device
    tokens = [(7 * i + 3) % loaded.shape.vocab_size for i in range(COST_DEPTH + K + 1)]
    with device_scope(dev), torch.inference_mode(), kernel_math(dev, runner.math):
        model_(make_step_batch([(0, 0, tokens[:COST_DEPTH])], [], dev), cache)
        tail = tokens[COST_DEPTH:]
        one = make_step_batch([], [(0, COST_DEPTH, tail[0])], dev)
        rows = make_step_batch([], [(0, COST_DEPTH + i, t) for i, t in enumerate(tail)], dev)
        segment = make_step_batch([(0, COST_DEPTH, tail)], [], dev, every_row=[0])

        def timed(batch):
            def run(_warm: bool) -> float:
                synchronize(dev)
                start = time.perf_counter()
                for _ in range(CALLS):
                    model_(batch, cache)
                synchronize(dev)   # a GPU has only queued the calls until here
                return time.perf_counter() - start
            return run

        decode, as_rows, as_segment = interleaved(max(COST_ROUNDS, repeats), timed(one), timed(rows), timed(segment))
    return StepCosts(ratio_median(as_rows, decode), ratio_median(as_segment, decode),
                     statistics.median(decode) / CALLS * 1000)


# ---- 2. the engine with and without speculation -----------------------------------------------------

def chat_prompt(loaded, text: str) -> list[int]:
    return loaded.tokenizer.apply_chat_template(text)


def engine_run(runner: Runner, prompts: list[list[int]], speculator: Speculator | None) -> tuple[float, float | None]:
    """(decode tokens/s, tokens per verification or None) of one batch arriving together."""
    specs = [RequestSpec(i, 0.0, p, "", OUTPUT_LEN) for i, p in enumerate(prompts)]
    records = drive_engine(runner, specs, "continuous", len(prompts), runner.cache.max_len, speculator=speculator)
    steps = [s for s in records.steps if s.phase is Phase.DECODE]
    emitted = sum(s.num_decode_tokens - s.num_proposed_tokens + s.num_accepted_tokens for s in steps)
    seconds = sum(s.duration_ms + s.draft_ms for s in steps) / 1000
    return emitted / seconds, records.summary().spec_mean_acceptance_length


def speedup(runner: Runner, prompts: list[list[int]], make, repeats: int) -> tuple[float, float, float, float]:
    """(tokens/s off, tokens/s on, mean tokens per verification, on / off): medians over interleaved
    rounds, the last of the rounds' ratios. `make` builds a fresh speculator for each run."""
    lengths: list[float] = []

    def off(_warm: bool) -> float:
        return engine_run(runner, prompts, None)[0]

    def on(_warm: bool) -> float:
        rate, length = engine_run(runner, prompts, make())
        if length is not None:
            lengths.append(length)
        return rate

    plain, spec = interleaved(repeats, off, on)
    return statistics.median(plain), statistics.median(spec), (statistics.median(lengths) if lengths else 0.0), \
        ratio_median(spec, plain)


# ---- 3. transformers' prompt lookup ---------------------------------------------------------------------

def hf_acceptance(prompts: list[list[int]]) -> list[float] | None:
    """Tokens per verifying forward pass of transformers' greedy generate with prompt_lookup_num_tokens=K,
    per prompt, on the bundled model's weights (None without transformers)."""
    try:
        import transformers
    except ImportError:
        return None
    loaded = load_model(BUNDLED, "cpu", "float32")   # unpacked: its tensors are transformers' after the renames
    s = loaded.shape
    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(
        vocab_size=s.vocab_size, hidden_size=s.hidden_size, intermediate_size=s.intermediate_size,
        num_hidden_layers=s.num_layers, num_attention_heads=s.num_heads, num_key_value_heads=s.num_kv_heads,
        head_dim=s.head_dim, rms_norm_eps=s.norm_eps, rope_theta=s.rope_theta, max_position_embeddings=s.max_position,
        tie_word_embeddings=s.tie_embeddings)
    # from our loaded weights rather than from_pretrained(gguf_file=...), which needs the accelerate package
    model = transformers.LlamaForCausalLM(config).eval()
    model.load_state_dict({k: v.clone() for k, v in loaded.model.hf_destinations().items()}, strict=False)
    model.tie_weights()
    calls = [0]
    model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    out = []
    for ids in prompts:
        x = torch.tensor([ids])
        calls[0] = 0
        with torch.inference_mode():
            y = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=OUTPUT_LEN,
                               min_new_tokens=OUTPUT_LEN, do_sample=False, pad_token_id=0,
                               prompt_lookup_num_tokens=K)
        new = y.shape[1] - x.shape[1]
        # the first pass is the prompt's (it yields one token); the rest verify
        out.append((new - 1) / max(1, calls[0] - 1))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-costs", action="store_true", help="leave out part 1 (the step costs)")
    parser.add_argument("--costs-only", action="store_true", help="part 1 alone, printed (never --readme: the "
                        "section holds all three parts)")
    parser.add_argument("--hf-only", action="store_true", help="part 3 alone (transformers' acceptance)")
    add_readme_flag(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.costs_only and args.readme:
        parser.error("--costs-only prints part 1 alone; --readme publishes all three parts")
    if args.hf_only:
        loaded = load_model(BUNDLED, "cpu", "float32")
        print(hf_acceptance([chat_prompt(loaded, GROUNDED), chat_prompt(loaded, OPEN_CHAT)]))
        return 0
    load = os.getloadavg()[0]   # the machine's other work, said beside the tables (their ratios hold, rates not)
    lines = [measured_line(f"{args.threads} thread(s)") + f" Load average {load:.1f} before the runs (above about "
             "1, other work shared the cores: the ratios are of sides interleaved round by round, medians of the "
             "rounds' ratios, and hold; the absolute rates are then loaded).", ""]

    if not args.skip_costs:
        lines += [("A verification of K+1 = 5 tokens (one request, 128 tokens cached) over a one-token decode step "
                   "(the step's own time beside, loaded where the load average says so):"), "",
                  ("| weights | bytes a weight | one-token step | as 5 decode rows (the C kernels' route now) | "
                   "the same, --decode-math int8 | as a 5-token prefill segment (before) |"),
                  "| --- | --- | --- | --- | --- | --- |"]
        for dtype in COST_DTYPES:
            log(f"step costs at {dtype}")
            costs = step_costs(dtype, args.repeats)
            int8 = f"{step_costs(dtype, args.repeats, decode_math='int8').rows:.2f}x" \
                if dtype in decodemath.FORMATS else "-"
            lines.append(f"| {dtype} | {BYTES_A_WEIGHT[dtype]:.2f} | {costs.decode_ms:.1f} ms | {costs.rows:.2f}x | "
                         f"{int8} | {costs.segment:.2f}x |")
            log(lines[-1])
        lines.append("")
    if args.costs_only:
        print("\n".join(lines))
        return 0

    loaded = load_model(BUNDLED, "cpu", "float32")
    grounded, chat = chat_prompt(loaded, GROUNDED), chat_prompt(loaded, OPEN_CHAT)
    max_len = max(len(grounded), len(chat)) + OUTPUT_LEN + K + 2
    ngram = lambda: Speculator(NgramProposer(1, 4), K)   # noqa: E731
    lines += [f"Decode tokens/s, greedy, {OUTPUT_LEN} output tokens (EOS ignored), float32 target:", "",
              "| batch | task | speculation | tokens/s off | tokens/s on | on / off | tokens per verification |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    runners: dict[int, Runner] = {}

    def runner(batch: int) -> Runner:
        if batch not in runners:
            runners[batch] = Runner(loaded, batch, max_len, SamplingConfig(ignore_eos=True))
            runners[batch].warmup()
        return runners[batch]

    rows = [(1, "repeat a paragraph", [grounded], "ngram K=4", ngram),
            (1, "open chat", [chat], "ngram K=4", ngram)]
    draft = load_model(BUNDLED, "cpu", "q4_0")
    draft_runners: dict[int, Runner] = {}

    def drafted() -> Speculator:
        if 1 not in draft_runners:
            draft_runners[1] = Runner(draft, 1, max_len, SamplingConfig())
            draft_runners[1].warmup()
        return Speculator(DraftProposer(draft_runners[1]), DRAFT_K)

    rows += [(1, "repeat a paragraph", [grounded], "draft q4_0 K=3", drafted),
             (1, "open chat", [chat], "draft q4_0 K=3", drafted),
             (8, "repeat a paragraph", [grounded] * 8, "ngram K=4", ngram),
             (32, "repeat a paragraph", [grounded] * 32, "ngram K=4", ngram)]
    for batch, task, prompts, name, make in rows:
        log(f"batch {batch}, {task}, {name}")
        repeats = args.repeats if batch == 1 else max(1, args.repeats - 1)
        off, on, length, ratio = speedup(runner(batch), prompts, make, repeats)
        lines.append(f"| {batch} | {task} | {name} | {off:.1f} | {on:.1f} | {ratio:.2f}x | {length:.2f} |")
        log(lines[-1])
    lines.append("")

    log("transformers' prompt lookup")
    theirs = hf_acceptance([grounded, chat])
    if theirs is None:
        lines.append("transformers is not installed here: no prompt-lookup comparison.")
    else:
        lines.append(f"transformers' `generate(prompt_lookup_num_tokens={K})`, same prompts, greedy: "
                     f"{theirs[0]:.2f} tokens per verifying forward pass on the paragraph, {theirs[1]:.2f} on open "
                     "chat (its n-gram match is 2 tokens at most, and it guesses at every match: no backoff).")
    return publish("speculative", lines, args.readme)


if __name__ == "__main__":
    raise SystemExit(main())
