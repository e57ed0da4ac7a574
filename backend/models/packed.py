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

Every 2-D parameter of the layers is replaced by its packed form (the plain copy is freed), and
the LM head is packed too (a tied head keeps the plain embedding for the lookup, so a tied model
holds that matrix twice). `linear` runs any of the three forms, so the models have one code path.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from backend import kernels
from backend.kernels import ops

# oneDNN and ideep above it each cache a compiled kernel per input shape, 1,024 by default;
# prefill steps come in thousands of shapes, so a long load run grew by ~3 MB/s toward a
# gigabyte or more. 256 of each keep every decode shape hot and memory flat (tests/test_soak.py).
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


def linear(x: torch.Tensor, w: torch.Tensor | Panels, b: torch.Tensor | None = None,
           residual: torch.Tensor | None = None) -> torch.Tensor:
    """x @ w.T (+ b) (+ residual) for a plain (out, in) weight, Panels or a oneDNN-packed weight."""
    if isinstance(w, Panels):
        return ops.linear(x, w.data, w.out_features, b, residual)
    if w.is_mkldnn:
        y = torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")
    else:
        y = F.linear(x, w, b)
    return y if residual is None else y.add_(residual)


def kernels_in_use(device: torch.device, dtype: torch.dtype) -> str:
    """Which kernels a model on this device and dtype runs its layers on, in words (and why not ours)."""
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


def pack_weights(model: nn.Module) -> bool:
    """Pack the model's matrices in place if this device and dtype allow it; True if it is packed.

    The model needs `layers`, `head_weight` (the plain LM head matrix), `packed_head` and,
    when the head is not tied, an `lm_head` parameter. Calling it again does nothing.
    """
    if is_packed(model):
        return True
    head = model.head_weight
    if ops.usable(head.device, head.dtype):
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


def _replace(module: nn.Module, name: str, packed: nn.Parameter | Panels) -> None:
    """Swap a parameter for its packed form; Panels are plain attributes, not parameters."""
    if isinstance(packed, Panels):
        del module._parameters[name]
    setattr(module, name, packed)


def _onednn(w: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(w.detach().contiguous(), BATCH_HINT)
