"""Gemma 2 and Gemma 3 (text) config.json files -> ModelShape: the fields only Gemma has.

hf.shape_from_config builds the Llama-like part of the shape and hands Gemma's configs here.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from backend.errors import InputError
from backend.shape import ModelShape

# The fields of UNIMPLEMENTED that the Gemma decoder implements (backend/models/gemma.py); transformers'
# Gemma 3 ignores attn_logit_softcapping, so it stays refused there.
GEMMA_FIELDS = {
    "Gemma2ForCausalLM": {"attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar"},
    "Gemma3ForCausalLM": {"final_logit_softcapping", "query_pre_attn_scalar", "rope_local_base_freq"},
}


def gemma_shape(shape: ModelShape, config: dict, names: list[str], path) -> tuple[ModelShape, torch.Tensor | None]:
    """Gemma 2 and 3: which layers slide (layer_types, else transformers' default pattern), the
    score scale and caps (transformers' defaults where the config is silent), and the rotary.

    Rotary: transformers 5 writes rope_parameters per layer type (full_attention, sliding_attention);
    older config.json files give rope_theta and rope_scaling for the global layers and Gemma 3's
    rope_local_base_freq for the sliding ones. Only Gemma 3's global layers take the linear factor."""
    gemma3 = "Gemma3ForCausalLM" in names
    pattern = config.get("sliding_window_pattern", 6) if gemma3 else 2
    types = config.get("layer_types") or ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                                          for i in range(shape.num_layers)]
    if len(types) != shape.num_layers or set(types) - {"full_attention", "sliding_attention"}:
        raise InputError(f"{path}: layer_types {types} is not one of full_attention or sliding_attention "
                         f"for each of the {shape.num_layers} layers")
    params = config.get("rope_parameters") or {}
    if "full_attention" in params or "sliding_attention" in params:
        full, local = params.get("full_attention") or {}, params.get("sliding_attention") or {}
    else:
        full = {"rope_theta": config.get("rope_theta"), **(config.get("rope_scaling") or {}), **params}
        local = {"rope_theta": config.get("rope_local_base_freq")}
    factors = None
    for which, rope in (("global", full), ("sliding", local if gemma3 else {})):
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind == "linear" and which == "global":
            factors = torch.full((shape.head_dim // 2,), float(rope["factor"]))
        elif kind != "default":
            raise InputError(f"{path}: rope scaling {kind!r} on Gemma's {which} layers is not supported "
                             "(only default, and linear on the global layers)")
    caps = (config.get("attn_logit_softcapping", 50.0), config.get("final_logit_softcapping", 30.0)) \
        if not gemma3 else (None, config.get("final_logit_softcapping"))
    shape = replace(
        shape, arch="gemma", tie_embeddings=bool(config.get("tie_word_embeddings", True)),
        rope_theta=float(full.get("rope_theta") or (1e6 if gemma3 else 10000.0)),
        sliding_window=config.get("sliding_window", 4096),
        global_layers=tuple(i for i, t in enumerate(types) if t == "full_attention"),
        query_pre_attn_scalar=float(config.get("query_pre_attn_scalar", 256)),
        attn_softcap=None if caps[0] is None else float(caps[0]),
        final_softcap=None if caps[1] is None else float(caps[1]),
        rope_local_theta=float(local.get("rope_theta") or 10000.0) if gemma3 else None, qk_norm=gemma3)
    return shape, factors
