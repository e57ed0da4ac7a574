"""The simulator's fast step prices (StepPricer's memo of stage_key, StepLine) against the straightforward
chain they stand in for: step_cost -> shard -> CostModel.cost_seconds + collectives + layers + overhead, as
StepPricer priced every step before it kept them. Equal to the last bit, on every step of varied runs and
on random steps, or the simulator's figures would move."""
from __future__ import annotations

import random
from dataclasses import replace

import pytest

from backend.config import Deployment, EngineConfig, ModelChoice, RunConfig
from backend.errors import InputError
from backend.sim import parallel
from backend.roofline.cost import step_cost
from backend.sim.parallel import Layout, StepPricer, collective_seconds, hop_seconds, microbatches, shard
from backend.roofline.profiles import find_profile
from backend.sim.step_time import CostModel
from backend.sim.model import resolve_model, resolve_precision
from backend.sim.target import run_simulated
from backend.workload.spec import LengthDist, WorkloadSpec


def straightforward(pricer: StepPricer, new_tokens, contexts, logit_rows=None) -> float:
    """StepPricer.seconds as it was before the memo: every step through the whole chain."""
    shape, prec, layout, model = pricer.shape, pricer.prec, pricer.layout, pricer.cost_model

    def stage(n, c, rows, prefill):
        cost = shard(step_cost(shape, prec, n, c, rows), shape, prec, layout)
        seconds = model.cost_seconds(cost, pricer.profile, prec, pricer.math)
        seconds += collective_seconds(shape, prec, layout, sum(n), model)
        return seconds + model.layer_seconds(parallel.stage_layers(shape, layout.pp), prefill)

    needs = logit_rows if logit_rows is not None else [True] * len(new_tokens)
    overhead = model.overhead_seconds(sum(new_tokens), len(new_tokens))
    prefill = max(new_tokens) > 1
    if layout.pp == 1:
        return stage(new_tokens, contexts, sum(needs), prefill) + overhead
    groups = microbatches(new_tokens, contexts, layout.pp)
    times = [stage(n, c, sum(needs[i] for i in idx), prefill) for idx, n, c in groups]
    hops = (layout.pp - 1) * max(hop_seconds(shape, prec, layout, sum(n), model) for _, n, _ in groups)
    return sum(times) + (layout.pp - len(groups)) * max(times) + hops + overhead


# model, profile, dtype, deployment, cost-model changes: dense, GQA, MLA, MoE with EP, sliding windows,
# FP8 and FP8 KV, one device, TP, TP x PP; the fitted serial form and the plain roofline; the per-request
# attention term and the experts' efficiency by rows
SETUPS = [
    ("llama-3.1-70b", "h100-sxm", "fp8", Deployment(tp=4), {}),
    ("llama-3.1-70b", "a100-80gb-sxm", "auto", Deployment(tp=2, pp=2), {}),
    ("llama-8b", "h100-sxm", "auto", Deployment(), {"serial": 0.0}),
    ("llama-8b", "l40s", "auto", Deployment(), {"serial": 0.0, "mfu": 1.0, "afu": 1.0}),
    ("mixtral-8x7b", "h100-sxm", "auto", Deployment(tp=4, ep=2), {"efu": 0.3}),
    ("mixtral-8x7b", "h200-sxm", "fp8", Deployment(tp=2), {"efu": 0.5, "efu_rows": 24.0, "request_layer_us": 1.5}),
    ("llama-8b", "h100-sxm", "auto", Deployment(), {"serial": 0.0, "request_layer_us": 0.7}),
    ("mistral-7b", "h100-sxm", "auto", Deployment(), {}),
    ("gemma-2-9b", "a100-80gb-sxm", "auto", Deployment(tp=2), {}),
    ("deepseek-v3", "h200-sxm", "fp8", Deployment(tp=8, kv_dtype="fp8"), {}),
    ("gpt-oss-20b", "b200", "nvfp4", Deployment(), {"serial": 0.0}),
]


