"""Precisions a model's weights can run at, and what each costs in bytes: the one table the
loaders, the roofline, the summaries and the sweeps read.

A precision is the format of the layers' matrices (and the LM head). Activations, norms, the
KV cache and sampling stay in the activation dtype: float32 for the GGUF block formats (the CPU
kernels dequantize the weights in registers and multiply in float32), the device's float dtype
for int8 weight-only. No torch here: the CLI and the roofline use it bare.

  float32, bfloat16, float16   plain floats
  q8_0, q4_0, q4_1, q5_0, q5_1 GGUF blocks of 32 weights with fp16 scales (34, 18, 20, 22, 24
                               bytes a block), run by the project's C kernels (CPU)
  q4_k, q5_k, q6_k             GGUF K-quant super-blocks of 256 weights with 6-bit (int8 for
                               q6_k) sub-block scales (144, 176, 210 bytes a block), same kernels
  f16, bf16w                   GGUF F16 / BF16 weights, widened to float32 in the kernels'
                               registers (bf16w: not --dtype bf16, which runs the whole model in
                               bfloat16 on torch)
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
    # the formats a loaded model's matrices really run in, most weights first (a GGUF's mix:
    # q5_0, q8_0, q6_k, ...); empty where that is just `name`
    formats: tuple[str, ...] = ()

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
        """Bytes of a (rows, cols) matrix at this precision, scales included (a K-quant on rows that
        are not whole super-blocks of 256: its fallback format's, K_FALLBACK)."""
        if self.is_block and cols % self.block and self.name in K_FALLBACK:
            return precision(K_FALLBACK[self.name]).matrix_bytes(rows, cols)
        if self.is_block:
            return rows * (cols // self.block) * self.block_bytes
        if self.name == "int8":
            return rows * cols + rows * FLOAT_BYTES[self.activation]   # one scale per row
        return rows * cols * FLOAT_BYTES[self.name]


FLOAT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_FLOAT_KEYS = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
# weights per block and bytes per block of each format the C kernels run (backend/kernels/quant.h)
_BLOCKS = {"q8_0": (32, 34), "q4_0": (32, 18), "q4_1": (32, 20), "q5_0": (32, 22), "q5_1": (32, 24),
           "q4_k": (256, 144), "q5_k": (256, 176), "q6_k": (256, 210), "f16": (32, 64), "bf16w": (32, 64)}
BLOCK_FORMATS = tuple(_BLOCKS)
# llama.cpp's quantizer's fallback for a K-quant on rows that are not whole super-blocks of 256
K_FALLBACK = {"q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0"}
# GGUF tensor type names (gguf's GGMLQuantizationType, lower case) -> the kernels' format that runs them as stored
GGUF_FORMATS = {**{f: f for f in BLOCK_FORMATS if f != "bf16w"}, "bf16": "bf16w"}
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


def precision(name: str, activation: str = "float32", weight_bits: float | None = None,
              formats: tuple[str, ...] = ()) -> Precision:
    """The Precision for a name; `activation` matters only for int8 (its activations' float dtype).

    weight_bits: what a model really holds where its matrices mix formats (a GGUF whose layers
    are Q4_1 and whose LM head is Q8_0 runs as q4_1 at about 5.8 bits a weight)."""
    name = canonical(name)
    if name == "auto":
        raise InputError("precision: 'auto' must be resolved against a device and a checkpoint first")
    if weight_bits is not None or formats:
        from dataclasses import replace
        base = precision(name, activation)
        return replace(base, weight_bits=base.weight_bits if weight_bits is None else float(weight_bits),
                       formats=tuple(formats))
    if name in FLOAT_BYTES:
        return Precision(name, 8 * FLOAT_BYTES[name], _FLOAT_KEYS[name], name)
    if name in _BLOCKS:
        block, nbytes = _BLOCKS[name]
        return Precision(name, 8 * nbytes / block, "fp32", "float32", block, nbytes)
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
