"""Model shapes for the simulator: a shipped config (profiles/models/*.json) or any config.json.

`sim_shape` reads more architectures than the engine runs (backend/loaders/hf.py): DeepSeek-V2/V3's
latent attention, shared experts and dense first layers, gpt-oss's biases, sinks and alternating
sliding window, Qwen's windowed upper layers. Only what sizes the roofline's arithmetic is read;
rotary scaling, activations and routing details do not change a step's FLOPs or bytes. No torch.

Each family's fields, as transformers' config classes name them:
  Llama, Mistral, Mixtral, Qwen2/2.5, Qwen3, Qwen3-MoE, Phi-3: hidden_size, num_hidden_layers,
    num_attention_heads, num_key_value_heads, head_dim (else hidden / heads), intermediate_size,
    vocab_size, max_position_embeddings; experts from num_local_experts / num_experts,
    num_experts_per_tok, moe_intermediate_size; sliding_window (Mistral, Phi-3, Mixtral: every
    layer; Qwen: only with use_sliding_window, from max_window_layers up, or per layer_types).
  Gemma 2 / 3: as the engine reads them (hf_gemma): layer_types or the 1:1 / 5:1 pattern.
  DeepSeek-V2/V3: q_lora_rank (null: none), kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim,
    v_head_dim, n_routed_experts, n_shared_experts, num_experts_per_tok, moe_intermediate_size,
    first_k_dense_replace (those layers' MLP of intermediate_size). The multi-token-prediction
    layers (num_nextn_predict_layers) are a speculative head, not part of the model's forward pass.
  gpt-oss: num_local_experts, experts_per_token, head_dim, layer_types, sliding_window,
    attention_bias (q, k, v and o), the experts' and router's biases, a sink logit per head.
"""
from __future__ import annotations

from pathlib import Path

from profiles import HERE as PROFILES
from backend.errors import InputError
from backend.shape import ModelShape

MODELS = PROFILES / "models"
SHIPPED_CONFIGS: dict[str, Path] = {p.stem: p for p in sorted(MODELS.glob("*.json"))}

# architectures entry -> family
FAMILIES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3_moe",
    "Phi3ForCausalLM": "phi3", "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3",
    "Gemma3ForConditionalGeneration": "gemma3", "DeepseekV2ForCausalLM": "deepseek", "DeepseekV3ForCausalLM": "deepseek",
    "GptOssForCausalLM": "gpt_oss",
}
# families whose window, when set, covers every layer
_EVERY_LAYER_WINDOW = {"mistral", "mixtral", "phi3"}
# architectures the engine reads and this module does not: their shape is the engine's own
_ENGINE_ONLY = {"OlmoeForCausalLM", "GPT2LMHeadModel"}


def sim_shape(name_or_path: str) -> ModelShape:
    """The shape of a shipped key (case-insensitive, see SHIPPED_CONFIGS) or of a config.json (or a
    folder holding one); one line naming the file and the field for anything it cannot read."""
    key = str(name_or_path).strip().lower()
    if key in SHIPPED_CONFIGS:
        return shape_from_file(SHIPPED_CONFIGS[key])
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise InputError(f"{name_or_path}: neither a shipped model ({', '.join(SHIPPED_CONFIGS)}) nor a config.json "
                         "file or folder")
    return shape_from_file(path)


def shape_from_file(path: Path) -> ModelShape:
    from backend.files import read_config_json
    return shape_from_dict(read_config_json(path), path)


def shape_from_dict(config: dict, path) -> ModelShape:
    """ModelShape from a transformers config.json's contents (`path` names it in messages)."""
    names = config.get("architectures") or []
    family = next((FAMILIES[a] for a in names if a in FAMILIES), None)
    if family is None:
        if _ENGINE_ONLY & set(names):
            from backend.loaders.hf import shape_from_config   # the engine's reader (imports torch)
            return shape_from_config(config, path)[0]
        raise InputError(f"{path}: architecture {', '.join(names) or '(field architectures missing)'} is not one the "
                         f"simulator prices; known: {', '.join(sorted(FAMILIES) + sorted(_ENGINE_ONLY))}")
    if "Gemma3ForConditionalGeneration" in names:   # the text decoder; the vision tower is not priced
        config = {**config, **(config.get("text_config") or {}), "architectures": names}
    fields = _Fields(config, path, family)
    if family == "deepseek":
        return _deepseek(fields)
    if family == "gpt_oss":
        return _gpt_oss(fields)
    if family in ("gemma2", "gemma3"):
        return _gemma(fields, family)
    return _llama_like(fields, family)


