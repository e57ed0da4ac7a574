"""Gemma 2 and Gemma 3 (text) decoders: Llama's fused projections and rotary with Gemma's own details.

Where they differ from Llama, as transformers computes them:
  * the embedding rows are scaled by sqrt(hidden_size), that factor first rounded to the model dtype;
  * every RMSNorm multiplies by (1 + weight), in float32, and casts back after (the checkpoint
    stores the weight without the 1; llama.cpp's GGUFs store it with, the loader takes it off);
  * each sublayer's output is normalized again before the residual add (post_attention_layernorm,
    post_feedforward_layernorm), and the MLP's input by pre_feedforward_layernorm;
  * the MLP is GeGLU: tanh-approximated GELU of the gate times the up projection;
  * scores are scaled by query_pre_attn_scalar ** -0.5 instead of head_dim ** -0.5;
  * Gemma 2 caps the attention scores and the logits (c * tanh(x / c)); Gemma 3 normalizes q
    and k per head (Gemma's norm) before the rotary;
  * sliding-window layers and global layers alternate (shape.global_layers lists the global
    ones). Gemma 3's sliding layers rotate with their own base (rope_local_theta) and no
    scaling, its global ones with rope_theta and the checkpoint's linear factor.

The KV cache keeps every key of a sliding layer too (the window is a mask, as for Mistral): a
correct cache, not a small one. Decode steps run layer by layer: the fused C decode layer
(LlamaModel._decode_in_kernel) has none of the above; the C attention kernel does the scale, the
cap and the window (so a sliding layer's decode reads only its window's keys there).
"""
from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from backend.models.attention import AttentionPlan, attend
from backend.models.base import KVCache, StepBatch
from backend.models.llama import LlamaLayer, LlamaModel, Rotary, rms_norm
from backend.models.packed import linear
from backend.shape import ModelShape


def gemma_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma's RMSNorm: x / rms(x) * (1 + weight), computed in float32 and cast back to x's dtype."""
    return rms_norm(x.float(), 1.0 + weight.float(), eps).to(x.dtype)


def geglu(gate_up: torch.Tensor) -> torch.Tensor:
    """(N, 2 ff) rows of [gate | up] -> gelu_tanh(gate) * up, (N, ff)."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.gelu(gate, approximate="tanh") * up


def softcap(x: torch.Tensor, cap: float | None) -> torch.Tensor:
    return x if cap is None else torch.tanh(x / cap) * cap


class GemmaLayer(LlamaLayer):
    """LlamaLayer's matrices (attn_norm is input_layernorm, mlp_norm pre_feedforward_layernorm)
    and the two post-norms."""

    head_norm = staticmethod(gemma_norm)

    def __init__(self, shape: ModelShape):
        super().__init__(shape)
        self.post_attn_norm = nn.Parameter(torch.empty(shape.hidden_size))
        self.post_mlp_norm = nn.Parameter(torch.empty(shape.hidden_size))
        scalar = shape.query_pre_attn_scalar
        self.scale = None if scalar is None else float(scalar) ** -0.5
        self.attn_softcap = shape.attn_softcap

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, plan: AttentionPlan,
                cache_k: torch.Tensor, cache_v: torch.Tensor) -> torch.Tensor:
        h = gemma_norm(x, self.attn_norm, self.eps)
        q, k, v, rotary = self.attention_inputs(h, cos, sin, plan)   # Gemma 3's q/k norms: head_norm
        attn = attend(q, k, v, plan, cache_k, cache_v, rotary, self.scale, self.attn_softcap)
        x = x + gemma_norm(linear(attn, self.o), self.post_attn_norm, self.eps)
        h = gemma_norm(x, self.mlp_norm, self.eps)
        mlp = linear(geglu(linear(h, self.gate_up)), self.down)  # gate_up: (N, 2 ff)
        return x + gemma_norm(mlp, self.post_mlp_norm, self.eps)


class GemmaModel(LlamaModel):
    def __init__(self, shape: ModelShape, rope_freq_factors: torch.Tensor | None = None):
        super().__init__(shape, rope_freq_factors)
        self.layers = nn.ModuleList(GemmaLayer(shape) for _ in range(shape.num_layers))
        self.windows = [shape.window(i) for i in range(shape.num_layers)]
        # Gemma 3's sliding layers rotate with their own base, unscaled; Gemma 2's layers share one rotary
        local = self.rotary if shape.rope_local_theta is None else \
            Rotary(dataclasses.replace(shape, rope_theta=shape.rope_local_theta), None)
        self.rotaries = [self.rotary if i in shape.global_layers else local for i in range(shape.num_layers)]

    def forward(self, batch: StepBatch, cache: KVCache, static_len: int | None = None) -> torch.Tensor:
        """Logits (M, vocab) in the model dtype, for batch.logit_rows only (as LlamaModel.forward)."""
        s = self.shape
        x = F.embedding(batch.input_ids, self.embed)  # (N, d)
        x = x * torch.tensor(s.hidden_size ** 0.5, dtype=x.dtype).item()   # the normalizer in the model dtype
        plans = {w: AttentionPlan.build(batch, cache, x.dtype, static_len, w, kernel_window=True)
                 for w in set(self.windows)}
        tables = {id(r): r.lookup(batch.positions, cache.max_len, x.dtype) for r in self.rotaries}  # (cos, sin)
        for layer, window, rotary, cache_k, cache_v in zip(self.layers, self.windows, self.rotaries, cache.k, cache.v):
            x = layer(x, *tables[id(rotary)], plans[window], cache_k, cache_v)
        x = gemma_norm(x[batch.logit_rows], self.final_norm, s.norm_eps)  # (M, d)
        return softcap(linear(x, self.head_weight if self.packed_head is None else self.packed_head), s.final_softcap)

    def hf_destinations(self) -> dict[str, torch.Tensor]:
        """Llama's names, but post_attention_layernorm is a post-norm here and the MLP's input
        norm is pre_feedforward_layernorm."""
        dest = super().hf_destinations()
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            dest[p + "pre_feedforward_layernorm.weight"] = dest.pop(p + "post_attention_layernorm.weight")
            dest |= {p + "post_attention_layernorm.weight": layer.post_attn_norm.data,
                     p + "post_feedforward_layernorm.weight": layer.post_mlp_norm.data}
        return dest
