"""Which arithmetic the C kernels' matrix products run in: float32 FMAs, or bfloat16 on the CPU's
matrix units with float32 accumulation (bf16.c).

A product of few rows (a small decode batch) reads every weight for a little arithmetic: the
memory is its roof, and rounding the panels to bfloat16 on the way only adds work. A product
of many rows (a prefill, a mixed step, a large decode batch) is arithmetic-bound, and the
bfloat16 units do twice (AVX512-BF16's vdpbf16ps) to many times (Intel's AMX tiles) the float32
FMA rate. So a MatMath names a unit and the fewest rows that run on it; fewer rows stay float32.

MIN_ROWS is the crossover measured on the reference CPU (2-core AMD EPYC, AVX512-BF16; decode batches of
the bundled model, the two paths alternating in one process, 2 threads): bfloat16 over float32 took
1.30-1.40x at 16 rows, 1.06-1.18x at 24, 0.95x (Q8_0, Q4_1) to 1.08x (float32 weights) at 32, 0.84-0.98x at
48. It was 16 while the quantized float32 route dequantized every panel from 9 rows on (qlinear.c's
DEQUANT_ROWS); with the register tile's passes up to 32 rows, bfloat16 pays from 32.
The AMX figure is the tile's height, not a measurement (no AMX machine was at hand).

PHASESCOPE_MATH_UNITS (a comma-separated list, "" for none) hides the other units, to see how
a CPU without them runs (the tests do).

`bf16_unit()` says which unit this CPU and build can run, checking it on a small product
against torch first (a unit that computes wrong is refused with the reason, never used);
`resolve()` turns the user's --prefill-math into a MatMath; `using()` hands one to the kernels for
a step and restores the one before, since one process may hold models run in different
arithmetic (and every other caller of the kernels gets float32 unless it asks).
"""
from __future__ import annotations

import faulthandler
import os
import signal
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

from backend import kernels
from backend.errors import InputError
from backend.kernels import decodemath

MODES = ("auto", "fp32", "bf16")
CODES = {"fp32": 0, "AVX512-BF16": 1, "AMX": 2}   # bf16.h's PSK_MATH_*
MIN_ROWS = {"AVX512-BF16": 32, "AMX": 16}


@dataclass(slots=True, frozen=True)
class MatMath:
    """The products' arithmetic: `unit` for products of at least `min_rows` rows, float32 below."""

    unit: str = "fp32"       # "fp32", "AVX512-BF16" or "AMX"
    min_rows: int = 0
    decode: str = "fp32"     # --decode-math: "int8" runs the decode products of Q8_0/Q4_x/Q5_x/K-quants on int8 (decodemath.py)

    @property
    def bf16(self) -> bool:
        return self.unit != "fp32"

    def math_for(self, rows: int) -> str:
        """'bf16' or 'fp32': what a product of this many rows computes in."""
        return "bf16" if self.bf16 and rows >= self.min_rows else "fp32"

    def unit_for(self, rows: int) -> str:
        """The unit a product of this many rows runs on, in words."""
        return self.unit if self.math_for(rows) == "bf16" else fp32_unit()

    def describe(self) -> str:
        if not self.bf16:
            return f"float32 products ({fp32_unit()})"
        return (f"bfloat16 products on {self.unit} for {self.min_rows}+ rows (prefill, decode batches of "
                f"{self.min_rows}+), float32 ({fp32_unit()}) below")

    def as_dict(self) -> dict:
        return {"unit": self.unit, "min_rows": self.min_rows, "fp32_unit": fp32_unit(), "decode": self.decode}


FP32 = MatMath()


def fp32_unit() -> str:
    """The float32 FMA unit the kernels were built for, in words ('AVX-512 FMA', 'AVX2 FMA', ...)."""
    built = kernels.isa()
    if built is None:
        return "torch"
    return f"{built[0]} FMA" if built[0] in ("AVX-512", "AVX2") else built[0]


@lru_cache(maxsize=1)
def amx_permission() -> tuple[bool, str]:
    """Whether this process holds the AMX tile state (asked of Linux once), and in words."""
    lib = kernels.load()
    if lib is None:
        return False, f"not asked: the C kernels are unavailable ({kernels.reason()})"
    if not kernels.cpu_units().get("AMX"):
        return False, "not asked: the CPU has no AMX"
    failed = lib.psk_amx_request()
    if failed:
        return False, f"refused by the kernel: {os.strerror(failed)} (Linux 5.16 or later grants it)"
    return True, "granted (arch_prctl ARCH_REQ_XCOMP_PERM)"


