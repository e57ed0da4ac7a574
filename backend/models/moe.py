"""The mixture-of-experts feed-forward of a Llama-family layer (Mixtral, Qwen3-MoE, OLMoE).

A router (E, hidden) scores each token against E experts; the token runs through its top-k,
each a SwiGLU MLP of its own, and their outputs are summed weighted by the router's softmax
(renormalized over the k when `norm_topk_prob`; Mixtral always, which is the softmax over the
top-k logits). The experts' matrices are the layer's own 2-D parameters, `expert{e}_gate_up`
(2 ff, hidden: [gate | up]) and `expert{e}_down` (hidden, ff), and the router is `router`: so
packing (packed.pack_weights), quantization (loaders/quant.py) and loading see each one as they
see a dense layer's matrices, and each keeps its stored format (a GGUF's Q4_1 expert stays Q4_1).

Implementations of the same arithmetic, chosen by `moe_path`:
  * kernel: on packed float32/quantized panels the C kernel (backend/kernels/moe.c: router, top-k,
    one product per touched expert over the rows routed to it);
  * sorted: torch, grouped the same way, one product per touched expert (off CUDA: bfloat16,
    unpacked weights, PHASESCOPE_KERNELS=0). Its group sizes are read on the host once a layer,
    which costs nothing on the CPU;
  * grouped, dense: on CUDA, where a host read per layer would stall the GPU at every layer (a
    decode step is launch-bound there). The experts' matrices are stacked into one tensor each
    (their parameters re-pointed at views of it, so no second copy), and the rows sorted by expert
    run in torch's grouped matmul with offsets computed on the device (grouped: bfloat16 on compute
    capability 8.0+), or, where that kernel is not there, every row through every expert in two
    batched products with the routing weights zero for experts not chosen (dense: E/k times the
    arithmetic, in blocks of rows that bound its memory).
Each returns how many distinct experts the step touched, so a step knows which weights it read;
on CUDA a 0-d device tensor, read once the step is over (Runner.step_reads).
"""
from __future__ import annotations

from enum import Enum

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
    layer.expert_stack = None   # (router, gate_up (E, 2 ff, hidden), down (E, hidden, ff)): the grouped/dense paths'


def experts(layer: nn.Module) -> list[tuple]:
    """Each expert's (gate_up, down) matrices, in whatever form they are packed."""
    return [(getattr(layer, gate_up_name(e)), getattr(layer, down_name(e))) for e in range(layer.num_experts)]


def expert_bytes(layer: nn.Module) -> float:
    """Bytes a step reads of one touched expert (the mean over the layer's experts, which share a format)."""
    if layer.expert_size is None or layer.expert_size[0] is not layer.router:
        size = sum(matrix_bytes(g) + matrix_bytes(dn) for g, dn in experts(layer)) / layer.num_experts
        layer.expert_size = (layer.router, size)
    return layer.expert_size[1]


DENSE_BYTES = 256 << 20   # the dense path's (E, rows, 2 ff) intermediate per block of rows


class MoePath(Enum):
    KERNEL = "kernel"     # the C kernel (packed panels on the CPU)
    SORTED = "sorted"     # torch, one product per touched expert; one host read a layer
    GROUPED = "grouped"   # torch's grouped matmul, offsets on the device: no host read
    DENSE = "dense"       # every row through every expert, unchosen ones weighted 0: no host read


def moe_path(device_type: str, dtype: torch.dtype, packed: bool, plain: bool, hidden: int, ff: int,
             capability: tuple[int, int] | None = None) -> MoePath:
    """packed: the router is packed panels the C kernels run (ops.usable); plain: the experts are
    plain tensors (not packed, not int8), which the CUDA paths stack. capability: the GPU's."""
    if packed:
        return MoePath.KERNEL
    if device_type != "cuda" or not plain:
        return MoePath.SORTED
    grouped = (hasattr(F, "grouped_mm") and dtype == torch.bfloat16 and capability is not None
               and capability >= (8, 0) and hidden % 8 == 0 and ff % 8 == 0)   # its rows 16-byte aligned
    return MoePath.GROUPED if grouped else MoePath.DENSE


