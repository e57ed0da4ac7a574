"""How far the bfloat16 products move a model's next-token distributions from the float32 ones.

One prefill of real English text (the workloads' shipped prompts, joined) runs twice, once per
arithmetic, with the logits of every position kept: the mean KL divergence of the bfloat16
run's distributions from the float32 run's, and how often their top tokens agree. --prefill-math
auto keeps bfloat16 for a model only where the probe stays within BOUND; bench/bf16_fidelity.py
prints the same figures for every precision over a longer text.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch

from backend.errors import InputError
from backend.kernels import matmath, ops
from backend.kernels.matmath import MatMath
from backend.models import make_step_batch
from backend.models.base import KVCache

# The largest mean KL (nats) and the lowest top-1 agreement auto accepts. The bundled model's
# bfloat16 products give 0.0001-0.0003 nats and 98-100% at every precision (bench/README.md):
# the bound leaves room for other models while refusing one whose answers bfloat16 changes.
BOUND_KL = 0.01
BOUND_TOP1 = 0.95
PROBE_TOKENS = 96


@dataclass(slots=True, frozen=True)
class Fidelity:
    kl_mean: float      # nats, mean over positions of KL(float32 || bfloat16)
    kl_max: float
    top1: float         # fraction of positions whose argmax tokens agree
    tokens: int

    @property
    def within(self) -> bool:
        return self.kl_mean <= BOUND_KL and self.top1 >= BOUND_TOP1

    def describe(self) -> str:
        return (f"mean KL {self.kl_mean:.4f} nats, top-1 agreement {self.top1:.1%} over {self.tokens} tokens "
                f"(bound: KL <= {BOUND_KL}, top-1 >= {BOUND_TOP1:.0%})")


def english_tokens(tokenizer, count: int) -> list[int]:
    """The first `count` tokens of the shipped prompts, joined (real English written for this project)."""
    from backend.workload.prompts import PROMPTS
    ids: list[int] = []
    for text in PROMPTS:
        ids += tokenizer.encode(text + "\n\n")
        if len(ids) >= count:
            break
    return ids[:count]


def log_probs(model, ids: list[int], math: MatMath, device) -> torch.Tensor:
    """(len(ids), vocab) float32 log-probabilities of every next token, one prefill in `math`."""
    cache = KVCache(model.shape, 1, len(ids), device, torch.float32)   # the C kernels' models are float32
    batch = make_step_batch([(0, 0, ids)], [], device)
    batch = dataclasses.replace(batch, logit_rows=torch.arange(len(ids), device=device))
    with torch.inference_mode(), matmath.using(math):
        return model(batch, cache).float().log_softmax(dim=-1)


def compare(model, ids: list[int], math: MatMath, device) -> Fidelity:
    """`math`'s distributions against float32's over the prefill of ids."""
    ref = log_probs(model, ids, matmath.FP32, device)
    got = log_probs(model, ids, math, device)
    kl = (ref.exp() * (ref - got)).sum(dim=-1)     # (tokens,)
    top1 = (ref.argmax(dim=-1) == got.argmax(dim=-1)).float().mean()
    return Fidelity(float(kl.mean()), float(kl.max()), float(top1), len(ids))


@dataclass(slots=True, frozen=True)
class MathChoice:
    """The arithmetic a loaded model runs in, and why."""

    mode: str                       # what was asked: auto, fp32 or bf16
    math: MatMath
    note: str                       # why this arithmetic, in words
    fidelity: Fidelity | None = None
    on_kernels: bool = True         # False: the products run on torch (a GPU, bfloat16 or int8 weights)

    def as_dict(self) -> dict:
        """run.json's "matmul" (its float32 unit "torch" where the products do not run on the kernels)."""
        # off the kernels, MatMath.as_dict is not asked: its fp32_unit loads (and on first use compiles)
        # the CPU kernels, which a GPU run never needs
        units = self.math.as_dict() if self.on_kernels else {"unit": self.math.unit, "min_rows": self.math.min_rows,
                                                             "fp32_unit": "torch"}
        return {"mode": self.mode, **units, "note": self.note,
                "fidelity": None if self.fidelity is None else dataclasses.asdict(self.fidelity)}


