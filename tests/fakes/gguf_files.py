"""Small GGUF files written from a transformers model, for the loader's tests (no network, no converter).

`write_gguf` names the tensors as llama.cpp's converter does (blk.N.attn_q.weight, ...), writes
the architecture's metadata from the model's config, and copies the bundled SmolLM2 file's
tokenizer (so the model's vocabulary must be its 49,152 tokens). Tensors are F32. The llama
architecture's q/k row permutation is not written: use it for the architectures whose converter
keeps transformers' row order (qwen2, qwen3).
"""
from __future__ import annotations

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
}
TOP_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}


def gguf_name(hf_name: str) -> str:
    if hf_name in TOP_NAMES:
        return TOP_NAMES[hf_name]
    _, _, layer, *rest = hf_name.split(".")
    module, kind = ".".join(rest[:-1]), rest[-1]
    return f"blk.{layer}.{BLOCK_NAMES[module]}.{kind}"


def write_gguf(path: Path, arch: str, hf_model, tokenizer_from: Path) -> Path:
    import gguf
    c = hf_model.config
    source = gguf.GGUFReader(tokenizer_from)
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
    theta = getattr(c, "rope_theta", None) or (getattr(c, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
    w.add_rope_freq_base(float(theta))
    w.add_layer_norm_rms_eps(float(c.rms_norm_eps))
    if getattr(c, "sliding_window", None):
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
    for name, tensor in hf_model.state_dict().items():
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        w.add_tensor(gguf_name(name), np.ascontiguousarray(tensor.detach().float().numpy()))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
