"""The simulator's model shapes: shipped configs, published parameter counts, MLA and sliding-window pricing."""
import json
from dataclasses import replace

import pytest

from backend.errors import InputError
from backend.roofline.cost import (
    PhaseTotals, attention_flops_per_pair, cost_of_totals, kv_heads_for_sharding, matrix_params, moe_layers,
    phase_cost, predict_decode, step_cost,
)
from backend.roofline.model_configs import SHIPPED_CONFIGS, sim_shape
from backend.roofline.profiles import find_profile
from backend.shape import attention_params, expert_params, shared_expert_params

EXPECTED_KEYS = {
    "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.2-1b",
    "llama-3.2-3b", "mistral-7b", "mixtral-8x7b", "mixtral-8x22b", "qwen2.5-7b", "qwen2.5-72b", "qwen3-8b",
    "qwen3-32b", "qwen3-30b-a3b", "qwen3-235b-a22b", "gemma-2-9b", "gemma-2-27b", "deepseek-v3", "gpt-oss-20b",
    "gpt-oss-120b",
}
# Published totals (model cards, papers), in billions: (total, active). gpt-oss's card counts the unembedding
# and not the embedding table in its active figure; ours counts the table too, so its 201088 x 2880 is added.
GPT_OSS_EMBED = 201088 * 2880 / 1e9
PUBLISHED = {
    "deepseek-v3": (671.0, 37.0),                      # DeepSeek-V3 technical report
    "gpt-oss-120b": (116.83, 5.13 + GPT_OSS_EMBED),    # gpt-oss model card, table 1
    "gpt-oss-20b": (20.91, 3.61 + GPT_OSS_EMBED),
    "mixtral-8x7b": (46.7, 12.9),                      # Mixtral of Experts paper
    "mixtral-8x22b": (141.0, 39.0),                    # Mistral's announcement
    "qwen3-30b-a3b": (30.5, 3.3),                      # Qwen3 model card
    "qwen3-235b-a22b": (235.0, 22.0),
    "llama-3.1-70b": (70.6, 70.6),                     # Llama 3.1 model card
    "llama-3.1-405b": (405.9, 405.9),                  # the hub checkpoint's parameter count
    "llama-2-7b": (6.74, 6.74),
    "gemma-2-9b": (9.24, 9.24),
}


def test_every_promised_config_ships_with_its_source():
    assert EXPECTED_KEYS <= set(SHIPPED_CONFIGS)
    for key, path in SHIPPED_CONFIGS.items():
        config = json.loads(path.read_text())
        assert config["_source"].strip(), key
        shape = sim_shape(key.upper())   # keys are case-insensitive
        assert shape.num_params() > 0 and shape.kv_bytes_per_token(2) > 0


@pytest.mark.parametrize("key", sorted(PUBLISHED))
def test_totals_match_published_parameter_counts(key):
    total, active = PUBLISHED[key]
    shape = sim_shape(key)
    assert shape.num_params() / 1e9 == pytest.approx(total, rel=0.02)
    assert shape.num_active_params() / 1e9 == pytest.approx(active, rel=0.02)


def test_llama_3_1_70b_count_is_exact():
    assert sim_shape("llama-3.1-70b").num_params() == 70_553_706_496   # the hub checkpoint's safetensors total


def test_deepseek_v3_mla_kv_and_layers():
    shape = sim_shape("deepseek-v3")
    assert shape.kv_bytes_per_token(2) == 61 * (512 + 64) * 2      # one latent + rotary key per layer, no second copy
    assert kv_heads_for_sharding(shape) == 1 and kv_heads_for_sharding(sim_shape("llama-3.1-8b")) == 8
    assert moe_layers(shape) == 58 and shape.num_dense_layers == 3
    d, h = 7168, 128
    # q: d x 1536 then 1536 x H*(128+64); kv: d x (512+64) then 512 x H*(128+128); o: H*128 x d
    assert attention_params(shape) == d * 1536 + 1536 * h * 192 + d * 576 + 512 * h * 256 + h * 128 * d
    assert attention_flops_per_pair(shape) == 2 * h * (2 * 512 + 64)


def test_deepseek_decode_step_reads_its_experts_and_the_shared_ones():
    shape = sim_shape("deepseek-v3")
    cost = step_cost(shape, 1, [1], [1000])   # one request decoding at context 1000, one byte per element
    assert cost.attention_flops == 61 * 2 * 128 * (2 * 512 + 64) * 1000
    assert cost.kv_bytes == 61 * 576 * (1000 + 1)
    routed = 58 * 8 * expert_params(shape)      # one token touches exactly its 8 experts
    assert cost.expert_weight_bytes == pytest.approx(routed)
    assert cost.expert_flops == 2 * routed
    dense_mlp = 3 * 7168 * 18432
    always = 61 * attention_params(shape) + 3 * dense_mlp + 58 * (shared_expert_params(shape) + 256 * 7168)
    assert cost.linear_flops == 2 * (always + routed)
    assert cost.weight_bytes == pytest.approx(always + routed + 129280 * 7168, rel=1e-4)   # + norms, one embedding row
    assert matrix_params(shape) == always + 58 * 256 * expert_params(shape) + 129280 * 7168


def brute_pairs(n, c, window):
    return sum(min(p + 1, window) for p in range(c - n, c))


