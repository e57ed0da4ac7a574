"""The simulator's records and summaries, held to what the code before its speed-up produced (2026-12-02).

Every step, token and request record and every summary figure of small simulated runs (one GPU,
TP, TP x PP, DP with both routers, disaggregated pools with their own TP, chunked prefill, preemption,
rejection, a closed loop, a static batch, MoE, MLA and sliding windows, on the slot layout, and one on
the paged layout with prefix caching) is digested and compared with
tests/data/sim_golden.json. The step prices come from a fixed stand-in (each step's tokens and context),
so this holds the bookkeeping -- the engine loop, the scheduler, the replicas, the disaggregated pools,
the records and the accumulator -- whatever the cost model's terms become; the prices themselves are
held to the straightforward chain by tests/sim/test_step_memo.py.

Regenerate only for a change meant to move the records: python tests/sim/test_sim_records_golden.py --write
"""
from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "sim_golden.json"


def configs() -> dict:
    from backend.config import BatchRun, Deployment, EngineConfig, ModelChoice, RunConfig
    from backend.workload.spec import LengthDist, WorkloadSpec
    fixed = lambda v: LengthDist("fixed", v)
    uniform = lambda a, b: LengthDist("uniform", low=a, high=b)
    chat = LengthDist("normal", mean=96, std=48, low=16, high=256)

    def load(model, profile, dtype, n, rate, prompt, output, arrival="poisson", concurrency=None, policy="continuous",
             max_batch=32, kv=None, chunk=512, workers=(1, 1), kv_layout="slots", prefix_caching=None, **deployment):
        spec = WorkloadSpec(name="golden", num_requests=n, arrival=arrival, rate=rate, concurrency=concurrency,
                            prompt_len=prompt, output_len=output, seed=0)
        return RunConfig(mode="load", simulate=True, profile=profile, model=ModelChoice(model, dtype=dtype),
                         workload=spec, engine=EngineConfig(policy=policy, max_batch=max_batch, kv_tokens=kv,
                                                            chunk_tokens=chunk, prefill_workers=workers[0],
                                                            decode_workers=workers[1], kv_layout=kv_layout,
                                                            prefix_caching=prefix_caching),
                         deployment=Deployment(**deployment), slo_ttft_ms=500.0, slo_tpot_ms=50.0)

    return {
        "70b-tp4": load("llama-3.1-70b", "h100-sxm", "fp8", 60, 4, fixed(1024), fixed(128), tp=4),
        "8b-chunked": load("llama-8b", "h100-sxm", "auto", 80, 30, chat, uniform(16, 128), policy="chunked",
                           chunk=256, max_batch=16),
        "8b-preempt": load("llama-8b", "h100-sxm", "auto", 60, 40, uniform(100, 600), uniform(50, 300), kv=6000),
        "8b-chunked-preempt": load("llama-8b", "a100-80gb-sxm", "auto", 60, 40, uniform(100, 600), uniform(50, 300),
                                   policy="chunked", chunk=128, kv=5000),
        "70b-dp2-least-loaded": load("llama-3.1-70b", "h100-sxm", "fp8", 60, 8, fixed(1024), fixed(128), tp=4, dp=2,
                                     router="least-loaded"),
        "8b-dp3-round-robin": load("llama-8b", "l40s", "auto", 80, 40, chat, uniform(16, 128), dp=3, max_batch=8),
        "70b-pp2": load("llama-3.1-70b", "a100-80gb-sxm", "auto", 40, 2, uniform(200, 1200), uniform(20, 200), tp=2, pp=2),
        "70b-disaggregated": load("llama-3.1-70b", "h200-sxm", "fp8", 60, 6, uniform(300, 2000), uniform(50, 200),
                                  policy="disaggregated", tp=4, prefill_tp=2, decode_tp=4, workers=(2, 1),
                                  max_batch=64, chunk=1024),
        "mixtral-ep": load("mixtral-8x7b", "h100-sxm", "auto", 50, 10, chat, uniform(16, 128), tp=4, ep=2),
        "gemma-window": load("gemma-2-9b", "a100-80gb-sxm", "auto", 30, 3, uniform(1000, 5000), uniform(50, 200)),
        "8b-reject": load("llama-8b", "h100-sxm", "auto", 40, 20, uniform(100, 1200), uniform(10, 100), policy="chunked",
                          max_batch=8, kv=1100),
        "closed-loop": load("llama-8b", "h100-sxm", "auto", 50, None, chat, uniform(16, 128), arrival="closed",
                            concurrency=8),
        "batch": RunConfig(mode="batch", simulate=True, profile="h100-sxm", model=ModelChoice("llama-8b"),
                           batch=BatchRun(prompt_len=300, output_len=50, batch=8),
                           engine=EngineConfig(policy="static", max_batch=8, kv_layout="slots")),
        # the paged layout with prefix caching, the simulator's default (2026-12-04): preemption by blocks
        "8b-chunked-paged": load("llama-8b", "h100-sxm", "auto", 60, 40, uniform(100, 600), uniform(50, 300),
                                 policy="chunked", chunk=128, kv=5000, kv_layout="paged", prefix_caching=True),
    }


