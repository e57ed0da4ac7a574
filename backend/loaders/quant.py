"""Quantized weights at load: which format each matrix runs in, packing the model, and what it holds.

`choose` turns --dtype into a target: a format the C kernels run (backend.precision.BLOCK_FORMATS:
q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, f16, bf16w) for every layer matrix (the LM head
at Q8_0, as llama.cpp writes it), "auto" (each matrix in the format its GGUF file stores, where
the C kernels run it), "int8" (int8 weight-only on torch) or None (plain floats). `apply` packs
the model for it, using a GGUF's own blocks where they are already in the wanted format and
quantizing the floats otherwise; `effective` says what the packed model holds: its Precision,
with the real bits per weight over all matrices and the formats they run in, and the bytes a
step reads.

A fused matrix (q|k|v, gate|up) is filled by several GGUF tensors, which llama.cpp's mixes store
in different formats (Q4_K_M: q and k Q5_0, v Q8_0): at "auto" each piece keeps its own format,
as a row segment of one matrix (packed.QuantPanels.join). A piece in a format the kernels do not
run (Q2_K, Q3_K, the IQ types) is dequantized to float32, and the description says so.

A K-quant target on a matrix whose input width is not a multiple of 256 falls back as llama.cpp's
quantizer does: q4_k to q5_0, q5_k to q5_1, q6_k to q8_0 (the bundled SmolLM2's hidden size
576 is not; its MLP width 1536 is).
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
from backend.models.packed import (Int8Weight, Panels, QuantPanels, int8_kernel, matrix_bytes, pack_weights,
                                   quantize_int8, step_weight_bytes)
from backend.precision import (BLOCK_FORMATS, GGUF_FORMATS, GPU_FORMATS, K_FALLBACK, Precision, int8_refusal,
                               precision)

AUTO = "auto"
# The LM head at a quantized --dtype, as llama.cpp's quantizer writes it for these formats
# (Q6_K where the width is a multiple of 256, Q8_0 otherwise): the bundled Q4_1 file has its
# head at Q8_0, and at Q4_1 the head alone changes its answers. At f16 / bf16w it stays so.
HEAD_FORMAT = "q8_0"
HALF_FORMATS = ("f16", "bf16w")


def choose(wanted: str, device: torch.device, ckpt: Checkpoint | None) -> str | None:
    """The quantization target for a canonical --dtype (see the module docstring)."""
    if wanted == "int8":
        if (refusal := int8_refusal(device.type)) is not None:
            raise InputError(refusal)
        return wanted
    if wanted in GPU_FORMATS:
        raise InputError(f"--dtype {wanted} is a GPU tensor-core format the simulator prices (--simulate --profile "
                         "h100-sxm, or b200 for nvfp4 and mxfp4); this engine does not run it")
    if wanted in BLOCK_FORMATS:
        if not ops.usable(device, torch.float32):
            where = ("on CUDA use --dtype bfloat16 or float16" if device.type == "cuda" else
                     f"on {device} use --dtype int8 (weight-only)" if device.type != "cpu" else
                     f"they are unavailable here ({kernels.reason()}); --dtype int8 runs torch's int8 weight-only kernel")
            raise InputError(f"--dtype {wanted} runs on the project's CPU kernels: {where}")
        _check_widths(wanted, ckpt.shape if ckpt is not None else None)
        return wanted
    if wanted == AUTO and device.type == "cpu" and ckpt is not None and ops.usable(device, torch.float32):
        stored = {fmt for name, fmt in ckpt.formats.items() if name.endswith("weight")}
        # a quantized GGUF, or an F16 / BF16 one (a safetensors checkpoint's bf16 stays plain floats)
        if stored & (set(GGUF_FORMATS) - {"f16", "bf16"}) or (stored & {"f16", "bf16"} and "GGUF" in ckpt.source):
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
    plan = _Plan(model, target, ckpt, kept=(ckpt.blocks if ckpt is not None else {}).__contains__)
    formats, blocks, wanted, stored_as = plan.formats, plan.blocks, plan.wanted, plan.stored_as
    done: Counter[str] = Counter()

    def choose_one(w: torch.Tensor) -> list[tuple[int, str, torch.Tensor | None]]:
        names = plan.names(w)
        stored = sorted({formats.get(n) or "?" for n, _ in names})
        if target == AUTO:   # each piece in its stored format where the kernels run it, float32 elsewhere
            segs: list[tuple[int, str, list[torch.Tensor]]] = []
            for name, rows in names:
                fmt = stored_as(name) or "float32"
                if segs and segs[-1][1] == fmt:
                    segs[-1] = (segs[-1][0] + rows, fmt, segs[-1][2] + [blocks.get(name)])
                else:
                    segs.append((rows, fmt, [blocks.get(name)]))
            if not segs or all(fmt == "float32" for _, fmt, _ in segs):
                done[f"float32 ({'/'.join(stored) or 'random'} stored)"] += 1
                return [(w.shape[0], "float32", None)]
            kinds = "+".join(fmt for _, fmt, _ in segs)
            unrun = "/".join(s for s in stored if s not in GGUF_FORMATS)
            where = f", float32 where {unrun} is stored" if "float32" in kinds else ""
            done[f"{kinds} as stored{where}"] += 1
            return [(rows, fmt, None if fmt == "float32" else torch.cat(b) if len(b) > 1 else b[0])
                    for rows, fmt, b in segs]
        fmt = wanted(w)
        if plan.as_stored(w, names):
            done[f"{fmt} as stored"] += 1
            return [(w.shape[0], fmt, torch.cat([blocks[n] for n, _ in names]) if len(names) > 1 else blocks[names[0][0]])]
        origin = "/".join(s for s in stored if s != "?") or "random floats"
        done[f"{fmt} quantized from {origin}"] += 1
        return [(w.shape[0], fmt, None)]

    if not pack_weights(model, choose_one):
        raise InputError("quantized weights need the project's CPU kernels, which are unavailable here")
    return "; ".join(f"{n} {'matrix' if n == 1 else 'matrices'} {what}" for what, n in done.items())


def floats_unused(model: torch.nn.Module, target: str | None, ckpt: Checkpoint | None) -> set[str]:
    """The checkpoint tensors whose float values a load packed for `target` never reads, asked before
    any is read: each fills rows that `apply` packs from the file's own blocks, of a matrix whose
    float copy packing drops (a layer's; the LM head, unless it is the embedding, which a step reads
    as floats). Only a checkpoint that keeps its blocks as it is read says which (a GGUF's:
    Checkpoint.floats_unused is a set); the torch paths (int8, plain floats) read every float."""
    if ckpt is None or ckpt.floats_unused is None or target is None or target == "int8":
        return set()
    plan = _Plan(model, target, ckpt, kept=lambda name: ckpt.formats.get(name) in GGUF_FORMATS)
    dropped = [p for layer in model.layers for p in layer.parameters(recurse=False) if p.ndim == 2]   # pack_weights'
    if getattr(model, "lm_head", None) is not None:
        dropped.append(model.head_weight)
    unused: set[str] = set()
    for w in dropped:
        names = plan.names(w)
        if target == AUTO:   # piece by piece, as apply packs them
            unused.update(n for n, _ in names if plan.stored_as(n) is not None)
        elif plan.as_stored(w, names):
            unused.update(n for n, _ in names)
    return unused


class _Plan:
    """Which format each matrix runs in for a target, and where its rows come from: what `apply` packs
    and what `floats_unused` foresees, one rule for both. `kept(name)`: whether the checkpoint has
    (or, read, will have) that tensor's blocks."""

    def __init__(self, model: torch.nn.Module, target: str, ckpt: Checkpoint | None, kept):
        self.target = target
        self.pieces = _pieces(model)
        self.formats = ckpt.formats if ckpt is not None else {}
        self.blocks = ckpt.blocks if ckpt is not None else {}
        self.kept = kept
        self.head_key = _key(model.head_weight)

    def names(self, w: torch.Tensor) -> list[tuple[str, int]]:
        """The checkpoint tensors filling the matrix's rows, in order, and their rows."""
        names = self.pieces.get(_key(w), [])
        if sum(rows for _, rows in names) != w.shape[0]:
            return []   # rows no checkpoint tensor fills (random weights): the matrix as a whole
        return names

    def wanted(self, w: torch.Tensor) -> str:
        """The format a matrix runs in at an explicit --dtype."""
        fmt = self.target
        if _key(w) == self.head_key and self.target not in HALF_FORMATS:
            fmt = HEAD_FORMAT
        if precision(fmt).block > 32 and w.shape[1] % precision(fmt).block:
            fmt = K_FALLBACK[fmt]
        return fmt

    def stored_as(self, name: str) -> str | None:
        """The kernels' format that runs this checkpoint tensor as stored, if it does and its bytes are kept."""
        fmt = GGUF_FORMATS.get(self.formats.get(name, ""))
        return fmt if fmt is not None and self.kept(name) else None

    def as_stored(self, w: torch.Tensor, names: list[tuple[str, int]]) -> bool:
        """At an explicit --dtype: whether every row of the matrix is packed from the file's blocks."""
        fmt = self.wanted(w)
        return bool(names) and all(self.stored_as(n) == fmt for n, _ in names)


