"""The layers' matrices repacked once for the CPU's matrix-product kernels.

Behind `F.linear`, fp32 products on the CPU go to MKL, whose kernels for the few rows of a
decode step read the weights at well under the memory bandwidth and gain little from a second
thread. Two packed layouts do better; `pack_weights` picks one per model, once, in place:

  * Panels, for the project's own C kernel (backend/kernels/linear.c), float32: the matrix in
    panels of 32 output rows, each panel one contiguous run that a thread reads front to back.
    A decode step then streams the weights at the speed of a plain memory read, and large
    batches and prefill run near the matrix-multiply rate (bench/README.md has the figures).
  * oneDNN's blocked layout (what torch.compile's freezing pass uses on the CPU), for bfloat16
    and wherever the C kernels cannot be built; about twice as fast as MKL at batch 8 to 32.

  * Quantized panels (QuantPanels), for the C kernels' products with GGUF blocks (Q8_0, Q4_0,
    Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) or F16 / BF16 weights (backend/kernels/quant.h): chosen
    at load for a quantized precision, from the checkpoint's own blocks where it stores that
    format, else quantized from the floats. A fused matrix whose pieces a GGUF stores in
    different formats (q and k Q5_0, v Q8_0) is one QuantPanels of row segments, each its own
    format (QuantPanels.join), run as one product.

Every 2-D parameter of the layers is replaced by its packed form (the plain copy is freed), and
the LM head is packed too (a tied head keeps the plain embedding for the lookup, so a tied model
holds that matrix twice). `linear` runs any of the three forms, so the models have one code path.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from backend import kernels
from backend.kernels import ops
from backend.precision import precision

# oneDNN and ideep above it each cache a compiled kernel per input shape, 1,024 by default;
# prefill steps come in thousands of shapes, so a long load run grew by ~3 MB/s toward a
# gigabyte or more. 256 of each keep every decode shape hot and memory flat (tests/cli/test_soak.py).
# Both are read when the caches are first used, which is after this import.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "256")
os.environ.setdefault("LRU_CACHE_CAPACITY", "256")

# oneDNN picks its blocking for a batch-size hint; 32 measured as good as 8 or 512 at every
# batch from 1 to 512 on the reference CPU, and far better than the hint 1.
BATCH_HINT = 32


@dataclass(slots=True, frozen=True)
class Panels:
    """An (out, in) float32 matrix for the C kernel: (num_panels, in, width), rows zero-padded."""

    data: torch.Tensor
    out_features: int

    @classmethod
    def pack(cls, w: torch.Tensor, width: int) -> Panels:
        out, inp = w.shape
        padded = -(-out // width) * width
        data = F.pad(w.detach(), (0, 0, 0, padded - out))           # (padded, in)
        data = data.view(padded // width, width, inp).transpose(1, 2).contiguous()  # (panels, in, width)
        return cls(data, out)

    @property
    def shape(self) -> tuple[int, int]:
        return self.out_features, self.data.shape[1]


@dataclass(slots=True, frozen=True)
class QuantPanels:
    """An (out, in) matrix in a GGUF format, packed for the quantized products (quant.h); or, for
    fmt "segments", row segments in formats of their own (parts), which data lists for the kernels."""

    data: torch.Tensor      # uint8, the panels (int64, the kernels' list of parts, for "segments")
    fmt: str                # a backend.precision.BLOCK_FORMATS name, or "segments"
    out_features: int
    in_features: int
    parts: tuple = ()       # "segments": the rows' QuantPanels and float32 Panels, in row order

    @classmethod
    def from_blocks(cls, blocks: torch.Tensor, fmt: str, in_features: int) -> QuantPanels:
        """From rows of GGUF blocks, uint8 (out, in / block * block bytes): the file's bytes, used as is."""
        return cls(ops.quant_pack(blocks, fmt, in_features), fmt, blocks.shape[0], in_features)

    @classmethod
    def quantize(cls, w: torch.Tensor, fmt: str) -> QuantPanels:
        return cls.from_blocks(ops.quantize_rows(w, fmt), fmt, w.shape[1])

    @classmethod
    def join(cls, parts: list[QuantPanels | Panels]) -> QuantPanels | Panels:
        """Row segments stacked into one matrix (a single part is returned as it is)."""
        if len(parts) == 1:
            return parts[0]
        listed = [(p.fmt if isinstance(p, QuantPanels) else "float32", p.out_features, p.data) for p in parts]
        return cls(ops.segments(listed), "segments", sum(p.out_features for p in parts), parts[0].shape[1],
                   tuple(parts))

    @property
    def shape(self) -> tuple[int, int]:
        return self.out_features, self.in_features

    @property
    def nbytes(self) -> int:
        """The format's bytes for this matrix, scales included (what a step reads)."""
        if self.parts:
            return sum(matrix_bytes(p) for p in self.parts)
        return precision(self.fmt).matrix_bytes(self.out_features, self.in_features)

    def formats(self) -> list[tuple[str, int]]:
        """(format, weights) of each segment (one for a single-format matrix)."""
        if not self.parts:
            return [(self.fmt, self.out_features * self.in_features)]
        return [(p.fmt if isinstance(p, QuantPanels) else "float32", p.out_features * p.shape[1]) for p in self.parts]