class _Fields:
    """A config's fields, each read with the one-line error naming the file and the field."""

    def __init__(self, config: dict, path, family: str):
        self.config, self.path, self.family = config, path, family

    def need(self, name: str):
        value = self.config.get(name)
        if value is None:
            raise InputError(f"{self.path}: missing field {name!r} (needed for a {self.family} model)")
        return value

    def int(self, name: str, default: int | None = None) -> int:
        value = self.config.get(name, default) if default is not None else self.need(name)
        value = default if value is None else value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 0:
            raise InputError(f"{self.path}: field {name!r} must be a non-negative integer, got {value!r}")
        return int(value)

    def get(self, name: str, default=None):
        value = self.config.get(name)
        return default if value is None else value

    def common(self) -> dict:
        """The fields every decoder has."""
        d, heads = self.int("hidden_size"), self.int("num_attention_heads")
        if heads == 0 or d == 0:
            raise InputError(f"{self.path}: hidden_size and num_attention_heads must be positive")
        return dict(vocab_size=self.int("vocab_size"), hidden_size=d, num_layers=self.int("num_hidden_layers"),
                    num_heads=heads, num_kv_heads=self.int("num_key_value_heads", heads) or heads,
                    head_dim=self.int("head_dim", d // heads) or d // heads,
                    max_position=self.int("max_position_embeddings"),
                    rope_theta=float(self.get("rope_theta", (self.get("rope_parameters", {}) or {}).get("rope_theta", 10000.0))),
                    norm_eps=float(self.get("rms_norm_eps", 1e-6)),
                    tie_embeddings=bool(self.get("tie_word_embeddings", False)))


def _window_layers(f: _Fields, layers: int) -> tuple[int | None, tuple[int, ...]]:
    """(sliding_window, global_layers) from layer_types, when the config lists one per layer."""
    types = f.get("layer_types")
    if not types:
        return None, ()
    if len(types) != layers or set(types) - {"full_attention", "sliding_attention"}:
        raise InputError(f"{f.path}: field 'layer_types' must give full_attention or sliding_attention for each of "
                         f"the {layers} layers")
    if "sliding_attention" not in types:
        return None, ()
    return f.int("sliding_window"), tuple(i for i, t in enumerate(types) if t == "full_attention")


def _llama_like(f: _Fields, family: str) -> ModelShape:
    base = f.common()
    layers = base["num_layers"]
    window, global_layers = None, ()
    if family in _EVERY_LAYER_WINDOW:
        window = f.get("sliding_window")
    elif f.get("layer_types"):
        window, global_layers = _window_layers(f, layers)
    elif f.get("use_sliding_window"):   # Qwen2/3: the layers from max_window_layers up slide
        first = f.int("max_window_layers", layers)
        window, global_layers = f.int("sliding_window"), tuple(range(min(first, layers)))
        if len(global_layers) == layers:
            window, global_layers = None, ()
    shape = dict(base, arch="llama", intermediate_size=f.int("intermediate_size"),
                 attention_bias=family == "qwen2" or bool(f.get("attention_bias", False)),
                 o_bias=family in ("llama", "mistral") and bool(f.get("attention_bias", False)),
                 mlp_bias=bool(f.get("mlp_bias", False)),
                 sliding_window=int(window) if window else None, global_layers=global_layers,
                 qk_norm=family in ("qwen3", "qwen3_moe"))
    if family in ("mixtral", "qwen3_moe"):
        if f.int("decoder_sparse_step", 1) != 1 or f.get("mlp_only_layers"):
            raise InputError(f"{f.path}: fields 'decoder_sparse_step'/'mlp_only_layers': dense MLP layers between "
                             "the sparse ones are not priced (only dense first layers, as DeepSeek's)")
        experts = f.get("num_local_experts") or f.need("num_experts")
        shape.update(num_experts=int(experts), experts_per_token=f.int("num_experts_per_tok"),
                     intermediate_size=f.int("moe_intermediate_size", 0) or f.int("intermediate_size"),
                     norm_topk_prob=family == "mixtral" or bool(f.get("norm_topk_prob", False)))
    return ModelShape(**shape)


def _gemma(f: _Fields, family: str) -> ModelShape:
    """Gemma 2 and 3 as backend/loaders/hf_gemma.py reads them (the engine runs both)."""
    base = f.common()
    layers, gemma3 = base["num_layers"], family == "gemma3"
    pattern = f.int("sliding_window_pattern", 6) if gemma3 else 2
    types = f.get("layer_types") or ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
                                     for i in range(layers)]
    window, global_layers = _window_layers(_Fields({**f.config, "layer_types": types,
                                                    "sliding_window": f.get("sliding_window", 4096)}, f.path, family),
                                           layers)
    caps = (None, f.get("final_logit_softcapping")) if gemma3 else \
        (f.get("attn_logit_softcapping", 50.0), f.get("final_logit_softcapping", 30.0))
    params = f.get("rope_parameters", {}) or {}
    full = params.get("full_attention") or params
    return ModelShape(
        **dict(base, tie_embeddings=bool(f.get("tie_word_embeddings", True)),
               rope_theta=float(full.get("rope_theta") or f.get("rope_theta") or (1e6 if gemma3 else 10000.0))),
        arch="gemma", intermediate_size=f.int("intermediate_size"), sliding_window=window,
        global_layers=global_layers if window else (), query_pre_attn_scalar=float(f.get("query_pre_attn_scalar", 256)),
        attn_softcap=None if caps[0] is None else float(caps[0]), final_softcap=None if caps[1] is None else float(caps[1]),
        rope_local_theta=float(f.get("rope_local_base_freq", 10000.0)) if gemma3 else None, qk_norm=gemma3)


