"""GPT-2: learned position embeddings, pre-LayerNorm blocks, fused qkv, GELU (tanh), tied LM head."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from backend.errors import InputError
from backend.models.attention import AttentionPlan, attend
from backend.models.base import KVCache, StepBatch
from backend.shape import ModelShape
from backend.models.packed import linear


class GPT2Layer(nn.Module):
    def __init__(self, shape: ModelShape):
        super().__init__()
        d, ff = shape.hidden_size, shape.intermediate_size
        self.heads, self.head_dim, self.eps = shape.num_heads, shape.head_dim, shape.norm_eps
        self.ln1_w, self.ln1_b = nn.Parameter(torch.empty(d)), nn.Parameter(torch.empty(d))
        self.qkv, self.qkv_b = nn.Parameter(torch.empty(3 * d, d)), nn.Parameter(torch.empty(3 * d))
        self.o, self.o_b = nn.Parameter(torch.empty(d, d)), nn.Parameter(torch.empty(d))
        self.ln2_w, self.ln2_b = nn.Parameter(torch.empty(d)), nn.Parameter(torch.empty(d))
        self.fc, self.fc_b = nn.Parameter(torch.empty(ff, d)), nn.Parameter(torch.empty(ff))
        self.proj, self.proj_b = nn.Parameter(torch.empty(d, ff)), nn.Parameter(torch.empty(d))

    def forward(self, x: torch.Tensor, plan: AttentionPlan, cache_k: torch.Tensor, cache_v: torch.Tensor) -> torch.Tensor:
        n, d = x.shape
        h = F.layer_norm(x, (d,), self.ln1_w, self.ln1_b, self.eps)
        q, k, v = linear(h, self.qkv, self.qkv_b).split(d, dim=-1)  # (N, d) each
        shape = (n, self.heads, self.head_dim)
        x = linear(attend(q.view(shape), k.view(shape), v.view(shape), plan, cache_k, cache_v), self.o, self.o_b, residual=x)
        h = F.layer_norm(x, (d,), self.ln2_w, self.ln2_b, self.eps)
        h = F.gelu(linear(h, self.fc, self.fc_b), approximate="tanh")  # (N, ff)
        return linear(h, self.proj, self.proj_b, residual=x)


class GPT2Model(nn.Module):
    def __init__(self, shape: ModelShape):
        super().__init__()
        if shape.num_kv_heads != shape.num_heads or shape.head_dim * shape.num_heads != shape.hidden_size:
            raise InputError(f"gpt2 needs num_kv_heads == num_heads and head_dim * num_heads == hidden_size: {shape}")
        self.shape = shape
        d = shape.hidden_size
        self.wte = nn.Parameter(torch.empty(shape.vocab_size, d))
        self.wpe = nn.Parameter(torch.empty(shape.max_position, d))
        self.layers = nn.ModuleList(GPT2Layer(shape) for _ in range(shape.num_layers))
        self.lnf_w, self.lnf_b = nn.Parameter(torch.empty(d)), nn.Parameter(torch.empty(d))
        self.packed_head: torch.Tensor | None = None   # set by packed.pack_weights

    @property
    def head_weight(self) -> torch.Tensor:
        return self.wte   # tied

    def forward(self, batch: StepBatch, cache: KVCache, static_len: int | None = None) -> torch.Tensor:
        """Logits (M, vocab) in the model dtype, for batch.logit_rows only (the head is tied to wte).

        static_len: as in LlamaModel.forward.
        """
        x = F.embedding(batch.input_ids, self.wte) + F.embedding(batch.positions, self.wpe)  # (N, d)
        plan = AttentionPlan.build(batch, cache, x.dtype, static_len)
        for layer, cache_k, cache_v in zip(self.layers, cache.k, cache.v):
            x = layer(x, plan, cache_k, cache_v)
        x = F.layer_norm(x[batch.logit_rows], x.shape[-1:], self.lnf_w, self.lnf_b, self.shape.norm_eps)  # (M, d)
        return linear(x, self.wte if self.packed_head is None else self.packed_head)

    def hf_destinations(self) -> dict[str, torch.Tensor]:
        """transformers checkpoint name -> the view of our parameter it fills (same shape).

        transformers' GPT-2 uses Conv1D, whose weights are stored (in, out): the destinations
        are transposed views of our (out, in) matrices.
        """
        dest = {
            "transformer.wte.weight": self.wte.data, "transformer.wpe.weight": self.wpe.data,
            "transformer.ln_f.weight": self.lnf_w.data, "transformer.ln_f.bias": self.lnf_b.data,
        }
        for i, layer in enumerate(self.layers):
            p = f"transformer.h.{i}."
            dest |= {
                p + "ln_1.weight": layer.ln1_w.data, p + "ln_1.bias": layer.ln1_b.data,
                p + "attn.c_attn.weight": layer.qkv.data.t(), p + "attn.c_attn.bias": layer.qkv_b.data,
                p + "attn.c_proj.weight": layer.o.data.t(), p + "attn.c_proj.bias": layer.o_b.data,
                p + "ln_2.weight": layer.ln2_w.data, p + "ln_2.bias": layer.ln2_b.data,
                p + "mlp.c_fc.weight": layer.fc.data.t(), p + "mlp.c_fc.bias": layer.fc_b.data,
                p + "mlp.c_proj.weight": layer.proj.data.t(), p + "mlp.c_proj.bias": layer.proj_b.data,
            }
        return dest
