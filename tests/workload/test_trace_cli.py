"""`load --simulate --trace FILE`: the run's requests.csv holds the trace's arrivals and lengths;
bad traces and speeds are refused in one line, without a traceback."""
from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from backend.cli.main import main
from backend.workload.trace import read_trace

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "data" / "traces"
SIM = ["load", "--simulate", "--profile", "h100-sxm", "--model", "llama-8b"]


def requests_of(folder: Path) -> list[dict]:
    with open(folder / "requests.csv", encoding="utf-8", newline="") as f:
        return sorted(csv.DictReader(f), key=lambda row: int(row["request_id"]))


@pytest.mark.parametrize("name, speed", [("azure-conv-50.csv", 1.0), ("mooncake-50.jsonl", 2.5)])
def test_replay_puts_the_trace_in_requests_csv(tmp_path, capsys, name, speed):
    out = tmp_path / "run"
    # Mooncake's prompts reach 18k tokens: 32 slots of that length would not fit an H100 beside the weights
    assert main([*SIM, "--trace", str(TRACES / name), "--trace-speed", str(speed), "--kv-tokens", "200000",
                 "--out", str(out)]) == 0
    rows = read_trace(TRACES / name).rows
    got = requests_of(out)
    assert len(got) == len(rows) == 50 and all(r["status"] == "finished" for r in got)
    assert [float(r["arrival_ms"]) for r in got] == pytest.approx([row.arrival_ms / speed for row in rows], abs=1e-6)
    assert [int(r["prompt_tokens"]) for r in got] == [row.prompt_len for row in rows]
    assert [int(r["output_tokens"]) for r in got] == [row.output_len for row in rows]
    assert "50 finished" in capsys.readouterr().out


def test_a_runs_own_folder_replays_as_it_ran(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    assert main([*SIM, "--trace", str(TRACES / "azure-conv-50.csv"), "--requests", "12", "--out", str(first)]) == 0
    assert main([*SIM, "--trace", str(first), "--trace-speed", "0.5", "--out", str(second)]) == 0
    a, b = requests_of(first), requests_of(second)
    assert len(a) == len(b) == 12
    assert [float(r["arrival_ms"]) * 2 for r in a] == pytest.approx([float(r["arrival_ms"]) for r in b], abs=1e-6)
    assert [(r["prompt_tokens"], r["output_tokens"]) for r in a] == [(r["prompt_tokens"], r["output_tokens"]) for r in b]


def test_closed_loop_flags_reach_the_run(tmp_path):
    out = tmp_path / "run"
    assert main([*SIM, "--workload", "closed-loop-8", "--requests", "16", "--ramp-ms", "800", "--think-ms", "50",
                 "--out", str(out)]) == 0
    got = requests_of(out)
    assert [float(r["arrival_ms"]) for r in got[:8]] == pytest.approx([100.0 * i for i in range(8)])   # 8 users, 800 ms
    first_answer = min(float(r["finish_ms"]) for r in got)
    assert float(got[8]["arrival_ms"]) == pytest.approx(first_answer + 50.0)   # then 50 ms of thought


def bad_files(tmp_path: Path) -> dict[str, Path]:
    files = {"missing": "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,10\n", "empty": "",
             "negative": "TIMESTAMP,ContextTokens,GeneratedTokens\n1,10,2\n2,-4,2\n"}
    paths = {}
    for key, text in files.items():
        paths[key] = tmp_path / f"{key}.csv"
        paths[key].write_text(text, encoding="utf-8")
    return paths


@pytest.mark.parametrize("case, message", [
    ("missing", "missing column GeneratedTokens; accepted: the Azure LLM inference trace CSV"),
    ("empty", "empty file"),
    ("negative", "line 3: ContextTokens -4 is negative"),
    ("speed0", "--trace-speed: must be a number greater than 0"),
    ("speed-1", "--trace-speed: must be a number greater than 0"),
])
def test_bad_traces_are_one_line(tmp_path, capsys, case, message):
    paths = bad_files(tmp_path)
    trace = str(paths.get(case, TRACES / "azure-conv-50.csv"))
    speed = {"speed0": ["--trace-speed", "0"], "speed-1": ["--trace-speed=-1"]}.get(case, [])
    assert main([*SIM, "--trace", trace, *speed]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_the_command_line_refuses_without_a_traceback(tmp_path):
    path = bad_files(tmp_path)["missing"]
    done = subprocess.run([sys.executable, str(ROOT / "main.py"), *SIM, "--trace", str(path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "missing column GeneratedTokens" in done.stderr and len(done.stderr.strip().splitlines()) == 1
