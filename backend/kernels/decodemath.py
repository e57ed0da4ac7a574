"""Which arithmetic the C kernels' decode products of quantized weights run in (--decode-math).

fp32 (the default): the weights are dequantized in registers and multiplied by the float32
activations, equal to the float32 product on the dequantized weights up to the order of its
additions. int8: for the products of at most MAX_ROWS rows (batch-1 decode, small batches, a
speculative verification) whose weights are Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1 (and Q4_K, Q5_K, Q6_K in
builds with AVX2: formats()), the activations are quantized
per block of 32 to int8 with a float scale and each block's dot product is integer, as
llama.cpp does (qint8.c): fewer instructions a weight, at the price of rounding the
activations, which moves the logits (fidelity measured in bench/README.md). Other formats and
products of more rows keep fp32; prefill is --prefill-math's.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch

from backend import kernels
from backend.errors import InputError

MODES = ("fp32", "int8")
MAX_ROWS = 8           # the integer tile's rows of x (qint8.h INT8_ROWS): decode batches and verifications
FORMATS = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1")   # on every build
K_FORMATS = ("q4_k", "q5_k", "q6_k")                   # where the kernels have AVX2 (qint8k.c)

_selected = ["fp32"]


def check(mode: str) -> str:
    """--decode-math as given, or one clear line."""
    if mode not in MODES:
        raise InputError(f"--decode-math {mode!r}: use one of {', '.join(MODES)}")
    return mode


def unit() -> str:
    """The integer dot product this build runs, in words ('AVX-512 VNNI vpdpbusd', ...)."""
    lib = kernels.load()
    return "unavailable" if lib is None else lib.psk_int8_isa().decode()


def formats() -> tuple[str, ...]:
    """The formats whose decode products this build of the kernels runs on int8 activations."""
    from backend.kernels.ops import KINDS
    lib = kernels.load()
    if lib is None:
        return FORMATS
    return FORMATS + tuple(f for f in K_FORMATS if lib.psk_int8_kind(KINDS[f]))


def select(mode: str) -> None:
    """The kernels' decode products run in `mode` from now on (a no-op without the kernels)."""
    check(mode)
    lib = kernels.load()
    if lib is not None:
        lib.psk_set_decode_math(MODES.index(mode), MAX_ROWS)
    _selected[0] = mode


def selected() -> str:
    return _selected[0]


@contextmanager
def using(mode: str):
    """The kernels' decode products run in `mode` inside the block, in what they did before after it."""
    previous = _selected[0]
    select(mode)
    try:
        yield
    finally:
        select(previous)


def quantize_acts(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (n, in) float32 as the int8 products take it: int8 quants (n, in), and per block of 32 the
    float scale and the int32 sum of the quants, (n, in / 32) each (for the tests' exact reference)."""
    x = x.detach().to(torch.float32).contiguous()
    n, inp = x.shape
    if inp % 32:
        raise ValueError(f"int8 activations take rows of whole blocks of 32, not {inp}")
    q = torch.empty(n, inp, dtype=torch.int8)
    d = torch.empty(n, inp // 32, dtype=torch.float32)
    s = torch.empty(n, inp // 32, dtype=torch.int32)
    if x.numel():
        kernels.load().psk_quantize_acts(x.data_ptr(), n, inp, q.data_ptr(), d.data_ptr(), s.data_ptr())
    return q, d, s