def run(layer: nn.Module, h: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, int | torch.Tensor]:
    """residual + the experts' weighted outputs for h (N, hidden), and the distinct experts touched
    (on CUDA a 0-d tensor: reading it is a sync)."""
    packed = isinstance(layer.router, (Panels, QuantPanels)) and ops.usable(h.device, h.dtype)
    plain, capability = False, None
    if h.is_cuda:   # a stack taken for this form of the weights says so without a look at each expert
        stack = layer.expert_stack
        plain = (stack is not None and stack[0] is layer.router) or \
            all(isinstance(w, torch.Tensor) and not w.is_mkldnn for pair in experts(layer) for w in pair)
        capability = torch.cuda.get_device_capability(h.device)
    path = moe_path(h.device.type, h.dtype, packed, plain, h.shape[-1], layer.expert0_down.shape[1], capability)
    if path in (MoePath.GROUPED, MoePath.DENSE):
        gate_up, down = stacked(layer)
        return device_moe(h, residual, layer.router, gate_up, down, layer.top_k, layer.norm_topk,
                          path is MoePath.GROUPED)
    if path is MoePath.KERNEL:
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


def stacked(layer: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """The experts' matrices as gate_up (E, 2 ff, hidden) and down (E, hidden, ff), taken once per
    form of the weights; each expert's parameters then view their row of the stack (no second copy)."""
    if layer.expert_stack is None or layer.expert_stack[0] is not layer.router:
        pairs = experts(layer)
        gate_up = torch.stack([g.data for g, _ in pairs])
        down = torch.stack([dn.data for _, dn in pairs])
        for e, (g, dn) in enumerate(pairs):
            g.data, dn.data = gate_up[e], down[e]
        layer.expert_stack = (layer.router, gate_up, down)
    return layer.expert_stack[1], layer.expert_stack[2]


def device_moe(h: torch.Tensor, residual: torch.Tensor, router, gate_up: torch.Tensor, down: torch.Tensor,
               top_k: int, norm_topk: bool, grouped: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """torch_moe's arithmetic with no host read: stacked experts gate_up (E, 2 ff, d), down (E, d, ff);
    grouped (torch's grouped matmul over the rows sorted by expert) or dense (every row through every expert)."""
    num_experts, ff = down.shape[0], down.shape[2]
    chosen, weights = route(linear(h, router), top_k, norm_topk)   # (N, k) each
    flat = chosen.flatten()                                        # (N k,): slot s is row s // k
    # rows per expert: not bincount, which reads its largest value on the host on CUDA
    counts = torch.zeros(num_experts, dtype=torch.long, device=h.device).scatter_add_(0, flat, torch.ones_like(flat))
    if grouped:
        order = flat.argsort(stable=True)
        rows = order // top_k
        offsets = counts.cumsum(0).to(torch.int32)                 # each expert's last row + 1, on the device
        gate, up = F.grouped_mm(h[rows], gate_up.transpose(-2, -1), offs=offsets).chunk(2, dim=-1)   # (N k, ff) each
        y = F.grouped_mm(F.silu(gate) * up, down.transpose(-2, -1), offs=offsets)   # (N k, d)
        y = y * weights.flatten()[order, None].to(h.dtype)
        out = torch.zeros_like(residual).index_add_(0, rows, y)
    else:
        dense = torch.zeros(h.shape[0], num_experts, dtype=h.dtype, device=h.device)
        dense.scatter_(1, chosen, weights.to(h.dtype))             # (N, E): 0 for an expert not chosen
        block = max(1, DENSE_BYTES // (num_experts * 2 * ff * h.element_size()))
        parts = []
        for r0 in range(0, h.shape[0], block):
            x = h[r0:r0 + block]                                   # (n, d)
            gate, up = torch.matmul(x, gate_up.transpose(-2, -1)).chunk(2, dim=-1)   # (E, n, ff) each
            y = torch.bmm(F.silu(gate) * up, down.transpose(-2, -1))                  # (E, n, d)
            parts.append((y * dense[r0:r0 + block].T[:, :, None]).sum(0))             # (n, d)
        out = parts[0] if len(parts) == 1 else torch.cat(parts)
    return residual + out, (counts > 0).sum()


def destinations(layer: nn.Module, prefix: str) -> dict[str, torch.Tensor]:
    """transformers checkpoint names (Qwen3-MoE's and OLMoE's; hf.py renames Mixtral's) -> the layer's matrices."""
    dest = {prefix + "mlp.gate.weight": layer.router.data}
    for e, (gate_up, down) in enumerate(experts(layer)):
        ff = down.shape[1]
        p = f"{prefix}mlp.experts.{e}."
        dest |= {p + "gate_proj.weight": gate_up.data[:ff], p + "up_proj.weight": gate_up.data[ff:],
                 p + "down_proj.weight": down.data}
    return dest