def stand_in_price(runner, out) -> float:
    """A step's seconds from its tokens and context alone: deterministic, and free of the cost model."""
    tokens = sum(c.num_tokens for c in out.prefill) + len(out.decode)
    context = sum(c.request.num_computed + c.num_tokens for c in out.prefill) + sum(r.num_computed + 1 for r in out.decode)
    return 0.0031 + 1.7e-7 * context + 2.3e-5 * tokens


# Columns added after the golden was written, with the value they hold where the feature is unused: left
# out of a row while they hold it, so the golden still holds the rest (a conversation's run would move it).
LATER_COLUMNS = {"conversation_id": -1, "turn": 0, "first_chunk_ms": None, "first_chunk": "",
                 "spec_proposed": "", "spec_accepted": "",   # speculative decoding's, requests and steps
                 "num_proposed_tokens": 0, "num_accepted_tokens": 0, "draft_ms": 0.0}


def digest(finished) -> dict:
    from backend.records import record_fields, record_row

    def rows(records, skip_run_id=False) -> str:
        h = hashlib.sha256()
        for r in records:
            names, row = record_fields(type(r)), record_row(r)
            row = [v for name, v in zip(names, row) if LATER_COLUMNS.get(name, ...) != v]
            row = row[1:] if skip_run_id else row
            h.update(repr(row).encode())
        return h.hexdigest()[:20]

    data = finished.data
    # the bands (backend.sim.bands, 2026-12-05) are added rows: left out, so the golden still holds the rest
    summary = replace(data.summary, bands={}, band_level=None, band_regimes=None)
    return {"steps": rows(data.steps, skip_run_id=True), "tokens": rows(data.tokens), "requests": rows(data.requests),
            "summary": hashlib.sha256(repr(sorted(summary.to_json().items())).encode()).hexdigest()[:20],
            "num_steps": len(data.steps), "num_tokens": len(data.tokens), "error": finished.error}


def run_all() -> dict:
    from backend.session import execute
    from backend.sim.runner import SimRunner
    original = SimRunner.price
    SimRunner.price = stand_in_price
    try:
        return {name: digest(execute(config, lambda e: None, lambda: False)) for name, config in configs().items()}
    finally:
        SimRunner.price = original


@pytest.fixture(scope="module")
def digests() -> dict:
    return run_all()


NAMES = ("70b-tp4", "8b-chunked", "8b-preempt", "8b-chunked-preempt", "70b-dp2-least-loaded", "8b-dp3-round-robin",
         "70b-pp2", "70b-disaggregated", "mixtral-ep", "gemma-window", "8b-reject", "closed-loop", "batch",
         "8b-chunked-paged")


@pytest.mark.parametrize("name", NAMES)
def test_records_and_summary_are_unchanged(digests, name):
    assert digests[name] == json.loads(GOLDEN.read_text())[name]


def test_step_records_built_positionally_name_each_field():
    from backend.records import Phase, StepRecord
    step = StepRecord.measured(run_id="r", step=3, phase=Phase.MIXED, prefill_tokens=[5, 7], num_decode=2,
                               contexts=[5, 9, 20, 30], start_ms=1.5, duration_ms=2.5, kv_tokens=11, kv_capacity=99,
                               num_waiting=4, num_running=6, worker="w", experts_touched=8, weight_bytes=10)
    assert (step.num_requests, step.num_prefill_requests, step.num_decode_requests, step.num_tokens) == (4, 2, 2, 14)
    assert (step.num_prefill_tokens, step.num_decode_tokens, step.context_tokens, step.max_context_tokens) == (12, 2, 64, 30)
    assert (step.start_ms, step.duration_ms, step.kv_tokens, step.kv_capacity) == (1.5, 2.5, 11, 99)
    assert (step.num_waiting, step.num_running, step.worker, step.experts_touched, step.weight_bytes) == (4, 6, "w", 8, 10)


if __name__ == "__main__":   # --write: store this tree's digests as the golden
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    if "--write" in sys.argv:
        GOLDEN.write_text(json.dumps(run_all(), indent=1, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN}")
