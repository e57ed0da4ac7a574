"""A mixture of experts' decode step: the weights it reads grow with the batch, measured against the roofline's
prediction, and ours against llama.cpp on the same GGUF.

    python -m bench.moe_bytes [--repeats 3] [--threads N] [--readme] [--quick] [--workdir DIR]

In one run, on one machine:
  1. a random-weight Qwen3-MoE-shaped model (transformers' Qwen3MoeConfig: hidden 1024, 8 layers,
     64 experts of width 384, 8 experts a token, normalized top-k; about 0.8 B parameters, 0.15 B
     active a token; the bundled SmolLM2 tokenizer's 49,152-token vocabulary) is written as an F32
     GGUF as llama.cpp's converter names it (tests/fakes/gguf_files.py), then by llama.cpp's own
     quantizer as Q8_0; both cached in --workdir;
  2. on the Q8_0 file, ours (load_model(path, "cpu", "auto"): every matrix Q8_0 as stored) and
     llama.cpp (its batch API, in a child process, as bench.engine_vs_llamacpp runs it) time a
     decode step at batch 1, 4, 16 and 64 (32-token prompts prefilled, then the median of the
     following steps), interleaved, llama.cpp first on odd repeats;
  3. ours also reports what each step read (StepRecord.weight_bytes: the shared matrices and the
     experts some token was routed to) and how many experts it touched; beside them the roofline's
     prediction under uniform routing (backend/roofline/moe.py: E(1-(1-k/E)^B) experts a layer) and
     the read bandwidth probed beside the batch-1 figures.
Prints a Markdown report; --readme also writes it into bench/README.md between its markers.
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # before torch loads (see bench.engine_vs_llamacpp)

import argparse  # noqa: E402
import collections  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from backend.loaders.weights import bundled_gguf, load_model  # noqa: E402
from backend.records import Phase  # noqa: E402
from backend.roofline.cost import step_cost  # noqa: E402
from backend.roofline.moe import expected_experts  # noqa: E402
from bench import engine_vs_llamacpp as peer  # noqa: E402
from bench.common import add_readme_flag, in_order, log, measured_line, publish  # noqa: E402
from bench.engine_vs_hf import Ours, machine_extras  # noqa: E402

SHAPE = dict(hidden_size=1024, intermediate_size=2048, moe_intermediate_size=384, num_hidden_layers=8,
             num_attention_heads=16, num_key_value_heads=4, head_dim=64, num_experts=64, num_experts_per_tok=8,
             norm_topk_prob=True, vocab_size=49152, max_position_embeddings=4096, rms_norm_eps=1e-6,
             tie_word_embeddings=True, initializer_range=0.02, decoder_sparse_step=1, mlp_only_layers=[])
BATCHES = (1, 4, 16, 64)
PROMPT_LEN, NEW_TOKENS, QUICK_NEW_TOKENS = 32, 24, 8


def write_files(workdir: Path, threads: int) -> Path:
    """The random MoE as F32 (our writer, llama.cpp's names) and Q8_0 (llama.cpp's quantizer); kept if there."""
    workdir.mkdir(parents=True, exist_ok=True)
    f32, q8 = workdir / "qwen3moe-0.8b.F32.gguf", workdir / "qwen3moe-0.8b.Q8_0.gguf"
    if not f32.is_file():
        import transformers
        from tests.fakes.gguf_files import write_gguf
        log("building the random Qwen3-MoE model and writing it as an F32 GGUF")
        torch.manual_seed(0)
        config = transformers.Qwen3MoeConfig(**SHAPE)
        config.architectures = ["Qwen3MoeForCausalLM"]
        model = transformers.Qwen3MoeForCausalLM(config).eval()
        part = f32.with_suffix(".part")
        write_gguf(part, "qwen3moe", model, bundled_gguf())
        part.replace(f32)
        del model
    if not q8.is_file():
        log(f"quantizing {f32.name} -> {q8.name} with llama.cpp")
        peer.quantize(f32, q8, peer.PRECISIONS["Q8_0"], threads, allow_requantize=False)
    return q8


class OursMoE:
    """Ours on the file: each batch's median decode step, and what those steps read."""

    name = "ours"

    def __init__(self, path: Path):
        self.loaded = load_model(str(path), "cpu", "auto")
        self.ours = Ours(self.loaded)
        self.read: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)   # batch -> (bytes, experts)

    def figure(self, batch: int, prompts: list[list[int]], new_tokens: int) -> float:
        steps = [s for s in self.ours.run(prompts, new_tokens).steps
                 if s.phase is Phase.DECODE and s.num_decode_requests == batch]
        self.read[batch] += [(s.weight_bytes, s.experts_touched) for s in steps]
        return statistics.median(s.duration_ms for s in steps)