def pricer_of(model: str, profile_key: str, dtype: str, deployment: Deployment, changes: dict) -> StepPricer:
    profile = find_profile(profile_key)
    shape = resolve_model(model)
    prec = resolve_precision(dtype, profile, deployment.kv_dtype)
    cost_model = replace(CostModel.for_profile(profile, prec), **changes)
    return StepPricer(shape, prec, profile, cost_model, Layout.of(deployment, profile))


def recorded_steps(model, profile_key, dtype, deployment, policy) -> list[tuple]:
    """Every step a short simulated run prices: (new tokens, contexts, logit rows)."""
    seen = []
    original = StepPricer.seconds

    def recording(pricer, new_tokens, contexts, logit_rows=None):
        seen.append((list(new_tokens), list(contexts), None if logit_rows is None else list(logit_rows)))
        return original(pricer, new_tokens, contexts, logit_rows)

    spec = WorkloadSpec(name="t", num_requests=40, arrival="poisson", rate=8.0,
                        prompt_len=LengthDist("uniform", low=20, high=3000), output_len=LengthDist("uniform", low=2, high=90))
    config = RunConfig(mode="load", simulate=True, profile=profile_key, model=ModelChoice(model, dtype=dtype), workload=spec,
                       engine=EngineConfig(policy=policy, max_batch=16, chunk_tokens=256), deployment=deployment)
    StepPricer.seconds = recording
    try:
        run_simulated(config, lambda e: None, lambda: False, retain_records=False)
    finally:
        StepPricer.seconds = original
    return seen


@pytest.mark.parametrize("setup", SETUPS, ids=[s[0] + "-" + s[1] for s in SETUPS])
def test_every_step_of_a_run_is_priced_as_the_chain_prices_it(setup):
    model, profile_key, dtype, deployment, changes = setup
    steps = recorded_steps(model, profile_key, dtype, deployment, "chunked" if "mistral" in model else "continuous")
    assert len(steps) > 100
    pricer = pricer_of(*setup)
    for new_tokens, contexts, logits in steps:
        assert pricer.seconds(new_tokens, contexts, logits) == straightforward(pricer, new_tokens, contexts, logits)
    assert pricer._lines, "no step took the fast path"   # StepLines priced them, and never disagreed with the chain
    # priced again from the memo: the same answers
    for new_tokens, contexts, logits in steps[::7]:
        assert pricer.seconds(new_tokens, contexts, logits) == straightforward(pricer, new_tokens, contexts, logits)


@pytest.mark.parametrize("setup", SETUPS, ids=[s[0] + "-" + s[1] for s in SETUPS])
def test_random_steps_are_priced_as_the_chain_prices_them(setup):
    pricer = pricer_of(*setup)
    rng = random.Random(7)
    for _ in range(400):
        batch = rng.randint(1, 300)
        if rng.random() < 0.6:   # a decode step
            new_tokens = [1] * batch
        else:                    # prompts or chunks beside decodes
            new_tokens = [rng.choice([1, 1, rng.randint(2, 4096)]) for _ in range(min(batch, 12))]
        contexts = [n + rng.randint(0, 20000) for n in new_tokens]
        logits = None if rng.random() < 0.5 else [rng.random() < 0.8 for _ in new_tokens]
        assert pricer.seconds(new_tokens, contexts, logits) == straightforward(pricer, new_tokens, contexts, logits)


def test_a_line_that_differs_from_the_chain_hands_every_step_back_to_it(monkeypatch):
    pricer = pricer_of(*SETUPS[0])
    monkeypatch.setattr(parallel.StepLine, "seconds", lambda self, *sums: 1.0)   # a copy gone stale
    price = pricer.seconds([1] * 8, [2000] * 8)
    assert price == straightforward(pricer, [1] * 8, [2000] * 8)
    assert pricer._lines is None
    assert pricer.seconds([1] * 9, [2000] * 9) == straightforward(pricer, [1] * 9, [2000] * 9)


def test_steps_step_cost_refuses_are_refused_as_before():
    pricer = pricer_of(*SETUPS[2])
    for new_tokens, contexts in (([1, 0], [5, 5]), ([3], [2]), ([1, 1], [4])):
        with pytest.raises(InputError, match="step_cost"):
            pricer.seconds(new_tokens, contexts)