@pytest.mark.parametrize("n,c", [(300, 300), (1, 50), (1, 5000), (40, 1000), (130, 130)])
def test_a_sliding_layers_pairs_and_reads_are_capped(n, c):
    shape = sim_shape("gpt-oss-20b")   # window 128 on 12 of its 24 layers
    cost = step_cost(shape, 2, [n], [c])
    full = n * (c - n) + n * (n + 1) // 2
    assert cost.attention_flops == 4 * 64 * 64 * (12 * full + 12 * brute_pairs(n, c, 128))
    kv_token = 2 * 8 * 64 * 2   # keys and values of 8 heads of 64, 2 bytes, per layer
    assert cost.kv_bytes == kv_token * (12 * c + 12 * min(c, 128 + n - 1) + 24 * n)


def test_mistral_window_covers_every_layer():
    shape = sim_shape("mistral-7b")
    long = step_cost(shape, 2, [1], [10_000])
    assert long.attention_flops == 32 * 4 * 32 * 128 * 4096
    assert step_cost(shape, 2, [1], [3000]).attention_flops == 32 * 4 * 32 * 128 * 3000


def test_totals_are_exact_for_decode_past_the_window_and_never_undercount():
    shape = sim_shape("gemma-2-9b")
    contexts = [5000, 9000, 4200]
    exact = step_cost(shape, 2, [1, 1, 1], contexts)
    from_totals = cost_of_totals(shape, 2, 3, sum(contexts), sum(contexts), 3)
    assert from_totals.attention_flops == exact.attention_flops and from_totals.kv_bytes == exact.kv_bytes
    mixed = step_cost(shape, 2, [1, 1], [100, 9000])   # one context short of the window: totals overestimate
    approx = cost_of_totals(shape, 2, 2, 9100, 9100, 2)
    assert approx.attention_flops >= mixed.attention_flops and approx.kv_bytes >= mixed.kv_bytes
    totals = PhaseTotals()
    for _ in range(4):
        totals.add_step(3, 3, sum(contexts), 1.0)
    assert phase_cost(shape, 2, totals).attention_flops == pytest.approx(4 * exact.attention_flops)


def test_decode_prediction_prices_the_window():
    h100 = find_profile("h100-sxm")
    shape = sim_shape("gpt-oss-120b")   # 18 of 36 layers slide over 128 tokens
    unwindowed = replace(shape, sliding_window=None, global_layers=())
    windowed_s = predict_decode(shape, 2, 64, 100_000, h100, "bf16").memory_s
    full_s = predict_decode(unwindowed, 2, 64, 100_000, h100, "bf16").memory_s
    saved = 18 * 64 * (100_000 - 128) * (2 * 8 * 64 * 2)   # layers x requests x unread tokens x KV bytes a token
    assert full_s - windowed_s == pytest.approx(saved / h100.bandwidth_bytes_per_s, rel=1e-9)


def test_a_folder_and_a_path_load(tmp_path):
    config = json.loads(SHIPPED_CONFIGS["qwen3-8b"].read_text())
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert sim_shape(str(tmp_path)) == sim_shape("qwen3-8b") == sim_shape(str(tmp_path / "config.json"))


def test_qwen_window_slides_only_from_max_window_layers(tmp_path):
    config = json.loads(SHIPPED_CONFIGS["qwen2.5-7b"].read_text())
    config.update(use_sliding_window=True, max_window_layers=20, sliding_window=4096)
    (tmp_path / "config.json").write_text(json.dumps(config))
    shape = sim_shape(str(tmp_path))
    assert shape.sliding_window == 4096 and shape.global_layers == tuple(range(20))


@pytest.mark.parametrize("change,needle", [
    ({"architectures": ["MambaForCausalLM"]}, "MambaForCausalLM"),
    ({"kv_lora_rank": None}, "'kv_lora_rank'"),
    ({"hidden_size": "big"}, "'hidden_size'"),
    ({"moe_layer_freq": 2}, "'moe_layer_freq'"),
])
def test_a_bad_config_gets_one_line_naming_the_file_and_field(tmp_path, change, needle):
    config = json.loads(SHIPPED_CONFIGS["deepseek-v3"].read_text())
    config.update(change)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(InputError) as err:
        sim_shape(str(path))
    message = str(err.value)
    assert "\n" not in message and str(path) in message and needle in message


def test_bad_layer_types_and_missing_files_are_one_line(tmp_path):
    config = json.loads(SHIPPED_CONFIGS["gpt-oss-20b"].read_text())
    config["layer_types"] = config["layer_types"][:3]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match="layer_types"):
        sim_shape(str(tmp_path))
    with pytest.raises(InputError, match="neither a shipped model"):
        sim_shape("no-such-model")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(InputError, match="not a readable config.json"):
        sim_shape(str(tmp_path))


def test_an_fp8_kv_cache_halves_the_latents_bytes():
    from backend.precision import precision
    shape = sim_shape("deepseek-v3")
    bf16 = precision("bf16", activation="bfloat16")
    half = step_cost(shape, bf16, [1], [1000])
    fp8 = step_cost(shape, bf16.with_kv("fp8"), [1], [1000])
    assert half.kv_bytes == 61 * 576 * 1001 * 2 and fp8.kv_bytes == half.kv_bytes / 2
    assert fp8.weight_bytes == half.weight_bytes