def _deepseek(f: _Fields) -> ModelShape:
    base = f.common()
    rope, nope = f.int("qk_rope_head_dim"), f.int("qk_nope_head_dim")
    shape = dict(base, arch="llama", head_dim=nope + rope, intermediate_size=f.int("intermediate_size"),
                 attention_bias=bool(f.get("attention_bias", False)),
                 q_lora_rank=f.int("q_lora_rank", 0), kv_lora_rank=f.int("kv_lora_rank"), qk_rope_head_dim=rope,
                 qk_nope_head_dim=nope, v_head_dim=f.int("v_head_dim"))
    if shape["kv_lora_rank"] == 0:
        raise InputError(f"{f.path}: field 'kv_lora_rank' must be positive (DeepSeek's latent attention)")
    experts = f.int("n_routed_experts", 0)
    if experts:
        if f.int("moe_layer_freq", 1) != 1:
            raise InputError(f"{f.path}: field 'moe_layer_freq' = {f.get('moe_layer_freq')}: MoE layers between dense "
                             "ones are not priced (only dense first layers)")
        moe_width = f.int("moe_intermediate_size")
        dense = min(f.int("first_k_dense_replace", 0), base["num_layers"])
        shape.update(num_experts=experts, experts_per_token=f.int("num_experts_per_tok"), intermediate_size=moe_width,
                     num_shared_experts=f.int("n_shared_experts", 0), shared_intermediate_size=moe_width,
                     num_dense_layers=dense, dense_intermediate_size=f.int("intermediate_size") if dense else 0,
                     norm_topk_prob=bool(f.get("norm_topk_prob", False)))
    return ModelShape(**shape)


def _gpt_oss(f: _Fields) -> ModelShape:
    base = f.common()
    window, global_layers = _window_layers(f, base["num_layers"])
    experts = f.get("num_local_experts") or f.need("num_experts")
    per_token = f.get("experts_per_token") or f.need("num_experts_per_tok")
    bias = bool(f.get("attention_bias", True))
    return ModelShape(**base, arch="llama", intermediate_size=f.int("intermediate_size"), attention_bias=bias,
                      o_bias=bias, attention_sinks=True, mlp_bias=True, sliding_window=window,
                      global_layers=global_layers, num_experts=int(experts), experts_per_token=int(per_token),
                      norm_topk_prob=True)
