"""The layers' matrices in oneDNN's packed layout, for the CPU.

Behind `F.linear`, fp32 matrix products on the CPU go to MKL, whose kernels for a few rows
(a decode step) read the weights at well under the memory bandwidth and gain nothing from a
second thread. oneDNN's blocked weight layout -- what torch.compile's freezing pass uses on
the CPU -- runs the same products faster at every batch size measured, most at batch 8 to 32
where it takes about half the time (bench/README.md has the figures).

`pack_weights` converts a loaded model once, in place: every 2-D parameter of its layers is
replaced by its packed form (the plain copy is freed), and the LM head is packed too (a
tied head keeps the plain embedding for the lookup, so a tied model holds that matrix
twice). `linear` runs either form, so the models have one code path. Packing is skipped
where oneDNN is missing or cannot run the dtype; a packed model still runs on the CPU only.
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

# oneDNN and ideep above it each cache a compiled kernel per input shape, 1,024 by default;
# prefill steps come in thousands of shapes, so a long load run grew by ~3 MB/s toward a
# gigabyte or more. 256 of each keep every decode shape hot and memory flat (tests/test_soak.py).
# Both are read when the caches are first used, which is after this import.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "256")
os.environ.setdefault("LRU_CACHE_CAPACITY", "256")

# oneDNN picks its blocking for a batch-size hint; 32 measured as good as 8 or 512 at every
# batch from 1 to 512 on the reference CPU, and far better than the hint 1.
BATCH_HINT = 32


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """x @ w.T (+ b) for a plain (out, in) or a packed weight."""
    if w.is_mkldnn:
        return torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")
    return F.linear(x, w, b)


def can_pack(device: torch.device, dtype: torch.dtype) -> bool:
    """oneDNN is built in and runs this dtype here (bf16 needs CPU support that a probe checks)."""
    if device.type != "cpu" or dtype not in (torch.float32, torch.bfloat16) or not torch.backends.mkldnn.is_available():
        return False
    try:
        w = torch.ones(8, 8, dtype=dtype)
        got = linear(torch.ones(2, 8, dtype=dtype), _pack(w))
    except RuntimeError:
        return False
    return bool((got == 8).all())


def is_packed(model: nn.Module) -> bool:
    return getattr(model, "packed_head", None) is not None


def pack_weights(model: nn.Module) -> bool:
    """Pack the model's matrices in place if this device and dtype allow it; True if it is packed.

    The model needs `layers`, `head_weight` (the plain LM head matrix), `packed_head` and,
    when the head is not tied, an `lm_head` parameter. Calling it again does nothing.
    """
    if is_packed(model):
        return True
    head = model.head_weight
    if not can_pack(head.device, head.dtype):
        return False
    with torch.no_grad():
        for layer in model.layers:
            for name, p in list(layer.named_parameters(recurse=False)):
                if p.ndim == 2:
                    setattr(layer, name, nn.Parameter(_pack(p), requires_grad=False))
        packed_head = _pack(head)
        if getattr(model, "lm_head", None) is not None:   # untied: the packed matrix replaces the plain one
            model.lm_head = packed_head = nn.Parameter(packed_head, requires_grad=False)
        model.packed_head = packed_head
    return True


def _pack(w: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(w.detach().contiguous(), BATCH_HINT)
