"""Llama-family decoder (Llama, Mistral, Qwen2, Qwen3, SmolLM): RMSNorm, rotary, grouped-query attention, SwiGLU.

Qwen3 adds an RMSNorm over each head of q and of k (`shape.qk_norm`) before the rotary; OLMoE one
over each whole projection (`qk_norm_full`), then clamps q, k and v (`clip_qkv`). A mixture-of-experts
shape (Mixtral, Qwen3-MoE, OLMoE) replaces the MLP by routed experts (backend/models/moe.py). Those
models' decode steps run layer by layer (the fused C decode layer has none of these).

The projections are fused -- q, k and v in one matrix, gate and up in another -- so each layer
runs three matmuls on the (N, hidden) step matrix instead of seven. `hf_destinations` maps the
transformers checkpoint names onto row blocks of the fused weights.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from backend.kernels import ops
import backend.models.moe as moe
from backend.models.attention import AttentionPlan, attend
from backend.models.base import KVCache, StepBatch
from backend.shape import ModelShape
from backend.models.packed import Panels, QuantPanels, kind_code, linear


class Rotary:
    """cos/sin tables for every position, computed once (in float32, as transformers does) and indexed per step."""

    def __init__(self, shape: ModelShape, freq_factors: torch.Tensor | None):
        # Explicitly on the CPU: loaders build models under torch.device("meta").
        steps = torch.arange(0, shape.head_dim, 2, dtype=torch.float64, device="cpu") / shape.head_dim
        inv_freq = 1.0 / shape.rope_theta ** steps
        if freq_factors is not None:
            inv_freq = inv_freq / freq_factors.to("cpu", torch.float64)
        self.inv_freq = inv_freq.float()   # (hd/2,)
        self.cos = self.sin = torch.empty(0, device="cpu")

    def lookup(self, positions: torch.Tensor, min_len: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(N,) positions -> cos, sin (N, 1, hd): broadcast over heads."""
        if self.cos.shape[0] < min_len or self.cos.device != positions.device or self.cos.dtype != dtype:
            t = torch.arange(min_len, dtype=torch.float32, device=positions.device)
            freqs = torch.outer(t, self.inv_freq.to(positions.device))  # (L, hd/2)
            emb = torch.cat((freqs, freqs), dim=-1)                     # (L, hd): HF's half-split layout
            self.cos, self.sin = emb.cos().to(dtype), emb.sin().to(dtype)
        return self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (N, heads, hd): rotate pairs (i, i + hd/2), the HF "rotate_half" convention; cos, sin (N, 1, hd).
    On the C kernels one pass (torch's five ops cost about a third of a 128-token prefill's products)."""
    if ops.usable(x.device, x.dtype) and cos.shape[-1] == x.shape[-1] and cos.numel() == x.shape[0] * x.shape[-1]:
        return ops.rotary(x, cos, sin)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """F.rms_norm; for float32 on the CPU one pass of the C kernel, or else plain kernels: there
    F.rms_norm's composite kernel measured 4x slower on 512 rows (bench/README.md)."""
    if ops.usable(x.device, x.dtype):
        return ops.rms_norm(x, weight, eps)
    if not x.is_cpu or x.dtype != torch.float32:
        return F.rms_norm(x, x.shape[-1:], weight, eps)
    scale = x.square().mean(-1, keepdim=True).add_(eps).rsqrt_()
    return torch.mul(x, scale).mul_(weight)


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    """(N, 2 ff) rows of [gate | up] -> silu(gate) * up, (N, ff)."""
    if ops.usable(gate_up.device, gate_up.dtype):
        return ops.silu_mul(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


class LlamaLayer(nn.Module):
    def __init__(self, shape: ModelShape):
        super().__init__()
        d, hd, ff = shape.hidden_size, shape.head_dim, shape.intermediate_size
        self.q_size, self.kv_size = shape.num_heads * hd, shape.num_kv_heads * hd
        self.heads, self.kv_heads, self.head_dim, self.eps = shape.num_heads, shape.num_kv_heads, hd, shape.norm_eps
        self.attn_norm = nn.Parameter(torch.empty(d))
        self.qkv = nn.Parameter(torch.empty(self.q_size + 2 * self.kv_size, d))
        self.qkv_bias = nn.Parameter(torch.empty(self.q_size + 2 * self.kv_size)) if shape.attention_bias else None
        self.full_qk_norm, self.clip_qkv = shape.qk_norm_full, shape.clip_qkv
        self.q_norm = nn.Parameter(torch.empty(self.q_size if self.full_qk_norm else hd)) if shape.qk_norm else None
        self.k_norm = nn.Parameter(torch.empty(self.kv_size if self.full_qk_norm else hd)) if shape.qk_norm else None
        self.o = nn.Parameter(torch.empty(d, self.q_size))
        self.mlp_norm = nn.Parameter(torch.empty(d))
        self.is_moe = shape.num_experts > 0
        if self.is_moe:
            moe.add_experts(self, shape)
        else:
            self.gate_up = nn.Parameter(torch.empty(2 * ff, d))
            self.down = nn.Parameter(torch.empty(d, ff))
        self.experts_touched = 0   # by the last forward (an MoE layer)

    # the norm of the per-head q and k norms (Qwen3's); GemmaLayer's is Gemma's (1 + w) one
    head_norm = staticmethod(rms_norm)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, plan: AttentionPlan,
                cache_k: torch.Tensor, cache_v: torch.Tensor) -> torch.Tensor:
        h = rms_norm(x, self.attn_norm, self.eps)
        q, k, v, rotary = self.attention_inputs(h, cos, sin, plan)
        x = linear(attend(q, k, v, plan, cache_k, cache_v, rotary), self.o, residual=x)
        h = rms_norm(x, self.mlp_norm, self.eps)
        if self.is_moe:
            x, self.experts_touched = moe.run(self, h, x)
            return x
        return linear(swiglu(linear(h, self.gate_up)), self.down, residual=x)  # gate_up: (N, 2 ff)

    def attention_inputs(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, plan: AttentionPlan):
        """The normalized input h (N, hidden) -> q (N, heads, hd), k and v (N, kv, hd) for attend, with
        the q/k norms and clip applied, and the rotary attend still has to apply (the kernel's) or None."""
        n = h.shape[0]
        qkv = linear(h, self.qkv, self.qkv_bias)  # (N, (heads + 2 kv) * hd)
        qk_size = self.q_size + self.kv_size
        qk = qkv[:, :qk_size].view(n, self.heads + self.kv_heads, self.head_dim)
        if self.full_qk_norm:   # OLMoE: q and k each normalized over its whole projection
            q = rms_norm(qkv[:, :self.q_size], self.q_norm, self.eps)
            k = rms_norm(qkv[:, self.q_size:qk_size], self.k_norm, self.eps)
            qk = torch.cat((q, k), dim=1).view(n, self.heads + self.kv_heads, self.head_dim)
        elif self.q_norm is not None:   # Qwen3, Gemma 3: each head's q and k normalized over its head_dim
            q = self.head_norm(qk[:, :self.heads].reshape(-1, self.head_dim), self.q_norm, self.eps)
            k = self.head_norm(qk[:, self.heads:].reshape(-1, self.head_dim), self.k_norm, self.eps)
            qk = torch.cat((q.view(n, self.heads, -1), k.view(n, self.kv_heads, -1)), dim=1)  # (N, heads + kv, hd)
        rotary = (cos, sin) if plan.rotates_in_kernel else None
        v = qkv[:, qk_size:].view(n, self.kv_heads, self.head_dim)  # (N, kv, hd)
        if self.clip_qkv is not None:   # OLMoE: after the norms, before the rotary
            qk, v = qk.clamp(-self.clip_qkv, self.clip_qkv), v.clamp(-self.clip_qkv, self.clip_qkv)
        if rotary is None:   # q and k sit side by side in each row: one rotary pass over both heads' sets
            qk = apply_rotary(qk, cos, sin)
        q, k = qk[:, :self.heads], qk[:, self.heads:]        # (N, heads, hd), (N, kv, hd)
        return q, k, v, rotary

    def kernel_weights(self) -> tuple:
        """Data pointers of the layer's weights for the C decode layer (its matrices are Panels or
        QuantPanels), then the matrices' format codes."""
        bias = None if self.qkv_bias is None else self.qkv_bias.data_ptr()
        return (self.attn_norm.data_ptr(), self.qkv.data.data_ptr(), bias, self.o.data.data_ptr(),
                self.mlp_norm.data_ptr(), self.gate_up.data.data_ptr(), self.down.data.data_ptr(),
                *(kind_code(w) for w in (self.qkv, self.o, self.gate_up, self.down)))


