"""bench/gpu_check.sh: the GPU smoke check's CPU side -- its dry run prints the whole table and exits 0, a
failing check makes it exit 1, and its pass rules are the issue's (0.5 ms, no growth, 60-100%, 40-100%)."""
from __future__ import annotations

import os
import subprocess
import sys

from bench import gpu_check
from bench.common import ROOT


def test_the_dry_run_prints_every_check_in_one_table_and_exits_0():
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(["bash", "bench/gpu_check.sh", "--dry-run"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("| check ") and lines[0].endswith("| result | detail |")
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in lines[2:]}
    assert list(rows) == [c.name for c in gpu_check.CHECKS]
    assert rows["torch"] == "pass"
    assert all(rows[c.name] == "skip" for c in gpu_check.CHECKS if c.needs_gpu)
    assert "batch 4,096 would need" in done.stdout   # the oversized batch's size, worked out without a GPU
    details = {line.split("|")[1].strip(): line.split("|")[3].strip() for line in lines[2:]}
    assert details["spec-greedy"] == "dry run (needs a GPU)"   # the speculative rows, skipped with the reason
    assert details["spec-verify"].startswith("dry run (needs a GPU): passes at <= 1.25x at float32, bfloat16")


def test_a_failing_check_is_a_row_and_exit_status_1(monkeypatch, capsys):
    def broken(args):
        raise RuntimeError("CUDA error: device-side assert triggered\nmore")
    monkeypatch.setattr(gpu_check, "CHECKS", [gpu_check.Check("torch", False, gpu_check.check_torch),
                                              gpu_check.Check("broken", False, broken)])
    assert gpu_check.main(["--dry-run"]) == 1
    out = capsys.readouterr().out
    assert "| broken | fail   | RuntimeError: CUDA error: device-side assert triggered |" in out


def test_without_a_gpu_the_full_check_refuses_at_once(monkeypatch, capsys):
    monkeypatch.setattr(gpu_check, "_cuda_visible", lambda: False)
    assert gpu_check.main([]) == 2
    assert "--dry-run" in capsys.readouterr().err


def test_the_pass_rules():
    assert gpu_check.clock_agrees([1.0, 2.0, 3.0], [1.3, 2.4, 3.2]) and not gpu_check.clock_agrees([1.0], [1.6])
    assert not gpu_check.clock_agrees([], [])
    assert gpu_check.does_not_grow(10.0, 11.0) and not gpu_check.does_not_grow(10.0, 12.0)
    assert gpu_check.within(3000, 4800, gpu_check.BANDWIDTH_RANGE)          # 62%
    assert not gpu_check.within(2000, 4800, gpu_check.BANDWIDTH_RANGE)      # 42%
    assert gpu_check.within(500, 989, gpu_check.BF16_RANGE) and not gpu_check.within(1000, 989, gpu_check.BF16_RANGE)


def test_the_oversized_batch_is_larger_than_any_shipped_gpu():
    from backend.engine.memory_fit import runner_memory
    from backend.models.shapes import SHAPES
    from backend.roofline.profiles import list_profiles
    b = gpu_check.OVERSIZED
    need = runner_memory(SHAPES[gpu_check.MODEL], b["batch"], b["prompt_len"] + b["output_len"], 2, "cuda", True, 512)
    assert need.total > 2 * max(p.memory_gb for p in list_profiles()) * 1e9
