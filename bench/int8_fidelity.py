"""What int8 decode products (--decode-math int8) do to the bundled model's answers.

    python -m bench.int8_fidelity [--tokens 200] [--readme]

For Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 (each quantized from the bundled model's floats) and the bundled Q4_1
GGUF as stored, on the CPU:
  1. the first --tokens tokens of real English text (the workloads' shipped prompts, joined)
     decoded one token a step, teacher-forced (every step a 1-row product, the int8 path's
     case), once with float32 decode products and once with int8 ones: the mean and largest KL
     divergence of int8's next-token distribution from float32's, and the share of positions
     whose top tokens agree (as bench/bf16_fidelity.py measures bfloat16's);
  2. "What is the capital of France?" through the chat template, 12 greedy tokens, the prompt
     prefilled in float32 and every decode step in int8 or float32: whether they say Paris.
Prints a Markdown report; --readme also writes it into bench/README.md between its markers.
"""
from __future__ import annotations

import argparse
import sys

import torch

from backend.kernels import decodemath, matmath
from backend.models import fidelity, make_step_batch
from backend.models.base import KVCache
from backend.models.packed import pack_weights
from bench.bf16_fidelity import answer, weights
from bench.common import add_readme_flag, measured_line, publish

PRECISIONS = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1"]
INT8 = matmath.MatMath(decode="int8")


def decoded_log_probs(model, ids: list[int], math: matmath.MatMath) -> torch.Tensor:
    """(len(ids), vocab) log-probabilities, each position's from a 1-row decode step in `math`."""
    cache = KVCache(model.shape, 1, len(ids), torch.device("cpu"), torch.float32)
    rows = []
    with torch.inference_mode(), matmath.using(math):
        for i, token in enumerate(ids):
            logits = model(make_step_batch([], [(0, i, token)], torch.device("cpu")), cache)
            rows.append(torch.log_softmax(logits[-1].float(), dim=-1))
    return torch.stack(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=200, help="tokens of English text to compare over")
    add_readme_flag(parser)
    args = parser.parse_args()
    rows = []
    for name in [*PRECISIONS, "gguf"]:
        loaded, label = weights(name)
        pack_weights(loaded.model)
        ids = fidelity.english_tokens(loaded.tokenizer, args.tokens)
        ref, got = decoded_log_probs(loaded.model, ids, matmath.FP32), decoded_log_probs(loaded.model, ids, INT8)
        kl = (ref.exp() * (ref - got)).sum(dim=-1)
        top1 = float((ref.argmax(-1) == got.argmax(-1)).float().mean())
        said, said32 = answer(loaded, INT8, mode="fp32"), answer(loaded, matmath.FP32, mode="fp32")
        rows.append(f"| {label} | {float(kl.mean()):.5f} | {float(kl.max()):.4f} | {top1:.1%} | "
                    f"{'yes' if 'Paris' in said else 'no'}: “{said.splitlines()[0] if said else ''}” | "
                    f"{'yes' if 'Paris' in said32 else 'no'}: “{said32.splitlines()[0] if said32 else ''}” |")
        print(rows[-1], file=sys.stderr)
    lines = [measured_line(), "",
             f"Integer decode products ({decodemath.unit()}), activations int8 per block of 32. KL of int8's "
             f"next-token distribution from float32's over {args.tokens} tokens of English (the shipped prompts), "
             "each position decoded as a 1-row step, teacher-forced; the answer: 12 greedy tokens with the chat "
             "template, prompt prefilled in float32, decode steps in int8 (or float32).", "",
             "| weights | mean KL (nats) | largest KL | top-1 agreement | int8 says Paris? (its answer) "
             "| float32 says Paris? |",
             "|---|---|---|---|---|---|", *rows]
    return publish("int8_fidelity", lines, args.readme)


if __name__ == "__main__":
    sys.exit(main())
