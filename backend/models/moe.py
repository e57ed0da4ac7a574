"""The mixture-of-experts feed-forward of a Llama-family layer (Mixtral, Qwen3-MoE, OLMoE).

A router (E, hidden) scores each token against E experts; the token runs through its top-k,
each a SwiGLU MLP of its own, and their outputs are summed weighted by the router's softmax
(renormalized over the k when `norm_topk_prob`; Mixtral always, which is the softmax over the
top-k logits). The experts' matrices are the layer's own 2-D parameters, `expert{e}_gate_up`
(2 ff, hidden: [gate | up]) and `expert{e}_down` (hidden, ff), and the router is `router`: so
packing (packed.pack_weights), quantization (loaders/quant.py) and loading see each one as they
see a dense layer's matrices, and each keeps its stored format (a GGUF's Q4_1 expert stays Q4_1).

Two implementations of the same arithmetic: on packed float32/quantized panels the C kernel
(backend/kernels/moe.c: router, top-k, one product per touched expert over the rows routed to
it); anywhere else (CUDA, bfloat16, unpacked weights, PHASESCOPE_KERNELS=0) torch, grouped the
same way. Both return how many distinct experts the step touched, so a step knows which weights
it read.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from backend.kernels import ops
from backend.models.packed import Panels, QuantPanels, kind_code, linear, matrix_bytes
from backend.shape import ModelShape


def gate_up_name(e: int) -> str:
    return f"expert{e}_gate_up"


def down_name(e: int) -> str:
    return f"expert{e}_down"


def add_experts(layer: nn.Module, shape: ModelShape) -> None:
    """Register the router and every expert's matrices on the layer (uninitialized)."""
    d, ff = shape.hidden_size, shape.intermediate_size
    layer.num_experts, layer.top_k, layer.norm_topk = shape.num_experts, shape.experts_per_token, shape.norm_topk_prob
    layer.router = nn.Parameter(torch.empty(shape.num_experts, d))
    for e in range(shape.num_experts):
        layer.register_parameter(gate_up_name(e), nn.Parameter(torch.empty(2 * ff, d)))
        layer.register_parameter(down_name(e), nn.Parameter(torch.empty(d, ff)))
    # Taken once per form of the weights, keyed by the router object they were taken with (packing,
    # or a copy of the model, replaces it): moe.c's pointers to the packed experts, one expert's bytes.
    layer.expert_table = None   # (router, int64 (E, 4))
    layer.expert_size = None    # (router, bytes)


def experts(layer: nn.Module) -> list[tuple]:
    """Each expert's (gate_up, down) matrices, in whatever form they are packed."""
    return [(getattr(layer, gate_up_name(e)), getattr(layer, down_name(e))) for e in range(layer.num_experts)]


def expert_bytes(layer: nn.Module) -> float:
    """Bytes a step reads of one touched expert (the mean over the layer's experts, which share a format)."""
    if layer.expert_size is None or layer.expert_size[0] is not layer.router:
        size = sum(matrix_bytes(g) + matrix_bytes(dn) for g, dn in experts(layer)) / layer.num_experts
        layer.expert_size = (layer.router, size)
    return layer.expert_size[1]


def run(layer: nn.Module, h: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, int]:
    """residual + the experts' weighted outputs for h (N, hidden), and the distinct experts touched."""
    if isinstance(layer.router, (Panels, QuantPanels)) and ops.usable(h.device, h.dtype):
        if layer.expert_table is None or layer.expert_table[0] is not layer.router:
            table = torch.tensor([[g.data.data_ptr(), dn.data.data_ptr(), kind_code(g), kind_code(dn)]
                                  for g, dn in experts(layer)], dtype=torch.long)   # (E, 4)
            layer.expert_table = (layer.router, table)
        ff = layer.expert0_down.shape[1]
        return ops.moe(h, residual, layer.router.data, kind_code(layer.router), layer.expert_table[1], layer.top_k,
                       ff, layer.norm_topk)
    return torch_moe(h, residual, layer.router, experts(layer), layer.top_k, layer.norm_topk)


def route(logits: torch.Tensor, top_k: int, norm_topk: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Router logits (N, E) -> each row's experts (N, k) and their weights (N, k), float32."""
    probs = torch.softmax(logits.float(), dim=-1)
    weights, chosen = probs.topk(top_k, dim=-1)
    if norm_topk:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return chosen, weights


def torch_moe(h: torch.Tensor, residual: torch.Tensor, router, expert_matrices: list[tuple], top_k: int,
              norm_topk: bool) -> tuple[torch.Tensor, int]:
    """The torch implementation: rows sorted by expert, one gate_up and one down product per touched expert."""
    chosen, weights = route(linear(h, router), top_k, norm_topk)   # (N, k) each
    flat = chosen.flatten()                                        # (N k,): slot s is row s // k
    order = flat.argsort(stable=True)
    counts = torch.bincount(flat, minlength=len(expert_matrices)).tolist()   # the one host sync
    rows, slot_weights = order // top_k, weights.flatten()[order].to(h.dtype)
    out = torch.zeros_like(residual)
    start = 0
    for (gate_up, down), m in zip(expert_matrices, counts):
        if m:
            idx = rows[start:start + m]
            gate, up = linear(h[idx], gate_up).chunk(2, dim=-1)    # (m, ff) each
            y = linear(F.silu(gate) * up, down) * slot_weights[start:start + m, None]   # (m, hidden)
            out.index_add_(0, idx, y)
        start += m
    return residual + out, sum(m > 0 for m in counts)


def destinations(layer: nn.Module, prefix: str) -> dict[str, torch.Tensor]:
    """transformers checkpoint names (Qwen3-MoE's and OLMoE's; hf.py renames Mixtral's) -> the layer's matrices."""
    dest = {prefix + "mlp.gate.weight": layer.router.data}
    for e, (gate_up, down) in enumerate(experts(layer)):
        ff = down.shape[1]
        p = f"{prefix}mlp.experts.{e}."
        dest |= {p + "gate_proj.weight": gate_up.data[:ff], p + "up_proj.weight": gate_up.data[ff:],
                 p + "down_proj.weight": down.data}
    return dest