@dataclass(slots=True, frozen=True)
class Int8Weight:
    """int8 weight-only: an (out, in) int8 matrix with one scale per output row (any device).

    Run by torch's weight-only kernel (`torch._weight_int8pack_mm`, as gpt-fast does) where the
    device has it, else by a float product of the weights cast on the fly (correct, not fast)."""

    weight: torch.Tensor    # int8 (out, in)
    scales: torch.Tensor    # (out,), the activation dtype

    @classmethod
    def quantize(cls, w: torch.Tensor) -> Int8Weight:
        w = w.detach()
        scales = (w.float().abs().amax(dim=1) / 127).clamp_min(1e-12)   # (out,)
        q = torch.round(w.float() / scales[:, None]).clamp_(-127, 127).to(torch.int8)
        return cls(q.contiguous(), scales.to(w.dtype))

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.weight.shape)

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]

    @property
    def nbytes(self) -> int:
        return self.weight.numel() + self.scales.numel() * self.scales.element_size()


def int8_kernel(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether torch's fused int8 weight-only kernel runs on this device and dtype (a probe)."""
    try:
        x = torch.ones(2, 32, device=device, dtype=dtype)
        got = torch._weight_int8pack_mm(x, torch.ones(8, 32, device=device, dtype=torch.int8),
                                        torch.ones(8, device=device, dtype=dtype))
    except (RuntimeError, AttributeError, NotImplementedError):
        return False
    return bool((got == 32).all())


def _int8_linear(x: torch.Tensor, w: Int8Weight) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1])
    if _INT8_FUSED.get((x.device.type, x.dtype)) is None:
        _INT8_FUSED[(x.device.type, x.dtype)] = int8_kernel(x.device, x.dtype)
    if _INT8_FUSED[(x.device.type, x.dtype)]:
        y = torch._weight_int8pack_mm(flat.contiguous(), w.weight, w.scales)
    else:
        y = F.linear(flat, w.weight.to(x.dtype)) * w.scales
    return y.view(*x.shape[:-1], w.out_features)


_INT8_FUSED: dict[tuple[str, torch.dtype], bool] = {}


def matrix_bytes(w: torch.Tensor | Panels | QuantPanels | Int8Weight) -> int:
    """Bytes a step reads of one matrix in any of its forms (padding left out)."""
    if isinstance(w, (QuantPanels, Int8Weight)):
        return w.nbytes
    if isinstance(w, Panels):
        return w.out_features * w.data.shape[1] * w.data.element_size()
    return w.numel() * w.element_size()


def step_weight_bytes(model: nn.Module) -> int:
    """Bytes of the weights a step reads whatever its tokens: every layer matrix (an MoE's experts
    all included; see the runner's step_reads) and norm, the final norm and the LM head, in their
    packed or plain forms. The embedding table is not in it (a step gathers only its tokens' rows),
    unless it is the tied LM head."""
    total = 0
    for layer in model.layers:
        packed = [v for v in vars(layer).values() if isinstance(v, (Panels, QuantPanels, Int8Weight))]
        total += sum(matrix_bytes(w) for w in (*packed, *layer.parameters(recurse=False)))
    total += sum(p.numel() * p.element_size() for p in model.parameters(recurse=False) if p.ndim == 1)
    head = model.packed_head if getattr(model, "packed_head", None) is not None else model.head_weight
    return total + matrix_bytes(head)


def kind_code(w: torch.Tensor | Panels | QuantPanels) -> int:
    """The C kernels' code for a packed matrix's format (ops.KINDS)."""
    return ops.KINDS[w.fmt] if isinstance(w, QuantPanels) else ops.KINDS["float32"]


def linear(x: torch.Tensor, w: torch.Tensor | Panels | QuantPanels, b: torch.Tensor | None = None,
           residual: torch.Tensor | None = None) -> torch.Tensor:
    """x @ w.T (+ b) (+ residual) for a plain (out, in) weight, Panels, QuantPanels or a oneDNN-packed weight."""
    if isinstance(w, QuantPanels):
        return ops.qlinear(x, w.data, w.fmt, w.out_features, b, residual)
    if isinstance(w, Int8Weight):
        y = _int8_linear(x, w)
        if b is not None:
            y = y.add_(b)
        return y if residual is None else y.add_(residual)
    if isinstance(w, Panels):
        return ops.linear(x, w.data, w.out_features, b, residual)
    if w.is_mkldnn:
        y = torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")
    else:
        y = F.linear(x, w, b)
    return y if residual is None else y.add_(residual)


