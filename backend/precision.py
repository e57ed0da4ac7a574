"""Precisions a model's weights can run at, and what each costs in bytes: the one table the
loaders, the roofline, the summaries and the sweeps read.

A precision is the format of the layers' matrices (and the LM head). Activations, norms, the
KV cache and sampling stay in the activation dtype: float32 for the GGUF block formats (the CPU
kernels dequantize the weights in registers and multiply in float32), the device's float dtype
for int8 weight-only. No torch here: the CLI and the roofline use it bare.

  float32, bfloat16, float16   plain floats
  q8_0, q4_0, q4_1             GGUF blocks of 32 weights with fp16 scales (34, 18, 20 bytes a
                               block), run by the project's C kernels (CPU)
  int8                         int8 weights with one float scale per output row, run by torch's
                               weight-only kernel (any device)
"""
from __future__ import annotations

from dataclasses import dataclass

from backend.errors import InputError


@dataclass(slots=True, frozen=True)
class Precision:
    name: str                 # what --dtype takes and run.json records
    weight_bits: float        # bits per weight, block scales included (per-row scales: about 0)
    compute: str              # the profile peak a product at this precision runs at: fp32, bf16, fp16
    activation: str           # the dtype of everything but the matrices
    block: int = 0            # weights per block of a GGUF format (0: not a block format)
    block_bytes: int = 0

    @property
    def weight_bytes(self) -> float:
        """Bytes per weight, scales included."""
        return self.weight_bits / 8

    @property
    def activation_bytes(self) -> int:
        return FLOAT_BYTES[self.activation]

    @property
    def is_block(self) -> bool:
        """A GGUF block format (the C kernels' quantized products)."""
        return self.block > 0

    @property
    def is_quantized(self) -> bool:
        return self.name not in FLOAT_BYTES

    def matrix_bytes(self, rows: int, cols: int) -> int:
        """Bytes of a (rows, cols) matrix at this precision, scales included."""
        if self.is_block:
            return rows * (cols // self.block) * self.block_bytes
        if self.name == "int8":
            return rows * cols + rows * FLOAT_BYTES[self.activation]   # one scale per row
        return rows * cols * FLOAT_BYTES[self.name]


FLOAT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_FLOAT_KEYS = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
BLOCK_FORMATS = ("q8_0", "q4_0", "q4_1")
_BLOCKS = {"q8_0": 34, "q4_0": 18, "q4_1": 20}
ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16",
           "q8": "q8_0", "int8_weight_only": "int8"}
NAMES = ("float32", "bfloat16", "float16", *BLOCK_FORMATS, "int8")


def canonical(name: str) -> str:
    """The precision's name for any accepted spelling (case-insensitive); 'auto' stays 'auto'."""
    text = str(name).strip().lower().removeprefix("torch.")
    text = ALIASES.get(text, text)
    if text != "auto" and text not in NAMES:
        raise InputError(f"unknown dtype {name!r}; use one of: auto, {', '.join(NAMES)}")
    return text


def precision(name: str, activation: str = "float32", weight_bits: float | None = None) -> Precision:
    """The Precision for a name; `activation` matters only for int8 (its activations' float dtype).

    weight_bits: what a model really holds where its matrices mix formats (a GGUF whose layers
    are Q4_1 and whose LM head is Q8_0 runs as q4_1 at about 5.8 bits a weight)."""
    name = canonical(name)
    if name == "auto":
        raise InputError("precision: 'auto' must be resolved against a device and a checkpoint first")
    if weight_bits is not None:
        from dataclasses import replace
        return replace(precision(name, activation), weight_bits=float(weight_bits))
    if name in FLOAT_BYTES:
        return Precision(name, 8 * FLOAT_BYTES[name], _FLOAT_KEYS[name], name)
    if name in _BLOCKS:
        return Precision(name, 8 * _BLOCKS[name] / 32, "fp32", "float32", 32, _BLOCKS[name])
    activation = canonical(activation)
    if activation not in FLOAT_BYTES:
        raise InputError(f"int8 weights need float activations, not {activation}")
    return Precision("int8", 8.0, _FLOAT_KEYS[activation], activation)


def from_info(info: dict) -> Precision | None:
    """The Precision a run recorded (run.json's info, or ModelLoaded.info()); None where unknown."""
    name = info.get("dtype")
    if not name:
        return None
    try:
        return precision(name, info.get("activation_dtype") or "float32", info.get("weight_bits"))
    except InputError:
        return None
