"""The theoretical hit rate printed beside the measured one: a shared-prefix local run on the tiny
model and a simulated Mooncake replay both carry it in the summary and the report's prefix line,
computed from the run's own workload, and the measured rate never beats the infinite ceiling."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from backend.cli.main import main
from backend.engine.kv_blocks import theoretical_hit_rate
from backend.results.export import read_run
from backend.workload.arrivals import WorkloadSource
from backend.workload.spec import apply_overrides, load_workload

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "mooncake-50.jsonl"


def run(tmp_path: Path, capsys, *args: str):
    folder = tmp_path / "run"
    assert main([*args, "--out", str(folder)]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("prefix"))
    return read_run(folder).summary, line


def test_a_shared_prefix_local_run_prints_its_ceiling_beside_the_measured_rate(tmp_path, capsys):
    s, line = run(tmp_path, capsys, "load", "--model", "tiny", "--requests", "8", "--rate", "1000",
                  "--shared-prefix-len", "32", "--prompt-len", "40:48", "--output-len", "2:4", "--kv-block-size", "8")
    assert s.prefix_ideal_block_size == 8 and s.prefix_ideal_num_blocks > 0
    # 8 prompts open with the same 32 tokens (4 blocks): the 7 after the first can find them all
    assert s.prefix_ideal_hit_rate >= s.prefix_ideal_sized_hit_rate > 0.4
    assert 0 < s.prefix_hit_rate <= s.prefix_ideal_hit_rate + 1e-9
    assert f"infinite cache {100 * s.prefix_ideal_hit_rate:.1f}%" in line
    assert f"this cache ({s.prefix_ideal_num_blocks:,} blocks)" in line


def test_a_simulated_mooncake_replay_carries_the_traces_ceiling(tmp_path, capsys):
    s, line = run(tmp_path, capsys, "load", "--simulate", "--profile", "h100-sxm", "--model", "llama-8b",
                  "--trace", str(TRACE), "--requests", "30", "--max-batch", "8")
    spec = apply_overrides(load_workload("poisson-chat"), trace=str(TRACE), num_requests=30)
    source = WorkloadSource(replace(spec, prompt_source="synthetic"), tokenize=None, vocab_size=128256)
    prompts = [r.prompt_ids for r in source.due(float("inf"))]
    # the trace's own prompts through an infinite cache (answers unquoted: they only take room)
    assert abs(s.prefix_ideal_hit_rate - theoretical_hit_rate(prompts, 16).tokens) < 1e-9
    assert 0 < s.prefix_hit_rate <= s.prefix_ideal_hit_rate + 1e-9
    assert "theoretical" in line and "this cache" in line


def test_a_conversations_ceiling_counts_the_answers_its_next_turns_quote():
    spec = apply_overrides(load_workload("multi-turn-chat"), num_requests=2)
    source = WorkloadSource(replace(spec, prompt_source="synthetic"), tokenize=None, vocab_size=1000)
    prompts, outputs = source.prompts_and_outputs()
    assert len(prompts) == len(outputs) and spec.turns > 1
    with_answers = theoretical_hit_rate(prompts, 16, None, outputs).tokens
    assert with_answers > theoretical_hit_rate(prompts, 16).tokens   # turn k+1 holds turn k's answer


def test_requests_the_engine_rejects_are_left_out_of_the_ceiling():
    from backend.targets.engine_run import ceiling_figures

    class Source:   # three prompts opening with the same 32 tokens (2 blocks of 16), the first one long
        def prompts_and_outputs(self):
            shared = list(range(32))
            return [shared + [100] * 40, shared + [101], shared + [102]], [[0] * 4] * 3

    assert ceiling_figures(Source(), 16, None)["prefix_ideal_hit_rate"] == 64 / 138
    # with a 40-token limit the first (76 tokens) is rejected: only the third finds the second's blocks
    assert ceiling_figures(Source(), 16, None, max_len=40)["prefix_ideal_hit_rate"] == 32 / 66
    assert ceiling_figures(object(), 16, None) == {}
