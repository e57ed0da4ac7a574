"""Small GGUF files written from a transformers model, for the loader's tests (no network, no converter).

`write_gguf` names the tensors as llama.cpp's converter does (blk.N.attn_q.weight, ...), writes
the architecture's metadata from the model's config, and copies the bundled SmolLM2 file's
tokenizer (so the model's vocabulary must be its 49,152 tokens). Tensors are F32. The llama
architecture's q/k row permutation is not written: use it for the architectures whose converter
keeps transformers' row order (qwen2, qwen3, gemma2, gemma3).

Gemma (gemma2, gemma3) is written as llama.cpp's converter writes it: every norm weight with 1
added (its RMSNorm multiplies by 1 + weight), the sublayers' norms under their own names, no
separate LM head, the soft caps, the sliding window and Gemma 3's two rotary bases in the metadata.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                  "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                  "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
                  "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_space_prefix")
BLOCK_NAMES = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate",
    "self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up",   # Phi-3's fused ones
    "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
    "mlp.gate": "ffn_gate_inp",   # an MoE's router
}
GEMMA_NAMES = {"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
               "post_feedforward_layernorm": "post_ffw_norm"}
TOP_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}


def gguf_name(hf_name: str, arch: str = "llama") -> str:
    if hf_name in TOP_NAMES:
        return TOP_NAMES[hf_name]
    _, _, layer, *rest = hf_name.split(".")
    module, kind = ".".join(rest[:-1]), rest[-1]
    names = BLOCK_NAMES | GEMMA_NAMES if arch.startswith("gemma") else BLOCK_NAMES
    return f"blk.{layer}.{names[module]}.{kind}"


def _gemma_metadata(w, c, arch: str) -> None:
    """The keys llama.cpp's Gemma converters add; Gemma 3's rotary bases from transformers 5's
    per-layer-type rope_parameters (the global one is written as rope.freq_base)."""
    if arch == "gemma2":
        w.add_attn_logit_softcapping(float(c.attn_logit_softcapping))
        w.add_final_logit_softcapping(float(c.final_logit_softcapping))
        w.add_sliding_window(int(c.sliding_window))
        return
    if c.final_logit_softcapping:
        w.add_final_logit_softcapping(float(c.final_logit_softcapping))
    w.add_sliding_window(int(c.sliding_window))
    w.add_rope_freq_base_swa(float(c.rope_parameters["sliding_attention"]["rope_theta"]))
    full = c.rope_parameters["full_attention"]
    if full.get("rope_type") == "linear":
        import gguf
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(full["factor"]))


def _moe_metadata(w, c, arch: str, experts: int) -> None:
    """The expert counts, and the experts' width where the converter writes it apart (Qwen3-MoE)."""
    w.add_expert_count(int(experts))
    w.add_expert_used_count(int(c.num_experts_per_tok))
    if getattr(c, "moe_intermediate_size", None):
        w.add_expert_feed_forward_length(int(c.moe_intermediate_size))


def _stacked_experts(name: str, tensor):
    """transformers' 3-D experts (gate_up_proj (E, 2 ff, d), down_proj (E, d, ff)) as llama.cpp stacks
    them: blk.N.ffn_gate_exps, ffn_up_exps (E, ff, d) and ffn_down_exps (E, d, ff)."""
    layer = name.split(".")[2]
    if name.endswith("down_proj"):
        return [(f"blk.{layer}.ffn_down_exps.weight", tensor)]
    gate, up = tensor.chunk(2, dim=1)
    return [(f"blk.{layer}.ffn_gate_exps.weight", gate), (f"blk.{layer}.ffn_up_exps.weight", up)]


@functools.lru_cache(maxsize=None)
def _reader(path: Path):
    """A GGUF file read once per process: gguf's reader parses every metadata field (the bundled model's
    49,152-token vocabulary and merges), about 2.5 s a file, and the families' tests write several GGUFs
    with its tokenizer."""
    import gguf
    return gguf.GGUFReader(path)


def write_gguf(path: Path, arch: str, hf_model, tokenizer_from: Path) -> Path:
    import gguf
    c = hf_model.config
    source = _reader(tokenizer_from)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    rope = getattr(c, "rope_parameters", None) or {}
    theta = getattr(c, "rope_theta", None) or rope.get("full_attention", rope).get("rope_theta", 10000.0)
    w.add_rope_freq_base(float(theta))
    w.add_layer_norm_rms_eps(float(c.rms_norm_eps))
    gemma = arch.startswith("gemma")
    if gemma:
        _gemma_metadata(w, c, arch)
    elif getattr(c, "sliding_window", None):
        w.add_sliding_window(int(c.sliding_window))
    for key in TOKENIZER_KEYS:   # the bundled model's tokenizer, as stored
        field = source.fields.get(key)
        if field is None:
            continue
        value = field.contents()
        if isinstance(value, list):
            w.add_array(key, value)
        elif isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        else:
            w.add_string(key, value)
    experts = getattr(c, "num_local_experts", None) or getattr(c, "num_experts", None)
    if experts:
        _moe_metadata(w, c, arch, experts)
    for name, tensor in hf_model.state_dict().items():
        if name == "lm_head.weight" and (c.tie_word_embeddings or gemma):
            continue
        if ".mlp.experts." in name:
            for gguf_tensor, data in _stacked_experts(name, tensor):
                w.add_tensor(gguf_tensor, np.ascontiguousarray(data.detach().float().numpy()))
            continue
        data = tensor.detach().float()
        if gemma and name.endswith("norm.weight"):
            data = data + 1
        w.add_tensor(gguf_name(name, arch), np.ascontiguousarray(data.numpy()))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