def _key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _pieces(model: torch.nn.Module) -> dict[int, list[tuple[str, int]]]:
    """Each matrix's storage -> the checkpoint names filling it and their rows, in row order (q, k, v for qkv)."""
    found: dict[int, list[tuple[int, str, int]]] = {}
    for name, view in model.hf_destinations().items():
        if view.ndim == 2:
            found.setdefault(_key(view), []).append((view.storage_offset(), name, view.shape[0]))
    return {key: [(n, rows) for _, n, rows in sorted(parts)] for key, parts in found.items()}


def effective(model: torch.nn.Module, target: str, activation: torch.dtype) -> tuple[Precision, int]:
    """(the Precision the packed model runs at, the bytes a step reads of its weights)."""
    matrices = [v for layer in model.layers for v in vars(layer).values()
                if isinstance(v, (Panels, QuantPanels, Int8Weight))]
    head = model.packed_head
    matrices.append(head)
    params = sum(m.shape[0] * m.shape[1] for m in matrices)
    nbytes = sum(matrix_bytes(m) for m in matrices)
    layers: Counter[str] = Counter()
    every: Counter[str] = Counter()
    for i, m in enumerate(matrices):
        for fmt, weights in (m.formats() if isinstance(m, QuantPanels) else [("float32", m.shape[0] * m.shape[1])]):
            every[fmt] += weights
            if i < len(matrices) - 1:
                layers[fmt] += weights
    name = target
    if target == AUTO or (target != "int8" and target not in layers):
        # the format that holds most of the layers' weights (a K-quant whose every row fell back
        # to its 32-block format, --dtype q6_k on a 576-wide model, is named by that format)
        name = layers.most_common(1)[0][0]
    held = tuple(f for f, _ in every.most_common()) if target != "int8" else ()
    return precision(name, dtype_name(activation), weight_bits=8 * nbytes / params, formats=held), step_weight_bytes(model)