class LlamaModel(nn.Module):
    def __init__(self, shape: ModelShape, rope_freq_factors: torch.Tensor | None = None):
        super().__init__()
        self.shape = shape
        self.embed = nn.Parameter(torch.empty(shape.vocab_size, shape.hidden_size))
        self.layers = nn.ModuleList(LlamaLayer(shape) for _ in range(shape.num_layers))
        self.final_norm = nn.Parameter(torch.empty(shape.hidden_size))
        # A tied head is not registered twice: module conversions (to_empty) would untie it.
        self.lm_head = None if shape.tie_embeddings else nn.Parameter(torch.empty(shape.vocab_size, shape.hidden_size))
        self.rotary = Rotary(shape, rope_freq_factors)
        self.packed_head: torch.Tensor | None = None   # set by packed.pack_weights
        self._kernel_tables: tuple[torch.Tensor, torch.Tensor] | None = None   # _decode_in_kernel's pointers

    @property
    def head_weight(self) -> torch.Tensor:
        """The plain (vocab, hidden) LM head matrix: the embedding when tied."""
        return self.embed if self.lm_head is None else self.lm_head

    def forward(self, batch: StepBatch, cache: KVCache, static_len: int | None = None) -> torch.Tensor:
        """Logits (M, vocab) in the model dtype, for batch.logit_rows only.

        static_len: batch is decode-only and padded to a fixed size; attention runs over the first
        static_len keys of each slot (see AttentionPlan.build).
        """
        x = F.embedding(batch.input_ids, self.embed)  # (N, d)
        plan = AttentionPlan.build(batch, cache, x.dtype, static_len, self.shape.sliding_window)
        cos, sin = self.rotary.lookup(batch.positions, cache.max_len, x.dtype)
        s = self.shape
        fused = not (s.qk_norm or s.num_experts or s.clip_qkv is not None)   # what layer.c runs
        if plan.rotates_in_kernel and isinstance(self.layers[0].qkv, (Panels, QuantPanels)) and fused:
            x = self._decode_in_kernel(x, cos, sin, plan, cache)
        else:
            for layer, cache_k, cache_v in zip(self.layers, cache.k, cache.v):
                x = layer(x, cos, sin, plan, cache_k, cache_v)
        x = rms_norm(x[batch.logit_rows], self.final_norm, self.shape.norm_eps)  # (M, d)
        return linear(x, self.head_weight if self.packed_head is None else self.packed_head)

    def experts_read(self) -> tuple[int, float, float]:
        """MoE: (distinct experts the last forward touched, summed over layers; those experts' bytes;
        every expert's bytes). A dense model's are 0."""
        layers = [layer for layer in self.layers if layer.is_moe]
        per_expert = [moe.expert_bytes(layer) for layer in layers]
        return (sum(layer.experts_touched for layer in layers),
                sum(layer.experts_touched * b for layer, b in zip(layers, per_expert)),
                sum(layer.num_experts * b for layer, b in zip(layers, per_expert)))

    def _decode_in_kernel(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, plan: AttentionPlan,
                          cache: KVCache) -> torch.Tensor:
        """A decode-only step with every layer in one call to the C kernels (the same arithmetic as
        LlamaLayer.forward, without the interpreter between its ten kernels)."""
        s = self.shape
        x = x.contiguous()                                     # (D, d), updated in place layer by layer
        cos, sin = cos.contiguous(), sin.contiguous()          # (D, 1, hd)
        slots, positions = plan.decode_slots.contiguous(), plan.decode_positions.contiguous()
        step = (slots.data_ptr(), positions.data_ptr(), cos.data_ptr(), sin.data_ptr())
        scratch = torch.empty(ops.decode_scratch_size(x.shape[0], s.hidden_size, s.num_heads, s.num_kv_heads,
                                                      s.head_dim, s.intermediate_size), dtype=x.dtype)
        if self._kernel_tables is None:   # the packed weights never move: their pointers are taken once
            rows = [layer.kernel_weights() for layer in self.layers]
            self._kernel_tables = (torch.tensor([[p or 0 for p in r[:7]] for r in rows], dtype=torch.long),
                                   torch.tensor([r[7:] for r in rows], dtype=torch.long))
        if getattr(cache, "pointers", None) is None:
            cache.pointers = torch.tensor([[t.data_ptr() for t in cache.k], [t.data_ptr() for t in cache.v]],
                                          dtype=torch.long)   # (2, layers)
        ops.llama_decode_layers(x, *self._kernel_tables, cache.pointers, cache.block_table, cache.num_blocks,
                                cache.block_size, step, scratch, s.num_heads, s.num_kv_heads, s.head_dim,
                                s.intermediate_size, s.norm_eps)
        return x

    def hf_destinations(self) -> dict[str, torch.Tensor]:
        """transformers checkpoint name -> the view of our parameter it fills (same shape)."""
        dest = {"model.embed_tokens.weight": self.embed.data, "model.norm.weight": self.final_norm.data}
        if self.lm_head is not None:
            dest["lm_head.weight"] = self.lm_head.data
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            q, kv = layer.q_size, layer.kv_size
            dest |= {
                p + "input_layernorm.weight": layer.attn_norm.data,
                p + "self_attn.q_proj.weight": layer.qkv.data[:q],
                p + "self_attn.k_proj.weight": layer.qkv.data[q:q + kv],
                p + "self_attn.v_proj.weight": layer.qkv.data[q + kv:],
                p + "self_attn.o_proj.weight": layer.o.data,
                p + "post_attention_layernorm.weight": layer.mlp_norm.data,
            }
            if layer.is_moe:
                dest |= moe.destinations(layer, p)
            else:
                ff = layer.down.shape[1]
                dest |= {p + "mlp.gate_proj.weight": layer.gate_up.data[:ff],
                         p + "mlp.up_proj.weight": layer.gate_up.data[ff:], p + "mlp.down_proj.weight": layer.down.data}
            if layer.q_norm is not None:
                dest |= {p + "self_attn.q_norm.weight": layer.q_norm.data, p + "self_attn.k_norm.weight": layer.k_norm.data}
            if layer.qkv_bias is not None:
                dest |= {
                    p + "self_attn.q_proj.bias": layer.qkv_bias.data[:q],
                    p + "self_attn.k_proj.bias": layer.qkv_bias.data[q:q + kv],
                    p + "self_attn.v_proj.bias": layer.qkv_bias.data[q + kv:],
                }
        return dest