@lru_cache(maxsize=1)
def _units() -> tuple[tuple[str, str], ...]:
    """(unit, '' or why not) for AMX and AVX512-BF16, best first."""
    lib = kernels.load()
    found = []
    for unit in ("AMX", "AVX512-BF16"):
        if lib is None:
            found.append((unit, f"the C kernels are unavailable ({kernels.reason()})"))
        elif not kernels.cpu_units().get(unit):
            found.append((unit, f"this CPU has no {unit}"))
        elif unit not in os.environ.get("PHASESCOPE_MATH_UNITS", unit).split(","):
            found.append((unit, "hidden by PHASESCOPE_MATH_UNITS"))
        elif not lib.psk_math_compiled() & (1 << CODES[unit]):
            found.append((unit, f"the C compiler here cannot build {unit} code"))
        elif unit == "AMX" and not amx_permission()[0]:
            found.append((unit, f"the tile permission was {amx_permission()[1]}"))
        else:
            found.append((unit, _self_check(unit)))
    return tuple(found)


def bf16_unit() -> tuple[str | None, str]:
    """The best bfloat16 unit here, or None and why there is none."""
    units = _units()
    for unit, why in units:
        if not why:
            return unit, ""
    return None, "; ".join(f"{unit}: {why}" for unit, why in units)


def units_report() -> dict[str, str]:
    """Each bfloat16 unit: 'usable' or why not (for doctor)."""
    return {unit: why or "usable" for unit, why in _units()}


def resolve(mode: str) -> MatMath:
    """--prefill-math as a MatMath for the CPU kernels: fp32, bf16 (refused in one line where no
    unit runs it), or auto -- the best unit; the caller then keeps it only if the model's logits
    stay within fidelity.BOUND."""
    if mode not in MODES:
        raise InputError(f"--prefill-math {mode!r}: use one of {', '.join(MODES)}")
    if mode == "fp32":
        return FP32
    unit, why = bf16_unit()
    if unit is None:
        if mode == "bf16":
            raise InputError(f"--prefill-math bf16: no bfloat16 unit runs here ({why}); use fp32 or auto")
        return FP32
    return MatMath(unit, MIN_ROWS[unit])


def select(math: MatMath) -> None:
    """Make the kernels compute in `math` from now on (a no-op without them)."""
    lib = kernels.load()
    if lib is not None and lib.psk_set_math(CODES[math.unit], math.min_rows):
        raise RuntimeError(f"the kernels cannot run {math.unit} products")
    decodemath.select(math.decode)
    _selected[0] = math


_selected = [FP32]


@contextmanager
def using(math: MatMath):
    """The kernels compute in `math` inside the block, in what they did before after it."""
    previous = _selected[0]
    select(math)
    try:
        yield
    finally:
        select(previous)


def _self_check(unit: str) -> str:
    """'' if a product on `unit` matches torch on the same bfloat16-rounded operands, else why not.

    On Linux the product runs in a forked child first, writing into shared memory: a unit that
    faults (a tile instruction the kernel refuses, say) kills the child, not this process."""
    import torch

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(40, 80, generator=generator)           # 40 rows: every path of the tiles, padding included
    w = torch.randn(70, 80, generator=generator)           # 70 outputs: a partial last panel
    want = x.bfloat16().float() @ w.bfloat16().float().T
    lib = kernels.load()
    width = lib.psk_panel_width()
    padded = torch.nn.functional.pad(w, (0, 0, 0, -70 % width))                 # (outputs padded, 80)
    panels = padded.view(-1, width, 80).transpose(1, 2).contiguous()           # (panels, 80, width): packed.Panels
    got = torch.zeros(40, 70)
    if hasattr(os, "fork") and sys.platform.startswith("linux"):
        got.share_memory_()
        crashed = _in_child(lambda: _product(lib, unit, x, panels, got))
        if crashed:
            return crashed
    else:
        _product(lib, unit, x, panels, got)
    error = float((got - want).abs().max())
    return "" if error < 1e-3 else f"its products are wrong here (largest error {error:.3g}): not used"


def _product(lib, unit: str, x, panels, got) -> None:
    """got = x @ W^T on `unit` (the kernels' one entry, no torch operation), then float32 again."""
    lib.psk_set_math(CODES[unit], 1)
    try:
        lib.psk_matmul(CODES["fp32"], panels.data_ptr(), x.data_ptr(), None, None, got.data_ptr(), x.shape[0],
                       got.shape[1], x.shape[1])
    finally:
        lib.psk_set_math(CODES[_selected[0].unit], _selected[0].min_rows)


def _in_child(run) -> str:
    """Run `run` in a forked child (the kernels' pool runs alone there): '' if it exits cleanly, else why not."""
    pid = os.fork()
    if pid == 0:   # the child: no Python cleanup, no torch, just the product
        faulthandler.disable()   # a fault is the answer here, not a traceback to print
        try:
            run()
            code = 0
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"a test product killed the process ({signal.Signals(os.WTERMSIG(status)).name}): not used"
    if os.WEXITSTATUS(status):
        return "a test product failed: not used"
    return ""
