"""bench/gpu_check.py's speculative-decoding rows, on CUDA: the greedy tokens with n-gram guesses are those
without (through the engine loop, CUDA graphs on where the runner uses them), and a verification of K+1 = 5
tokens costs at most 1.25x a one-token decode step at batch 1 (docs/speculative.md's memory-bound claim,
which a 2-core CPU with quantized weights cannot show: its batch-1 step is compute-bound there).
"""
from __future__ import annotations

import gc
import statistics

from bench.common import drive_engine

VERIFY_LIMIT = 1.25                 # the memory-bound claim: 5 tokens of one request cost about one decode step
# what the CUDA path loads: the GGUF block formats and int8 are refused there (loaders/quant.choose)
SPEC_DTYPES = ("float32", "bfloat16")
SPEC_LARGE = "llama-8b"             # random weights: a decode step that reads 16 GB, memory-bound beyond doubt
MIN_GROUNDED_LENGTH = 2.0           # tokens per verification on the repeated paragraph (4.85 on the CPU)


def verify_within(ratios: list[float], limit: float = VERIFY_LIMIT) -> bool:
    """Every measured verification / decode ratio at most `limit` (none measured: no pass)."""
    return bool(ratios) and all(r <= limit for r in ratios)


def spec_greedy_passes(same: int, total: int, grounded_length: float | None) -> bool:
    """Every token the same, and the grounded prompt's guesses kept: an equality with nothing verified
    proves nothing."""
    return total > 0 and same == total and grounded_length is not None and grounded_length >= MIN_GROUNDED_LENGTH


def check_spec_greedy(args) -> tuple[str, str]:
    from bench.speculative import OUTPUT_LEN   # as bench.speculative's engine rows
    return greedy_comparison("cuda", OUTPUT_LEN)


def greedy_comparison(device: str, output_len: int) -> tuple[str, str]:
    """The spec-greedy row on `device` (the tests run it on the CPU, shorter)."""
    from backend.config import SamplingConfig
    from backend.engine.runner import build_runner
    from backend.engine.spec.ngram import NgramProposer
    from backend.engine.spec.speculator import Speculator
    from backend.loaders.weights import BUNDLED, load_model
    from backend.records import token_ids_by_request
    from backend.workload.arrivals import RequestSpec
    from bench.speculative import GROUNDED, K, OPEN_CHAT, PARAGRAPH, chat_prompt
    # float32: a verification (an eager prefill segment on CUDA) and a decode step (a graph replay) use
    # different kernels; in bfloat16 their rounding could break a greedy near-tie, which is no defect
    loaded = load_model(BUNDLED, device, "float32")
    texts = [GROUNDED, "Summarise the following text in two sentences:\n\n" + PARAGRAPH, OPEN_CHAT]
    prompts = [chat_prompt(loaded, t) for t in texts]
    max_len = max(map(len, prompts)) + output_len + K + 2
    same = total = 0
    first_diff = ""
    lengths: list[float | None] = []
    plain_ms: list[float] = []
    verify_ms: list[float] = []
    for batch in [[p] for p in prompts] + [prompts]:   # each alone (batch 1), then the three together
        # CUDA graphs as the runner chooses them (on for this dense model): its decode steps replay a graph,
        # its verifications run eagerly as prefill segments, and mixed steps are both in one batch
        runner = build_runner(loaded, len(batch), max_len, SamplingConfig(ignore_eos=True))
        specs = [RequestSpec(i, 0.0, p, "", output_len) for i, p in enumerate(batch)]
        plain = drive_engine(runner, specs, "continuous", len(batch), max_len, "gpu-check")
        guessed = drive_engine(runner, specs, "continuous", len(batch), max_len, "gpu-check",
                               speculator=Speculator(NgramProposer(1, 4), K))
        a, b = token_ids_by_request(plain.tokens), token_ids_by_request(guessed.tokens)
        same += sum(x == y for rid in a for x, y in zip(a[rid], b.get(rid, [])))
        total += sum(max(len(a[rid]), len(b.get(rid, []))) for rid in a)
        first_diff = first_diff or _first_difference(a, b, f"batch {len(batch)}")
        if len(batch) == 1:
            lengths.append(guessed.summary().spec_mean_acceptance_length)
            plain_ms += [s.duration_ms for s in plain.steps if s.phase.value == "decode"]
            verify_ms += [s.duration_ms for s in guessed.steps if s.is_verification]
        del runner
        gc.collect()
    shown = ", ".join("-" if x is None else f"{x:.2f}" for x in lengths)
    detail = (f"{same}/{total} tokens the same (bundled model, float32, ngram K={K}, {output_len} tokens; paragraph, "
              f"summary, open chat alone, then together); tokens per verification at batch 1: {shown}")
    if first_diff:
        detail += f"; first difference: {first_diff}"
    if plain_ms and verify_ms:   # the engine's own steps: a verification runs eagerly, a decode step as a graph
        v, d = statistics.median(verify_ms), statistics.median(plain_ms)
        detail += f"; engine steps at batch 1: verification {v:.2f} ms, decode {d:.2f} ms ({v / d:.2f}x)"
    return ("pass" if spec_greedy_passes(same, total, lengths[0]) else "fail"), detail


def _first_difference(plain: dict[int, list[int]], guessed: dict[int, list[int]], where: str) -> str:
    """Where the first token differs ('' where none does), for the person reading the row."""
    for rid, ids in plain.items():
        other = guessed.get(rid, [])
        for i, (x, y) in enumerate(zip(ids, other)):
            if x != y:
                return f"{where}, request {rid}, token {i} ({x} without guesses, {y} with)"
        if len(ids) != len(other):
            return f"{where}, request {rid}: {len(ids)} tokens without guesses, {len(other)} with"
    return ""


def check_spec_verify(args) -> tuple[str, str]:
    from backend.loaders.weights import BUNDLED
    return verification_costs("cuda", [(BUNDLED, d, True) for d in SPEC_DTYPES] + [(SPEC_LARGE, "bfloat16", False)])


def verification_costs(device: str, cases: list[tuple[str, str, bool]]) -> tuple[str, str]:
    """The spec-verify row on `device` over (model, dtype, required) cases: a case not required that does
    not fit the device is said in the row, not failed (the tests run it on the CPU with the tiny shape)."""
    import torch
    from backend.errors import InputError
    from bench.speculative import COST_DEPTH, K, step_costs
    measured = []
    for model, dtype, required in cases:
        try:
            measured.append((f"{model} {dtype}", step_costs(dtype, 0, device, model)))
        except InputError as exc:
            if required:
                raise
            measured.append((f"{model} {dtype}: {exc}"[:100], None))
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()   # the last model's blocks, for the next one to fit
    done = [(name, c) for name, c in measured if c is not None]
    parts = [f"{name} {c.segment:.2f}x (as rows {c.rows:.2f}x; decode {c.decode_ms:.2f} ms)" if c is not None
             else name for name, c in measured]
    detail = (f"K+1 = {K + 1} tokens / 1, batch 1, {COST_DEPTH} cached, eager, as a segment (the GPU runner's route): "
              + "; ".join(parts) + f"; passes at <= {VERIFY_LIMIT}x")
    return ("pass" if verify_within([c.segment for _, c in done]) else "fail"), detail
