"""The search space and its pruning, before anything is simulated."""
from dataclasses import replace

from backend.planner.candidates import (Candidate, SearchSpace, device_memory, enumerate_candidates, find_profiles,
                                        kv_tokens_that_fit, prune, why_not)
from backend.sim.model import resolve_model

import pytest
from backend.errors import InputError

SEVENTY = "profiles/models/llama-3.1-70b.json"   # 64 heads, 8 KV heads, 80 layers, 70.6 B parameters


def test_70b_in_bfloat16_does_not_fit_one_h100_but_fits_four():
    shape, profiles = resolve_model(SEVENTY), find_profiles(("h100-sxm",))
    one = Candidate("h100-sxm", "bfloat16", "continuous", 64)
    four = Candidate("h100-sxm", "bfloat16", "continuous", 64, tp=4)
    assert "exceed 90% of 80 GB" in why_not(one, shape, profiles["h100-sxm"], 1280)
    assert why_not(four, shape, profiles["h100-sxm"], 1280) is None


def test_tp_that_does_not_divide_the_heads_is_pruned():
    shape, profiles = resolve_model("llama-8b"), find_profiles(("h100-sxm",))   # 32 heads
    bad = Candidate("h100-sxm", "bfloat16", "chunked", 32, tp=3)
    assert why_not(bad, shape, profiles["h100-sxm"], 1280) == "tp 3 does not divide 32 attention heads"


