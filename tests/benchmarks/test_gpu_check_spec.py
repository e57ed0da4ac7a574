"""bench/gpu_check_spec.py: the speculative rows' pass rules, and both rows' code run on the CPU (the GPU
check runs them on CUDA only, where no test here reaches)."""
from __future__ import annotations

from bench import gpu_check_spec as spec


def test_the_pass_rules():
    assert spec.verify_within([1.02, 1.25]) and not spec.verify_within([1.02, 1.26])
    assert not spec.verify_within([])                        # nothing measured is no pass
    assert spec.spec_greedy_passes(192, 192, 4.8)
    assert not spec.spec_greedy_passes(191, 192, 4.8)        # one token differs
    assert not spec.spec_greedy_passes(192, 192, 1.2)        # the guesses were not kept: the equality proves nothing
    assert not spec.spec_greedy_passes(192, 192, None) and not spec.spec_greedy_passes(0, 0, 4.8)


def test_the_first_difference_is_named():
    plain = {0: [1, 2, 3], 1: [4, 5]}
    assert spec._first_difference(plain, {0: [1, 2, 3], 1: [4, 5]}, "batch 1") == ""
    assert spec._first_difference(plain, {0: [1, 2, 3], 1: [4, 6]}, "batch 3") == \
        "batch 3, request 1, token 1 (5 without guesses, 6 with)"
    assert "3 tokens without guesses, 2 with" in spec._first_difference(plain, {0: [1, 2], 1: [4, 5]}, "batch 1")


def test_the_greedy_row_passes_on_the_cpu():
    status, detail = spec.greedy_comparison("cpu", 10)
    assert status == "pass", detail
    assert detail.startswith("60/60 tokens the same")   # 3 prompts alone, then together: 6 requests of 10
    assert "tokens per verification at batch 1: " in detail


def test_the_verify_row_on_the_cpu_names_each_case_and_says_what_did_not_load():
    status, detail = spec.verification_costs("cpu", [("tiny", "float32", True), ("missing/config.json", "float32", False)])
    assert status in ("pass", "fail")   # a timing: its side is not asserted
    assert "tiny float32 " in detail and "x (as rows " in detail
    assert "missing/config.json float32: " in detail and "passes at <= 1.25x" in detail