def choose(loaded, mode: str, weights: str | None = None, say: Callable[[str], None] = lambda line: None) -> MathChoice:
    """--prefill-math for a loaded model: bf16 and auto need the C kernels (float32 activations on
    the CPU); auto takes the best bfloat16 unit only where the probe stays within the bound. Given the
    `weights`' identity (their files: loaders/cache.py), the probe's verdict is kept for the next
    start (fidelity_cache.py); `say` announces the probe."""
    if not ops.usable(loaded.device, loaded.dtype) or loaded.precision.name == "int8":
        if mode == "bf16":
            from backend import kernels
            if loaded.device.type == "cpu" and loaded.dtype == torch.float32 and kernels.load() is None:
                why = f"the C kernels are unavailable here ({kernels.reason()})"
            else:
                why = (f"this model runs on {loaded.device} in {loaded.precision.name}"
                       + (" (--dtype bfloat16 computes in bfloat16 already)" if loaded.device.type == "cpu" else ""))
            raise InputError(f"--prefill-math bf16 is the CPU kernels' bfloat16 products, for float32 or GGUF "
                             f"weights on the CPU; {why}")
        return MathChoice(mode, matmath.FP32, "the products run on torch, in the model's dtype", on_kernels=False)
    math = matmath.resolve(mode)
    if mode == "fp32":
        return MathChoice(mode, math, "float32 products, as asked")
    if not math.bf16:
        return MathChoice(mode, math, f"no bfloat16 unit here ({matmath.bf16_unit()[1]})")
    found = _probe(loaded, math, weights, say)
    if mode == "bf16":
        return MathChoice(mode, math, f"bfloat16 products, as asked; {found.describe()}", found)
    if found.within:
        return MathChoice(mode, math, f"auto: {found.describe()}", found)
    return MathChoice(mode, matmath.FP32, f"auto kept float32: bfloat16 moved the logits too far, {found.describe()}",
                      found)


def with_decode(choice: MathChoice, mode: str) -> MathChoice:
    """The choice with --decode-math applied: int8 only where the products run on the C kernels."""
    from backend.kernels import decodemath
    decodemath.check(mode)
    if mode == "fp32":
        return choice
    if not choice.on_kernels:
        raise InputError("--decode-math int8 is the CPU kernels' integer products, for GGUF or quantized weights "
                         "on the CPU; this model's products run on torch")
    return dataclasses.replace(choice, math=dataclasses.replace(choice.math, decode=mode),
                               note=f"{choice.note}; decode products of {'/'.join(decodemath.formats())} on int8 "
                                    f"activations ({decodemath.unit()})")


def _probe(loaded, math: MatMath, weights: str | None, say: Callable[[str], None]) -> Fidelity:
    """The probe's figures: kept from an earlier start of the same model file, or measured now."""
    from backend import kernels
    from backend.models import fidelity_cache
    from backend.models.packed import pack_weights
    key = None if weights is None else fidelity_cache.key_of(weights, loaded.precision.name, math.unit,
                                                                kernels.library_path().name, PROBE_TOKENS)
    found = None if key is None else _kept(fidelity_cache.recall(key))
    if found is not None:
        say(f"bfloat16 fidelity on {math.unit}: kept from an earlier start")
        return found
    say(f"probing bfloat16 fidelity on {math.unit} ({PROBE_TOKENS} tokens; once per model file)")
    pack_weights(loaded.model)   # the probe runs the products the steps will run
    found = compare(loaded.model, english_tokens(loaded.tokenizer, PROBE_TOKENS), math, loaded.device)
    if key is not None:
        fidelity_cache.remember(key, dataclasses.asdict(found))
    return found


def _kept(figures: dict | None) -> Fidelity | None:
    try:
        return None if figures is None else Fidelity(**figures)
    except TypeError:   # an older version's fields: probe again
        return None