def test_kv_heads_replicate_past_their_count_and_the_kv_fits_the_memory_left():
    shape = resolve_model(SEVENTY)
    profile = find_profiles(("h100-sxm",))["h100-sxm"]
    weights, per_token = device_memory(Candidate("h100-sxm", "bfloat16", "continuous", 64, tp=16), shape, profile)
    assert per_token == 2 * 80 * 1 * 128 * 2   # 8 KV heads over 16 devices: one a device, replicated
    c = Candidate("h100-sxm", "bfloat16", "continuous", 10_000, tp=4)
    weights, per_token = device_memory(c, shape, profile)
    assert kv_tokens_that_fit(c, shape, profile, 1280) == int((80e9 * 0.9 - weights) // per_token)
    small = Candidate("h100-sxm", "bfloat16", "continuous", 2, tp=4)
    assert kv_tokens_that_fit(small, shape, profile, 1280) == 2 * 1280   # every slot full length, no more


def test_enumeration_keeps_precisions_the_gpu_has_and_the_device_limit():
    profiles = find_profiles(("a100-80gb-sxm", "b200"))
    every = enumerate_candidates(SearchSpace(gpus=("a100-80gb-sxm", "b200"), max_gpus=4), profiles)
    assert {c.precision for c in every if c.gpu == "a100-80gb-sxm"} == {"bfloat16"}   # no FP8 peak on Ampere
    assert {c.precision for c in every if c.gpu == "b200"} == {"bfloat16", "fp8", "nvfp4"}
    assert max(c.devices for c in every) == 4
    split = [c for c in every if c.policy == "disaggregated" and c.pool_tps == (2, 2)]
    assert {(c.prefill_workers, c.decode_workers) for c in split} == {(1, 1)}   # 2 groups of 2 in 4 devices
    # each pool its own TP: one prefill group of 2 beside two decode devices, or the other way round
    mixed = {(c.pool_tps, c.prefill_workers, c.decode_workers) for c in every if c.policy == "disaggregated"}
    assert {((2, 1), 1, 2), ((1, 2), 2, 1)} <= mixed and all(c.devices <= 4 for c in every)
    assert {c.kv_dtype for c in every if c.gpu == "b200"} == {"auto", "fp8"}
    assert {c.kv_dtype for c in every if c.gpu == "a100-80gb-sxm"} == {"auto"}   # no FP8 to store it in


def test_the_per_device_memory_is_the_simulators():
    from backend.sim.parallel import Layout
    from backend.sim.model import per_device_bytes, resolve_precision
    profile = find_profiles(("h200-sxm",))["h200-sxm"]
    deepseek = resolve_model("deepseek-v3")   # MLA: one latent of 576 elements a token and layer, on every rank
    c = Candidate("h200-sxm", "fp8", "continuous", 64, tp=8, pp=2, kv_dtype="fp8")
    weights, per_token = device_memory(c, deepseek, profile)
    prec = resolve_precision("fp8", profile, "fp8")
    assert (weights, per_token) == per_device_bytes(deepseek, prec, Layout(tp=8, pp=2))
    assert per_token == 61 * 576 * 1 / 2   # the latent's 61 layers over 2 stages, in one byte, not split by TP
    llama = resolve_model(SEVENTY)
    stages = device_memory(Candidate("h200-sxm", "bfloat16", "continuous", 64, tp=2, pp=3), llama, profile)
    assert stages[1] == 2 * 80 * 8 * 128 * 2 / (3 * 2)   # the layers over the stages evenly, as the simulator checks


def test_moe_layouts_are_tried_with_expert_parallelism_too():
    profiles = find_profiles(("h100-sxm",))
    space = SearchSpace(gpus=("h100-sxm",), max_gpus=4, precisions=("bfloat16",), policies=("continuous",),
                        max_batches=(64,), kv_dtypes=("auto",), pps=(1,), dps=(1,))
    dense = enumerate_candidates(space, profiles, resolve_model("llama-8b"))
    moe = enumerate_candidates(space, profiles, resolve_model("mixtral-8x7b"))   # 8 experts
    assert {(c.tp, c.ep) for c in dense} == {(1, 1), (2, 1), (4, 1)}
    assert {(c.tp, c.ep) for c in moe} == {(1, 1), (2, 1), (2, 2), (4, 1), (4, 4)}


def test_prune_counts_its_reasons():
    shape, profiles = resolve_model(SEVENTY), find_profiles(("a100-80gb-sxm",))
    every = enumerate_candidates(SearchSpace(gpus=("a100-80gb-sxm",), policies=("continuous",),
                                             max_batches=(64,)), profiles)
    kept, pruned = prune(every, shape, profiles, 1280)
    assert pruned == {"weights + KV exceed the memory": len(every) - len(kept)}
    assert all(c.tp * c.pp >= 2 for c in kept) and any(c.tp * c.pp == 2 for c in kept)


def test_an_unknown_gpu_is_one_line():
    with pytest.raises(InputError, match="--gpus: unknown GPU 'h1000'"):
        find_profiles(("h1000",))


def test_disaggregated_layouts_are_tried_at_each_k():
    """--spec-tokens 0,4: every split at K = 0 and K = 4 (its decode devices guess), the layout saying K."""
    profiles = find_profiles(("h100-sxm",))
    space = SearchSpace(gpus=("h100-sxm",), max_gpus=3, precisions=("bfloat16",), policies=("disaggregated",),
                        tps=(1,), disaggregated_batches=(64,), kv_dtypes=("auto",), spec_tokens=(0, 4))
    every = enumerate_candidates(space, profiles)
    splits = {(c.prefill_workers, c.decode_workers) for c in every}
    assert splits == {(1, 1), (1, 2), (2, 1)}
    assert sorted((c.prefill_workers, c.decode_workers, c.spec_tokens) for c in every) == \
        sorted((p, d, k) for p, d in splits for k in (0, 4))
    assert {c.layout for c in every if (c.prefill_workers, c.decode_workers) == (1, 2)} == \
        {"P1xtp1:D2xtp1", "P1xtp1:D2xtp1 K4"}
    # without speculation asked for, the splits are there once each, as before
    plain = enumerate_candidates(replace(space, spec_tokens=(0,)), profiles)
    assert len(plain) == 3 and {c.spec_tokens for c in plain} == {0}
    only_k = enumerate_candidates(replace(space, spec_tokens=(4,)), profiles)
    assert len(only_k) == 3 and {c.spec_tokens for c in only_k} == {4}   # once left out altogether
