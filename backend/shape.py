"""A model's shape: everything about an architecture that sizes its tensors and the roofline's arithmetic.

Plain data with no torch, in the vocabulary layer: the loaders build it, the models are built from
it, the roofline and the simulator price it, and events carry it to the window.

The parameter accounting lives here once (module functions, duck-typed so the roofline's tests can
hand any object with these attribute names): attention matrices per layer (standard or MLA), the
MLP of the dense layers and of the mixture-of-experts layers (routed experts, shared experts,
router), and the small parameters (norms, biases, sinks). ModelShape.num_params and the roofline's
weight bytes are both sums of these.
"""
from __future__ import annotations

from dataclasses import dataclass

KV_BLOCK_SIZE = 16   # tokens a KV cache block holds unless told otherwise (models/base.py's KVCache; vLLM's default)


def _get(shape, name: str, default=0):
    return getattr(shape, name, default)


def is_mla(shape) -> bool:
    """Multi-head latent attention (DeepSeek-V2/V3): the KV cache holds one compressed latent per token."""
    return _get(shape, "kv_lora_rank") > 0


def attention_params(shape) -> int:
    """Weights of one layer's attention matrices (no biases or norms).

    Standard (MHA/GQA/MQA): q d x H*hd, k and v d x KV*hd each, o H*hd x d.
    MLA: q d x q_lora then q_lora x H*(nope+rope) (or d x H*(nope+rope) when q_lora_rank is 0);
    kv d x (kv_lora+rope) then kv_lora x H*(nope+v); o H*v x d."""
    d, h = shape.hidden_size, shape.num_heads
    if is_mla(shape):
        q_lora, kv_lora = _get(shape, "q_lora_rank"), shape.kv_lora_rank
        rope, nope, v = shape.qk_rope_head_dim, shape.qk_nope_head_dim, shape.v_head_dim
        q = d * q_lora + q_lora * h * (nope + rope) if q_lora else d * h * (nope + rope)
        kv = d * (kv_lora + rope) + kv_lora * h * (nope + v)
        return q + kv + h * v * d
    hd = shape.head_dim
    return d * (h + 2 * shape.num_kv_heads) * hd + h * hd * d


def moe_layers(shape) -> int:
    """Layers whose MLP is a mixture of experts: all but the dense first ones (0 for a dense model)."""
    return shape.num_layers - _get(shape, "num_dense_layers") if _get(shape, "num_experts") else 0


def dense_layers(shape) -> int:
    return shape.num_layers - moe_layers(shape)


def _dense_width(shape) -> int:
    """A dense layer's MLP width: the model's, or an MoE model's dense first layers' own."""
    return _get(shape, "dense_intermediate_size") or shape.intermediate_size if _get(shape, "num_experts") \
        else shape.intermediate_size


def dense_mlp_params(shape) -> int:
    """Weights of one dense layer's MLP matrices: SwiGLU/GeGLU's three, GPT-2's two."""
    return (2 if shape.arch == "gpt2" else 3) * shape.hidden_size * _dense_width(shape)


def expert_params(shape) -> int:
    """Weights of one routed expert's matrices (gate, up, down), 0 for a dense shape."""
    return 3 * shape.hidden_size * shape.intermediate_size if _get(shape, "num_experts") else 0


def shared_expert_params(shape) -> int:
    """Weights of an MoE layer's shared experts (every token multiplies by all of them)."""
    return _get(shape, "num_shared_experts") * 3 * shape.hidden_size * _get(shape, "shared_intermediate_size")


def router_params(shape) -> int:
    return _get(shape, "num_experts") * shape.hidden_size


def layer_matrix_params(shape) -> int:
    """Weights of every layer's matrices together (no embeddings, LM head, biases or norms)."""
    moe = shape.num_experts * expert_params(shape) + shared_expert_params(shape) + router_params(shape) \
        if moe_layers(shape) else 0
    return (shape.num_layers * attention_params(shape) + dense_layers(shape) * dense_mlp_params(shape)
            + moe_layers(shape) * moe)


def small_params(shape) -> int:
    """Every layer's norms, biases and sinks together (the final norm not included)."""
    d, h, hd = shape.hidden_size, shape.num_heads, shape.head_dim
    if shape.arch == "gpt2":   # fused qkv bias 3d, o bias d, MLP biases ff + d, two LayerNorms of weight and bias
        return shape.num_layers * (3 * d + d + shape.intermediate_size + d + 4 * d)
    kv = shape.num_kv_heads
    attn = 0
    if _get(shape, "attention_bias", False):
        attn += (h + 2 * kv) * hd
    if _get(shape, "o_bias", False):
        attn += d
    if _get(shape, "attention_sinks", False):
        attn += h   # gpt-oss: one learned logit per head
    if is_mla(shape):
        attn += _get(shape, "q_lora_rank") + shape.kv_lora_rank   # the latents' RMSNorms
    if _get(shape, "qk_norm", False):   # Qwen3's and Gemma 3's per-head q and k norms; OLMoE's span q and k
        attn += (h + kv) * hd if _get(shape, "qk_norm_full", False) else 2 * hd
    norms = (4 if shape.arch == "gemma" else 2) * d
    mlp_bias = 0
    if _get(shape, "mlp_bias", False):   # gpt-oss: each expert's gate/up (2 ff) and down (d) biases, the router's
        ff, experts = shape.intermediate_size, _get(shape, "num_experts")
        mlp_bias = dense_layers(shape) * (2 * _dense_width(shape) + d) + moe_layers(shape) * experts * (2 * ff + d + 1)
    return shape.num_layers * (attn + norms) + mlp_bias


