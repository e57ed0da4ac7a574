"""bench/make_mooncake.py writes a trace in Mooncake's format that the workload reader replays, with
the prefixes the replay benchmark needs: conversations resend their blocks, system prompts recur."""
from __future__ import annotations

import json

from backend.engine.kv_blocks import theoretical_hit_rate
from bench.make_mooncake import BLOCK, main, rows


def test_rows_are_mooncake_lines_whose_hashes_cover_their_prompts():
    out = rows(300, 1)
    assert [r["timestamp"] for r in out] == sorted(r["timestamp"] for r in out)
    for r in out:
        assert set(r) == {"timestamp", "input_length", "output_length", "hash_ids"}
        assert (len(r["hash_ids"]) - 1) * BLOCK < r["input_length"] <= len(r["hash_ids"]) * BLOCK
    # the hash ids as blocks of 512 tokens: later prompts find earlier ones' blocks, a small pool fewer
    prompts = [[h for h in r["hash_ids"] for _ in range(BLOCK)] for r in out[:120]]
    infinite, small = theoretical_hit_rate(prompts, BLOCK), theoretical_hit_rate(prompts, BLOCK, num_blocks=20)
    assert 0.3 < infinite.tokens < 1 and small.tokens < infinite.tokens


def test_the_file_replays_as_a_trace(tmp_path, monkeypatch):
    from backend.workload.spec import apply_overrides, load_workload
    from backend.workload.trace import trace_rows
    path = tmp_path / "t.jsonl"
    monkeypatch.setattr("sys.argv", ["make_mooncake", str(path), "--rows", "40", "--seed", "3"])
    assert main() == 0
    assert len(path.read_text().splitlines()) == 40 and json.loads(path.read_text().splitlines()[0])["hash_ids"]
    spec = apply_overrides(load_workload("poisson-chat"), trace=str(path))
    assert len(trace_rows(spec)) == 40
