"""Tensor, pipeline and expert parallelism priced per device (backend/sim/parallel.py)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from backend.config import Deployment
from backend.errors import InputError
from backend.models.shapes import SHAPES
from backend.precision import precision
from backend.roofline.cost import step_cost
from backend.sim.links import KVLink, device_link, known_links
from backend.sim.parallel import (Layout, StepPricer, collective_seconds, kv_shards, microbatches,
                                       replica_profile, shard, validate)
from backend.roofline.profiles import find_profile
from backend.sim.step_time import CostModel

LLAMA = SHAPES["llama-8b"]          # 32 heads, 8 KV heads, 32 layers
BF16 = precision("bfloat16")
H100 = find_profile("h100-sxm")
NVLINK = KVLink("test", gbs=400.0, us=5.0, collective_us=10.0)
MOE = replace(LLAMA, num_experts=8, experts_per_token=2, intermediate_size=4096)


def test_tp_divides_flops_weights_and_kv_by_heads():
    cost = step_cost(LLAMA, BF16, [1] * 16, [1024] * 16)
    one = shard(cost, LLAMA, BF16, Layout(tp=4, link=NVLINK))
    assert one.linear_flops == pytest.approx(cost.linear_flops / 4)
    assert one.attention_flops == pytest.approx(cost.attention_flops / 4)
    assert one.kv_bytes == pytest.approx(cost.kv_bytes / 4)
    assert one.weight_bytes == pytest.approx(cost.weight_bytes / 4)
    assert one.activation_bytes == pytest.approx(cost.activation_bytes)   # the residual stream is whole on every rank


def test_kv_heads_replicate_past_their_count():
    assert kv_shards(LLAMA, 4) == 4
    assert kv_shards(LLAMA, 16) == 8          # 8 KV heads over 16 devices: each one held twice
    cost = step_cost(LLAMA, BF16, [1], [4096])
    assert shard(cost, LLAMA, BF16, Layout(tp=16, link=NVLINK)).kv_bytes == pytest.approx(cost.kv_bytes / 8)


def test_pipeline_stage_holds_its_layers_and_the_head():
    cost = step_cost(LLAMA, BF16, [1], [128])
    stage = shard(cost, LLAMA, BF16, Layout(pp=4, link=NVLINK))
    head = LLAMA.vocab_size * LLAMA.hidden_size * BF16.weight_bytes
    assert stage.weight_bytes == pytest.approx((cost.weight_bytes - head) / 4 + head)
    assert stage.head_flops == cost.head_flops


def test_two_all_reduces_a_layer_priced_on_the_link():
    seconds = collective_seconds(LLAMA, BF16, Layout(tp=2, link=NVLINK), tokens=1)
    payload = LLAMA.hidden_size * 2                       # one token's hidden state in bf16
    one = 10e-6 + 2 * (2 - 1) / 2 * payload / 400e9
    assert seconds == pytest.approx(2 * LLAMA.num_layers * one)
    assert collective_seconds(LLAMA, BF16, Layout(tp=1), tokens=1) == 0.0


def test_an_engines_link_terms_scale_the_fixed_costs_and_the_bytes_apart():
    """link_latency_x multiplies each collective's fixed cost, link_eff divides its bytes' time, and over a PCIe
    link pcie_link_eff does instead."""
    pcie = KVLink("pcie4-x16", gbs=31.5, us=10.0, collective_us=25.0)
    model = CostModel(link_latency_x=3.0, link_eff=0.8, pcie_link_eff=0.4)
    for link, eff in ((NVLINK, 0.8), (pcie, 0.4)):
        layout = Layout(tp=4, link=link)
        fixed = 2 * LLAMA.num_layers * link.collective_us * 1e-6
        nominal = collective_seconds(LLAMA, BF16, layout, tokens=128)
        priced = collective_seconds(LLAMA, BF16, layout, tokens=128, model=model)
        assert priced == pytest.approx(3.0 * fixed + (nominal - fixed) / eff)
    assert pcie.is_pcie and not NVLINK.is_pcie
    with pytest.raises(InputError, match="link_latency_x"):
        CostModel.from_terms({"link_latency_x": -1.0})
    with pytest.raises(InputError, match="pcie_link_eff"):
        CostModel.from_terms({"pcie_link_eff": 0.0})


def test_expert_parallel_all_to_alls_replace_the_mlp_all_reduce():
    tp_only = collective_seconds(MOE, BF16, Layout(tp=4, link=NVLINK), tokens=64)
    with_ep = collective_seconds(MOE, BF16, Layout(tp=4, ep=4, link=NVLINK), tokens=64)
    hidden = 64 * MOE.hidden_size * 2
    attention = MOE.num_layers * (10e-6 + 1.5 * hidden / 400e9)
    routed = hidden * 2 * 3 / 4
    assert with_ep == pytest.approx(attention + MOE.num_layers * 2 * (10e-6 + routed / 400e9))
    assert with_ep != tp_only


def test_pipeline_round_is_pp_stage_times_full_or_alone():
    model = CostModel(step_ms=0.0, token_ms=0.0, request_ms=0.0)
    one = StepPricer(LLAMA, BF16, H100, model)
    pipe = StepPricer(LLAMA, BF16, H100, model, Layout(pp=2, link=replace(NVLINK, us=0.0, gbs=1e9)))
    alone = pipe.seconds([1], [512])
    # a lone request walks both stages: about the one device's time (the head stays on one stage)
    assert alone == pytest.approx(one.seconds([1], [512]), rel=0.15)
    assert len(microbatches([1] * 8, [512] * 8, 2)) == 2


def test_one_device_prices_as_the_cost_model():
    model = CostModel.for_profile(H100)
    pricer = StepPricer(LLAMA, BF16, H100, model)
    # the same terms, summed in another order: equal up to rounding
    assert pricer.seconds([512, 1], [512, 700]) == pytest.approx(
        model.step_seconds(LLAMA, BF16, H100, [512, 1], [512, 700]), rel=1e-12)


def test_tp_halves_a_memory_bound_decode_step_but_adds_collectives():
    model = CostModel(step_ms=0.0, token_ms=0.0, request_ms=0.0)
    one = StepPricer(LLAMA, BF16, H100, model).seconds([1], [1024])
    two = StepPricer(LLAMA, BF16, H100, model, Layout(tp=2, link=NVLINK)).seconds([1], [1024])
    assert one / 2 < two < one


@pytest.mark.parametrize("deployment, message", [
    (Deployment(tp=3), "does not divide llama-8b's 32 attention heads"),
    (Deployment(tp=64), "does not divide"),
    (Deployment(pp=40), "only 32 layers"),
    (Deployment(ep=2, tp=2), "is dense"),
    (Deployment(router="random"), "--router"),
    (Deployment(tp=0), "whole number"),
])
def test_bad_layouts_get_one_line(deployment, message):
    with pytest.raises(InputError, match=message):
        validate(deployment, LLAMA, "llama-8b")


def test_ep_must_divide_tp_and_the_experts():
    validate(Deployment(tp=4, ep=4), MOE, "moe")
    with pytest.raises(InputError, match="divide --tp"):
        validate(Deployment(tp=2, ep=4), MOE, "moe")
    with pytest.raises(InputError, match="8 experts"):
        validate(Deployment(tp=3 * 4, ep=3), replace(MOE, num_heads=48, num_kv_heads=12), "moe")


def test_links_and_replica_profile():
    assert {"nvlink4", "pcie5-x16", "rdma-400g"} <= set(known_links())
    assert device_link(None, H100).name == "nvlink4"
    with pytest.raises(InputError, match="unknown link"):
        device_link("carrier-pigeon", H100)
    four = replica_profile(H100, tp=4, pp=1)
    assert four.bandwidth_gbs == 4 * H100.bandwidth_gbs and four.tflops["bf16"] == 4 * H100.tflops["bf16"]
    assert replica_profile(H100) is H100