def kv_elements_per_token(shape) -> int:
    """KV cache elements one token adds over all layers: keys and values of every KV head, or MLA's
    one latent plus its rotary key per layer (kv_lora_rank + qk_rope_head_dim, no second copy)."""
    if is_mla(shape):
        return shape.num_layers * (shape.kv_lora_rank + shape.qk_rope_head_dim)
    return 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim


def unrouted_params(shape) -> int:
    """The routed experts' weights (matrices and biases) one token does not touch, over all layers."""
    unrouted = _get(shape, "num_experts") - _get(shape, "experts_per_token")
    bias = 2 * shape.intermediate_size + shape.hidden_size if _get(shape, "mlp_bias", False) else 0
    return moe_layers(shape) * unrouted * (expert_params(shape) + bias)


@dataclass(slots=True, frozen=True)
class ModelShape:
    """Everything about an architecture that sizes its tensors (and the roofline's arithmetic)."""

    arch: str                  # "llama" (Llama, Mistral, Qwen2, SmolLM, the MoE families), "gemma" or "gpt2"
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int     # the MLP's width (an MoE: each routed expert's)
    max_position: int          # context length the model supports
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    attention_bias: bool = False   # Qwen2 has q/k/v biases
    sliding_window: int | None = None   # Mistral: each query sees only the last this many keys
    qk_norm: bool = False      # Qwen3: q and k each RMS-normalized per head (weights of head_dim) before rotary
    # Mixture of experts (Mixtral, Qwen3-MoE, OLMoE): each layer's MLP is num_experts SwiGLU experts of
    # intermediate_size each, a token routed to experts_per_token of them; 0 experts: a dense MLP.
    num_experts: int = 0
    experts_per_token: int = 0
    norm_topk_prob: bool = False   # the top-k routing weights renormalized to sum to 1 (Mixtral, most Qwen3-MoE)
    qk_norm_full: bool = False     # OLMoE: qk_norm spans each whole projection (heads * head_dim), not each head
    clip_qkv: float | None = None  # OLMoE: q, k and v clamped to [-clip_qkv, clip_qkv] after the norms
    # Gemma 2 and 3 (arch "gemma"): (1 + w) RMSNorms, post-norms on both sublayers, GeGLU, scaled embeddings.
    global_layers: tuple[int, ...] = ()   # with sliding_window: the layers that see every key (Gemma's full ones)
    query_pre_attn_scalar: float | None = None   # scores scaled by its ** -0.5 (None: head_dim ** -0.5)
    attn_softcap: float | None = None    # Gemma 2: each attention score s becomes c * tanh(s / c)
    final_softcap: float | None = None   # Gemma 2: the same cap on the logits
    rope_local_theta: float | None = None   # Gemma 3: the sliding layers' rotary base (no scaling on them)
    # Shapes the simulator prices and this engine does not run (backend/models/shapes.build_model refuses them).
    # Multi-head latent attention (DeepSeek-V2/V3), kv_lora_rank > 0 marks it: keys and values come from a
    # kv_lora_rank latent (cached with a qk_rope_head_dim rotary key), queries from a q_lora_rank one (0: none).
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    num_shared_experts: int = 0        # DeepSeek: experts every token multiplies by, beside its routed ones
    shared_intermediate_size: int = 0  # each shared expert's width
    num_dense_layers: int = 0          # DeepSeek's first_k_dense_replace: the first layers have a dense MLP
    dense_intermediate_size: int = 0   # ... of this width
    mlp_bias: bool = False             # gpt-oss: biases on the experts' matrices and the router
    o_bias: bool = False               # gpt-oss: a bias on the attention's output projection
    attention_sinks: bool = False      # gpt-oss: a learned per-head logit in each softmax's denominator

    def num_params(self) -> int:
        """Parameters, counting tied embeddings once."""
        d = self.hidden_size
        embed = self.vocab_size * d
        head = 0 if self.tie_embeddings else self.vocab_size * d
        if self.arch == "gpt2":   # learned positions, and a final LayerNorm with a bias
            return embed + head + self.max_position * d + layer_matrix_params(self) + small_params(self) + 2 * d
        return embed + head + layer_matrix_params(self) + small_params(self) + d

    def num_active_params(self) -> int:
        """Parameters a token's forward pass touches: all of a dense model's; an MoE's without the
        routed experts it is not sent to (its router, shared experts and experts_per_token experts kept).
        The embedding table counts in full (as Mixtral's and Qwen's published active counts do)."""
        return self.num_params() - unrouted_params(self)

    def window(self, layer: int) -> int | None:
        """The keys this layer's queries see: the last sliding_window of them, or None for every one."""
        return None if layer in self.global_layers else self.sliding_window

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """KV cache bytes one token adds over all layers (kv_elements_per_token at dtype_bytes each)."""
        return kv_elements_per_token(self) * dtype_bytes
