"""Quantized weights at load: which format each matrix runs in, packing the model, and what it holds.

`choose` turns --dtype into a target: a GGUF block format (q8_0, q4_0, q4_1) for every layer
matrix (the LM head at Q8_0, as llama.cpp writes it),
"auto" (each matrix in the format its GGUF file stores, where the C kernels run it), "int8"
(int8 weight-only on torch) or None (plain floats). `apply` packs the model for it, using a
GGUF's own blocks where they are already in the wanted format and quantizing the floats
otherwise; `effective` says what the packed model holds: its Precision, with the real bits per
weight over all matrices, and the bytes a step reads.
"""
from __future__ import annotations

from collections import Counter

import torch

from backend import kernels
from backend.errors import InputError
from backend.kernels import ops
from backend.loaders.device import dtype_name
from backend.loaders.hf import Checkpoint
from backend.shape import ModelShape
from backend.models.packed import Int8Weight, Panels, QuantPanels, int8_kernel, matrix_bytes, pack_weights, quantize_int8
from backend.precision import BLOCK_FORMATS, Precision, precision

AUTO = "auto"
# The LM head at --dtype q8_0/q4_0/q4_1, as llama.cpp's quantizer writes it for these formats
# (Q6_K where the width is a multiple of 256, Q8_0 otherwise; the kernels run no Q6_K, so Q8_0):
# the bundled Q4_1 file has its head at Q8_0, and at Q4_1 the head alone changes its answers.
HEAD_FORMAT = "q8_0"


def choose(wanted: str, device: torch.device, ckpt: Checkpoint | None) -> str | None:
    """The quantization target for a canonical --dtype (see the module docstring)."""
    if wanted == "int8":
        return wanted
    if wanted in BLOCK_FORMATS:
        if not ops.usable(device, torch.float32):
            where = (f"on {device} use --dtype int8 (weight-only)" if device.type != "cpu" else
                     f"they are unavailable here ({kernels.reason()}); --dtype int8 runs torch's int8 weight-only kernel")
            raise InputError(f"--dtype {wanted} runs on the project's CPU kernels: {where}")
        _check_widths(wanted, ckpt.shape if ckpt is not None else None)
        return wanted
    if wanted == AUTO and device.type == "cpu" and ckpt is not None and ops.usable(device, torch.float32):
        if any(fmt in BLOCK_FORMATS for name, fmt in ckpt.formats.items() if name.endswith("weight")):
            return AUTO
    return None


def _check_widths(fmt: str, shape: ModelShape | None) -> None:
    if shape is None:
        return
    widths = {"hidden size": shape.hidden_size, "attention width": shape.num_heads * shape.head_dim,
              "MLP width": shape.intermediate_size}
    odd = [f"{what} {n}" for what, n in widths.items() if n % 32]
    if odd:
        raise InputError(f"--dtype {fmt} quantizes in blocks of 32 inputs, and this model's {', '.join(odd)} "
                         "is not a multiple of 32")


def apply(model: torch.nn.Module, target: str, ckpt: Checkpoint | None) -> str:
    """Pack the model for the target in place; what was done, in words."""
    if target == "int8":
        quantize_int8(model)
        head = model.packed_head.scales
        fused = int8_kernel(head.device, head.dtype)
        kernel = ("torch._weight_int8pack_mm" if fused else
                  f"int8 cast to {dtype_name(head.dtype)} per product: torch has no fused int8 kernel here")
        return f"int8 weight-only, one scale per output row ({kernel})"
    pieces = _pieces(model)
    formats = ckpt.formats if ckpt is not None else {}
    blocks = ckpt.blocks if ckpt is not None else {}
    done: Counter[str] = Counter()

    head_key = _key(model.head_weight)

    def choose_one(w: torch.Tensor) -> tuple[str, torch.Tensor | None]:
        names = pieces.get(_key(w), [])
        stored = {formats.get(n) for n in names}
        fmt = HEAD_FORMAT if target in BLOCK_FORMATS and _key(w) == head_key else target
        if target == AUTO:   # the stored format where all the matrix's pieces share one the kernels run
            fmt = stored.pop() if len(stored) == 1 and names and next(iter(stored)) in BLOCK_FORMATS else "float32"
        if fmt == "float32":
            done[f"float32 ({'/'.join(sorted(s or '?' for s in stored)) or 'random'} stored)"] += 1
            return fmt, None
        if names and all(formats.get(n) == fmt and n in blocks for n in names):
            done[f"{fmt} as stored"] += 1
            return fmt, torch.cat([blocks[n] for n in names]) if len(names) > 1 else blocks[names[0]]
        origin = "/".join(sorted(s for s in stored if s)) or "random floats"
        done[f"{fmt} quantized from {origin}"] += 1
        return fmt, None

    if not pack_weights(model, choose_one):
        raise InputError("quantized weights need the project's CPU kernels, which are unavailable here")
    return "; ".join(f"{n} {'matrix' if n == 1 else 'matrices'} {what}" for what, n in done.items())


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _pieces(model: torch.nn.Module) -> dict[int, list[str]]:
    """Each matrix's storage -> the checkpoint names filling it, in row order (q, k, v for qkv)."""
    found: dict[int, list[tuple[int, str]]] = {}
    for name, view in model.hf_destinations().items():
        if view.ndim == 2:
            found.setdefault(_key(view), []).append((view.storage_offset(), name))
    return {key: [n for _, n in sorted(parts)] for key, parts in found.items()}


def effective(model: torch.nn.Module, target: str, activation: torch.dtype) -> tuple[Precision, int]:
    """(the Precision the packed model runs at, the bytes a step reads of its weights)."""
    matrices, small = [], 0
    for layer in model.layers:
        for value in vars(layer).values():
            if isinstance(value, (Panels, QuantPanels, Int8Weight)):
                matrices.append(value)
        small += sum(p.numel() * p.element_size() for p in layer.parameters(recurse=False) if p.ndim == 1)
    small += sum(p.numel() * p.element_size() for p in model.parameters(recurse=False) if p.ndim == 1)
    head = model.packed_head
    matrices.append(head)
    params = sum(m.shape[0] * m.shape[1] for m in matrices)
    nbytes = sum(matrix_bytes(m) for m in matrices)
    name = target
    if target == AUTO:   # the format that holds most of the layers' weights
        by_format: Counter[str] = Counter()
        for m in matrices[:-1]:
            by_format[m.fmt if isinstance(m, QuantPanels) else "float32"] += m.shape[0] * m.shape[1]
        name = by_format.most_common(1)[0][0]
    return precision(name, dtype_name(activation), weight_bits=8 * nbytes / params), nbytes + small
