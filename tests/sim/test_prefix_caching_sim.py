"""Simulated runs with the paged cache and prefix caching: the shipped Mooncake sample's hash_ids give
prompts that share prefixes, so caching them must show hits and compute fewer tokens than without."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from backend.cli.main import main
from backend.engine.kv_blocks import theoretical_hit_rate
from backend.results.export import read_run

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "mooncake-50.jsonl"
BASE = ["load", "--simulate", "--profile", "h100-sxm", "--model", "llama-8b", "--trace", str(TRACE),
        "--requests", "30", "--max-batch", "8"]


def simulate(tmp_path: Path, name: str, *flags: str):
    folder = tmp_path / name
    assert main([*BASE, *flags, "--out", str(folder)]) == 0
    return read_run(folder)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prefix")
    return {name: simulate(tmp, name, *flags) for name, flags in
            {"on": (), "off": ("--prefix-caching", "off"), "slots": ("--kv-layout", "slots")}.items()}


def computed(run) -> int:
    return sum(s.num_prefill_tokens for s in run.steps)


def test_a_shared_prefix_is_reused_and_not_computed(runs):
    on, off = runs["on"], runs["off"]
    assert on.config["engine"]["kv_layout"] == "paged" and on.config["engine"]["prefix_caching"] is True
    assert on.summary.prefix_hit_rate > 0.1 and on.summary.prefix_request_hit_rate > 0
    assert on.summary.prefill_saved_ms > 0
    assert sum(r.cached_prompt_tokens for r in on.requests) == on.summary.prefix_hit_tokens > 0
    assert sum(s.num_reused_tokens for s in on.steps) == on.summary.reused_tokens >= on.summary.prefix_hit_tokens
    # every prompt token is either computed or reused (preempted requests recompute theirs)
    assert computed(on) + on.summary.reused_tokens >= sum(r.prompt_tokens for r in on.requests if r.output_tokens)
    assert computed(on) < computed(off)
    # steps are priced by the tokens they compute, on the virtual clock (no machine timing in it)
    assert on.summary.prefill_time_ms < off.summary.prefill_time_ms and on.summary.ttft_p50_ms < off.summary.ttft_p50_ms
    assert off.summary.prefix_hit_rate is None and all(r.cached_prompt_tokens == 0 for r in off.requests)


def test_the_measured_hit_rate_stays_under_the_traces_own_ceiling(runs):
    """An infinite cache replaying the prompts one at a time is the most any run of them can reuse."""
    from backend.workload.arrivals import WorkloadSource
    from backend.workload.spec import apply_overrides, load_workload
    spec = apply_overrides(load_workload("poisson-chat"), trace=str(TRACE), num_requests=30)
    spec = replace(spec, prompt_source="synthetic")   # as the simulator draws them
    source = WorkloadSource(spec, tokenize=None, vocab_size=128256)
    prompts = [r.prompt_ids for r in source.due(float("inf"))]
    ceiling = theoretical_hit_rate(prompts, 16)
    on = runs["on"].summary
    assert 0 < on.prefix_hit_tokens <= ceiling.hit_tokens


def test_the_slot_layout_simulates_as_before(runs):
    slots = runs["slots"]
    assert slots.config["engine"]["kv_layout"] == "slots" and slots.summary.prefix_hit_rate is None
    assert computed(slots) >= computed(runs["on"])


def test_prefix_caching_on_slots_is_one_line(tmp_path, capsys):
    assert main([*BASE, "--kv-layout", "slots", "--prefix-caching", "on"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs --kv-layout paged" in err[0]


@pytest.mark.parametrize("flags, message", [
    (("--kv-block-size", "24"), "power of two"),
    (("--kv-block-size", "1024", "--max-batch", "64", "--kv-tokens", "20000"), "fewer than one per request"),
])
def test_bad_block_settings_are_one_line(capsys, flags, message):
    assert main([*BASE, *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_the_simulated_disaggregated_prefill_devices_reuse_prefixes(tmp_path):
    """The prefill device's steps compute only what its cache lacks; the records say what was found; the
    whole prompt's KV still crosses the link (kv_bytes as without the cache)."""
    on, off = (simulate(tmp_path, name, "--policy", "disaggregated", *flags)
               for name, flags in (("pd-on", ()), ("pd-off", ("--prefix-caching", "off"))))
    assert on.config["engine"]["prefix_caching"] is True and off.summary.prefix_hit_rate is None
    s = on.summary
    assert sum(r.cached_prompt_tokens for r in on.requests) == s.prefix_hit_tokens > 0
    assert sum(st.num_reused_tokens for st in on.steps if st.worker.startswith("prefill")) == s.reused_tokens > 0
    assert computed(on) + s.reused_tokens == computed(off)   # no preemption in a prefill-only pool
    assert s.prefill_time_ms < off.summary.prefill_time_ms
    assert 0 < s.prefix_hit_rate <= s.prefix_ideal_hit_rate
    assert sorted(r.kv_bytes for r in on.requests) == sorted(r.kv_bytes for r in off.requests)
