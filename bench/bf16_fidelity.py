"""What bfloat16 products do to the bundled model's answers, at every precision the kernels run.

    python -m bench.bf16_fidelity [--tokens 400] [--readme]

For each precision (float32 and every --dtype of the C kernels, each quantized from the bundled
model's floats, and the bundled Q4_1 GGUF as stored), on the CPU:
  1. the first --tokens tokens of real English text (the workloads' shipped prompts, joined)
     prefilled once with float32 products and once with bfloat16 ones (--prefill-math bf16: every
     product of 16+ rows on the CPU's bfloat16 unit, the LM head included -- harsher than a run,
     whose prefill computes the head for one row, in float32), keeping every position's logits:
     the mean and largest KL divergence of bfloat16's next-token distribution from float32's,
     and the share of positions whose top tokens agree (backend/models/fidelity.py);
  2. "What is the capital of France?" through the chat template, 12 greedy tokens through the
     engine's runner with bfloat16 products and with float32 ones: whether the answers are the
     same, and whether they say Paris (at some precisions the quantization alone moves this small
     model's greedy path off Paris, in float32 as in bfloat16).
Prints a Markdown report; --readme also writes it into bench/README.md between its markers.
"""
from __future__ import annotations

import argparse
import sys

import torch

from backend.config import SamplingConfig
from backend.engine.runner import Runner
from backend.kernels import matmath
from backend.loaders.weights import bundled_gguf, load_model
from backend.models import fidelity, make_step_batch
from backend.models.packed import pack_weights
from bench.common import add_readme_flag, measured_line, publish

PRECISIONS = ["float32", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "f16", "bf16w"]
QUESTION = "What is the capital of France?"


def weights(name: str):
    """The bundled model at one of the tables' rows ("gguf": its file as stored, else a dtype of it), and the
    row's label."""
    if name != "gguf":
        return load_model("smollm2-135m", "cpu", name), name
    loaded = load_model(str(bundled_gguf()), "cpu", "auto")
    return loaded, f"bundled GGUF as stored ({'/'.join(loaded.precision.formats or (loaded.precision.name,))})"


def answer(loaded, math, new_tokens: int = 12, mode: str = "bf16") -> str:
    """The greedy answer to QUESTION through the runner, in `math` (bench.int8_fidelity's too: `mode` names it)."""
    loaded.math = fidelity.MathChoice(mode, math, "bench")
    ids = loaded.tokenizer.apply_chat_template(QUESTION)
    runner = Runner(loaded, 1, len(ids) + new_tokens, SamplingConfig())
    out = []
    with torch.inference_mode(), matmath.using(math):
        logits = loaded.model(make_step_batch([(0, 0, ids)], [], loaded.device), runner.cache)
        for i in range(new_tokens):
            token = int(logits[-1].argmax())
            out.append(token)
            logits = loaded.model(make_step_batch([], [(0, len(ids) + i, token)], loaded.device), runner.cache)
    return loaded.tokenizer.decode(out).strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=400, help="tokens of English text to compare over")
    add_readme_flag(parser)
    args = parser.parse_args()
    unit, why = matmath.bf16_unit()
    if unit is None:
        raise SystemExit(f"no bfloat16 unit here ({why}): nothing to compare")
    math = matmath.MatMath(unit, matmath.MIN_ROWS[unit])
    rows = []
    for name in [*PRECISIONS, "gguf"]:
        loaded, label = weights(name)
        pack_weights(loaded.model)
        found = fidelity.compare(loaded.model, fidelity.english_tokens(loaded.tokenizer, args.tokens), math,
                                 loaded.device)
        said, said32 = answer(loaded, math), answer(loaded, matmath.FP32)
        first = said.splitlines()[0] if said else ""
        rows.append(f"| {label} | {found.kl_mean:.5f} | {found.kl_max:.4f} | {found.top1:.1%} | "
                    f"{'yes' if 'Paris' in said else 'no'}: “{first}” | "
                    f"{'same' if said == said32 else 'differs: “' + said32.splitlines()[0] + '”'} |")
        print(rows[-1], file=sys.stderr)
    lines = [measured_line(), "",
             f"Bfloat16 unit {unit} (products of {math.min_rows}+ rows), float32 accumulation. KL of bfloat16's "
             f"next-token distribution from float32's over {args.tokens} tokens of English (the shipped prompts), "
             "every position's logits, every product in bfloat16 (the LM head too); the answer: 12 greedy tokens "
             "with the chat template, prefill in bfloat16.", "",
             "| precision | mean KL (nats) | largest KL | top-1 agreement | bf16 says Paris? (its answer) "
             "| float32's answer |",
             "|---|---|---|---|---|---|", *rows]
    return publish("bf16_fidelity", lines, args.readme)


if __name__ == "__main__":
    sys.exit(main())