class LlamaMoE:
    name = "llama.cpp"

    def __init__(self, process: peer.LlamaProcess, path: Path, threads: int):
        self.engine = peer.LlamaEngine(process, "Q8_0", path, threads, max_seqs=max(BATCHES))

    def figure(self, batch: int, prompts: list[list[int]], new_tokens: int) -> float:
        return self.engine.figure("decode", prompts, new_tokens)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="timed passes after the warm-up pass")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="threads, for both engines")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "phasescope-moe-bytes")
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: 1 repeat, {QUICK_NEW_TOKENS} new tokens")
    add_readme_flag(parser)
    args = parser.parse_args()
    repeats, new_tokens = (1, QUICK_NEW_TOKENS) if args.quick else (args.repeats, NEW_TOKENS)
    if peer.lc is None:
        raise SystemExit("llama.cpp is the peer here: `python tools/llama_cpp_peer.py` builds and installs it")
    torch.set_num_threads(args.threads)
    peer.capture_llama_log()
    path = write_files(args.workdir, args.threads)
    process = peer.LlamaProcess()
    engines = (LlamaMoE(process, path, args.threads), OursMoE(path))
    ours = engines[1]
    shape, prec = ours.loaded.shape, ours.loaded.precision
    prompts = {b: peer.random_tokens(b, PROMPT_LEN, shape.vocab_size, seed=b) for b in BATCHES}
    samples = {e.name: collections.defaultdict(list) for e in engines}
    bandwidth = []
    for rep in range(-1, repeats):   # -1: the warm-up pass, not kept
        order = in_order(rep, engines)
        for batch in BATCHES:
            for engine in order:
                ms = engine.figure(batch, prompts[batch], new_tokens)
                log(f"{'warm-up' if rep < 0 else f'repeat {rep + 1}'} batch {batch} {engine.name}: {ms:.1f} ms")
                if rep >= 0:
                    samples[engine.name][batch].append(ms)
            if batch == 1 and rep >= 0:
                bandwidth.append(peer.probe_bandwidth())
    process.close()

    bw = statistics.median(bandwidth)
    e, k = shape.num_experts, shape.experts_per_token
    lines = [measured_line(*machine_extras(), f"{args.threads} threads, {repeats} repeats (medians), read bandwidth "
                           f"{bw / 1e9:.1f} GB/s (median of {len(bandwidth)} probes)"), "",
             f"Model: random weights, Qwen3-MoE-shaped: {shape.num_layers} layers, hidden {shape.hidden_size}, "
             f"{e} experts of width {shape.intermediate_size}, {k} a token; {shape.num_params() / 1e9:.2f} B "
             f"parameters, {shape.num_active_params() / 1e9:.2f} B active a token; Q8_0 by llama.cpp's quantizer, "
             f"{ours.loaded.weight_bytes / 1e6:,.0f} MB as ours holds it.", "",
             "| batch | experts a layer: measured | predicted (uniform) | weights a step: measured | predicted "
             "| ours step | ours tok/s | llama.cpp step | llama.cpp tok/s | speed-up (llama.cpp ms / ours) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for b in BATCHES:
        read = ours.read[b]
        measured_bytes = statistics.median(r[0] for r in read)
        measured_experts = statistics.median(r[1] for r in read) / shape.num_layers
        predicted_bytes = step_cost(shape, prec, [1] * b, [PROMPT_LEN + new_tokens // 2] * b).weight_bytes
        mine, theirs = statistics.median(samples["ours"][b]), statistics.median(samples["llama.cpp"][b])
        lines.append(f"| {b} | {measured_experts:.1f} | {expected_experts(e, k, b):.1f} | "
                     f"{measured_bytes / 1e6:,.0f} MB | {predicted_bytes / 1e6:,.0f} MB | {mine:.1f} ms | "
                     f"{1000 * b / mine:,.0f} | {theirs:.1f} ms | {1000 * b / theirs:,.0f} | {theirs / mine:.2f}x |")
    floor = statistics.median(r[0] for r in ours.read[1]) / bw * 1000
    lines += ["", f"Batch 1's weight-read floor (its measured bytes / the bandwidth): {floor:.1f} ms. "
              "Random routers spread tokens almost uniformly, so the measured union tracks the uniform "
              "prediction; a trained router's popular experts make it smaller."]
    return publish("moe_bytes", lines, args.readme)


if __name__ == "__main__":
    sys.exit(main())
