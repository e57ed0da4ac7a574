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
                               weight-only kernel (CPU, MPS; refused on CUDA: int8_refusal);
                               simulated on a GPU profile with
                               bfloat16 activations at the bf16 peak (weight-only: the weights are
                               widened in the kernel, the math is the activations')
  fp8                          simulated GPUs only: E4M3 weights and activations (one scale per
                               tensor), products at the profile's FP8 tensor peak; norms and the
                               residual stream in bfloat16
  nvfp4, mxfp4                 simulated Blackwell only: 4-bit E2M1 weights and activations in
                               blocks of 16 with an FP8 scale (NVFP4: 4.5 bits a weight) or of 32
                               with an E8M0 scale (MXFP4: 4.25 bits), at the FP4 tensor peak

The KV cache is kept at the activation dtype unless a precision says otherwise (`with_kv`:
--kv-dtype fp8 stores keys and values as E4M3, one byte an element).
"""
from __future__ import annotations

from dataclasses import dataclass

from backend.errors import InputError
from backend.run_info import RunInfo


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
    kv: str = ""              # the KV cache's dtype (KV_BYTES); "" is the activation dtype

    @property
    def weight_bytes(self) -> float:
        """Bytes per weight, scales included."""
        return self.weight_bits / 8

    @property
    def activation_bytes(self) -> int:
        return FLOAT_BYTES[self.activation]

    @property
    def kv_dtype(self) -> str:
        return self.kv or self.activation

    @property
    def kv_bytes(self) -> int:
        """Bytes per key or value element in the KV cache."""
        return KV_BYTES[self.kv_dtype]

    def with_kv(self, kv_dtype: str) -> Precision:
        """This precision with its KV cache in `kv_dtype` ("auto": the activation dtype)."""
        from dataclasses import replace
        name = canonical_kv(kv_dtype)
        return replace(self, kv="" if name in ("auto", self.activation) else name)

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
        if self.name in GPU_FORMATS:
            return int(rows * cols * self.weight_bits / 8)
        return rows * cols * FLOAT_BYTES[self.name]


FLOAT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
KV_BYTES = {**FLOAT_BYTES, "fp8": 1}
# simulated tensor-core formats: (bits a weight, scales included; the profile peak they run at)
GPU_FORMATS = {"fp8": (8.0, "fp8"), "nvfp4": (4.0 + 8 / 16, "fp4"), "mxfp4": (4.0 + 8 / 32, "fp4")}
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
           "q8": "q8_0", "int8_weight_only": "int8", "fp8_e4m3": "fp8", "e4m3": "fp8", "float8": "fp8"}
NAMES = ("float32", "bfloat16", "float16", *BLOCK_FORMATS, "int8", *GPU_FORMATS)


def int8_refusal(device_type: str) -> str | None:
    """Why --dtype int8 does not run on this device type, in one line (None: it runs there).

    On CUDA torch's int8 weight-only product (_weight_int8pack_mm) is not a tensor-core kernel: it
    runs many times slower than bfloat16 at prefill and batched decode, while the roofline prices
    int8's bytes, so every figure of such a run would misread the hardware."""
    if device_type != "cuda":
        return None
    return ("--dtype int8 does not run on CUDA: torch's int8 weight-only product there is many times slower than "
            "bfloat16 at prefill and batched decode, so its figures would misread the GPU; use --dtype bfloat16 "
            "or float16, or --simulate --dtype int8 for int8's price on a GPU profile")


def canonical(name: str) -> str:
    """The precision's name for any accepted spelling (case-insensitive); 'auto' stays 'auto'."""
    text = str(name).strip().lower().removeprefix("torch.")
    text = ALIASES.get(text, text)
    if text != "auto" and text not in NAMES:
        raise InputError(f"unknown dtype {name!r}; use one of: auto, {', '.join(NAMES)}")
    return text


def canonical_kv(name: str) -> str:
    """A --kv-dtype's name: auto, fp8 or a float dtype; one line for anything else."""
    text = str(name).strip().lower()
    text = ALIASES.get(text, text)
    if text != "auto" and text not in KV_BYTES:
        raise InputError(f"unknown KV cache dtype {name!r}; use one of: auto, {', '.join(KV_BYTES)}")
    return text


def precision(name: str, activation: str = "float32", weight_bits: float | None = None,
              formats: tuple[str, ...] = ()) -> Precision:
    """The Precision for a name; `activation` matters for int8 and the block formats (the activations'
    float dtype: float32 on the CPU kernels, a simulated GPU's bfloat16).

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
    if name in GPU_FORMATS:   # their norms and residual stream: bfloat16
        bits, key = GPU_FORMATS[name]
        return Precision(name, bits, key, "bfloat16")
    activation = canonical(activation)
    if name in _BLOCKS:   # the CPU kernels multiply in float32; a simulated GPU runs them weight-only
        block, nbytes = _BLOCKS[name]
        if activation not in FLOAT_BYTES:
            raise InputError(f"{name} weights need float activations, not {activation}")
        return Precision(name, 8 * nbytes / block, _FLOAT_KEYS[activation], activation, block, nbytes)
    if activation not in FLOAT_BYTES:
        raise InputError(f"int8 weights need float activations, not {activation}")
    return Precision("int8", 8.0, _FLOAT_KEYS[activation], activation)


def from_info(info: RunInfo) -> Precision | None:
    """The Precision a run recorded (run.json's info); None where unknown."""
    name = info.dtype
    if not name:
        return None
    try:
        found = precision(name, info.activation_dtype or "float32", info.weight_bits)
        return found.with_kv(info.kv_dtype) if info.kv_dtype else found
    except InputError:
        return None
