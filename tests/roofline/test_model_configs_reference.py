"""sim_shape held against transformers' own models and the engine's config reader (needs torch)."""
import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from backend.errors import InputError  # noqa: E402
from backend.loaders.hf import shape_from_config  # noqa: E402
from backend.models.shapes import build_model  # noqa: E402
from backend.roofline.model_configs import SHIPPED_CONFIGS, shape_from_dict, sim_shape  # noqa: E402

# shipped configs the engine itself reads: the simulator must see the very shape the engine would run
ENGINE_RUNS = ["llama-2-7b", "llama-3.1-8b", "llama-3.2-1b", "mistral-7b", "mixtral-8x7b", "qwen2.5-7b",
               "qwen3-8b", "qwen3-30b-a3b", "gemma-2-9b", "gemma-2-27b"]


def reference_count(config) -> int:
    """Parameters of transformers' model of this config, built on the meta device (no memory)."""
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def as_json(config, architecture: str) -> dict:
    return json.loads(json.dumps({**config.to_dict(), "architectures": [architecture]}))


@pytest.mark.parametrize("q_lora_rank", [24, None])   # V3's query latent, and V2-Lite's plain query projection
def test_deepseek_count_is_transformers_own(q_lora_rank):
    config = transformers.DeepseekV3Config(
        vocab_size=100, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=4, q_lora_rank=q_lora_rank, kv_lora_rank=16, qk_rope_head_dim=8,
        qk_nope_head_dim=12, v_head_dim=10, n_routed_experts=6, n_shared_experts=2, num_experts_per_tok=2,
        first_k_dense_replace=1, n_group=1, topk_group=1)
    shape = shape_from_dict(as_json(config, "DeepseekV3ForCausalLM"), "deepseek")
    assert (shape.num_dense_layers, shape.num_shared_experts, shape.q_lora_rank) == (1, 2, q_lora_rank or 0)
    assert shape.num_params() == reference_count(config)


def test_gpt_oss_count_is_transformers_own():
    config = transformers.GptOssConfig(
        vocab_size=100, hidden_size=64, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=5, num_experts_per_tok=2, sliding_window=8)
    shape = shape_from_dict(as_json(config, "GptOssForCausalLM"), "gpt-oss")
    assert shape.sliding_window == 8 and shape.global_layers == (1, 3)
    assert shape.num_params() == reference_count(config)


@pytest.mark.parametrize("key", ENGINE_RUNS)
def test_the_simulator_sees_the_engines_shape(key):
    config = json.loads(SHIPPED_CONFIGS[key].read_text())
    assert sim_shape(key) == shape_from_config(config, SHIPPED_CONFIGS[key])[0]


@pytest.mark.parametrize("key", ["deepseek-v3", "gpt-oss-20b"])
def test_the_engine_refuses_what_only_the_simulator_prices(key):
    with pytest.raises(InputError, match=r"priced by the simulator \(--simulate\) but this engine does not run it"):
        build_model(sim_shape(key))