def kernels_in_use(device: torch.device, dtype: torch.dtype, precision=None) -> str:
    """Which kernels a model on this device and dtype (and Precision) runs its layers on, in words."""
    if precision is not None and precision.is_block:
        held = precision.formats or (precision.name,)
        floats = " and float32 panels" if "float32" in held else ""
        blocks = "/".join(f for f in held if f != "float32")
        return f"phasescope C kernels ({blocks} weights dequantized in registers{floats}, float32 accumulation)"
    if precision is not None and precision.name == "int8":
        fused = int8_kernel(device, dtype)
        return "torch int8 weight-only (" + ("_weight_int8pack_mm)" if fused else "cast per product, no fused kernel)")
    if device.type != "cpu":
        return "torch"
    if ops.usable(device, dtype):
        return "phasescope C kernels (built for this CPU)"
    why = "are float32 only" if dtype != torch.float32 else f"unavailable: {kernels.reason()}"
    library = "oneDNN" if can_pack(device, dtype) else "MKL"
    return f"torch + {library} (phasescope C kernels {why})"


def can_pack(device: torch.device, dtype: torch.dtype) -> bool:
    """oneDNN is built in and runs this dtype here (bf16 needs CPU support that a probe checks)."""
    if device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16) or not torch.backends.mkldnn.is_available():
        return False
    try:
        w = torch.ones(8, 8, dtype=dtype)
        got = linear(torch.ones(2, 8, dtype=dtype), _onednn(w))
    except RuntimeError:
        return False
    return bool((got == 8).all())


def is_packed(model: nn.Module) -> bool:
    return getattr(model, "packed_head", None) is not None


def pack_weights(model: nn.Module,
                 formats: Callable[[torch.Tensor], list[tuple[int, str, torch.Tensor | None]]] | None = None) -> bool:
    """Pack the model's matrices in place if this device and dtype allow it; True if it is packed.

    The model needs `layers`, `head_weight` (the plain LM head matrix), `packed_head` and,
    when the head is not tied, an `lm_head` parameter. Calling it again does nothing.

    formats: for quantized weights (the loader's choice), maps each plain matrix to its row
    segments in order, (rows, format, blocks) each: the format (float32 or a BLOCK_FORMATS name)
    and the checkpoint's own GGUF blocks for those rows in that format, or None to quantize the
    floats here. A matrix of several segments runs as one QuantPanels of segments.
    """
    if is_packed(model):
        return True
    head = model.head_weight
    if formats is not None:
        if not ops.usable(head.device, head.dtype):
            return False
        width = kernels.load().psk_panel_width()

        def pack(w):
            parts, start = [], 0
            for rows, fmt, blocks in formats(w):
                piece = w[start:start + rows]   # (rows, in)
                start += rows
                if fmt == "float32":
                    parts.append(Panels.pack(piece, width))
                else:
                    parts.append(QuantPanels.quantize(piece, fmt) if blocks is None
                                 else QuantPanels.from_blocks(blocks, fmt, w.shape[1]))
            return QuantPanels.join(parts)
    elif ops.usable(head.device, head.dtype):
        width = kernels.load().psk_panel_width()
        pack = lambda w: Panels.pack(w, width)   # noqa: E731
    elif can_pack(head.device, head.dtype):
        pack = lambda w: nn.Parameter(_onednn(w), requires_grad=False)   # noqa: E731
    else:
        return False
    with torch.no_grad():
        for layer in model.layers:
            for name, p in list(layer.named_parameters(recurse=False)):
                if p.ndim == 2:
                    _replace(layer, name, pack(p))
        packed_head = pack(head)
        if getattr(model, "lm_head", None) is not None:   # untied: the packed matrix replaces the plain one
            _replace(model, "lm_head", packed_head)
        model.packed_head = packed_head
    return True


def quantize_int8(model: nn.Module) -> None:
    """Replace every layer matrix and the LM head by int8 weight-only (Int8Weight), in place."""
    if is_packed(model):
        raise ValueError("quantize_int8: the model is already packed")
    with torch.no_grad():
        for layer in model.layers:
            for name, p in list(layer.named_parameters(recurse=False)):
                if p.ndim == 2:
                    _replace(layer, name, Int8Weight.quantize(p))
        head = Int8Weight.quantize(model.head_weight)
        if getattr(model, "lm_head", None) is not None:
            _replace(model, "lm_head", head)
        model.packed_head = head


def _replace(module: nn.Module, name: str, packed: nn.Parameter | Panels | QuantPanels | Int8Weight) -> None:
    """Swap a parameter for its packed form; Panels are plain attributes, not parameters."""
    if isinstance(packed, (Panels, QuantPanels, Int8Weight)):
        del module._parameters[name]
    setattr(module, name, packed)


def _onednn(w: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(w.detach().contiguous(), BATCH_HINT)
