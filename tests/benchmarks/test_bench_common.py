"""bench/common.py: a benchmark's table replaces only its own in the README, the rounds alternate, the machine
line names the machine; and the package's rules: no sys.path edits, every table a benchmark writes has its
markers in bench/README.md."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import common

BENCH = Path(common.__file__).parent


def test_write_table_replaces_only_its_own_table(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# B\n\n<!-- a:begin -->\nold a\n<!-- a:end -->\n\n"
                      "text\n<!-- b:begin -->\nold b\n<!-- b:end -->\n")
    common.write_table("a", "new a\n| x |", readme)
    common.write_table("a", "newer a", readme)   # a rerun replaces the table again, nothing piles up
    assert readme.read_text() == ("# B\n\n<!-- a:begin -->\nnewer a\n<!-- a:end -->\n\ntext\n"
                                  "<!-- b:begin -->\nold b\n<!-- b:end -->\n")


def test_write_table_without_markers_refuses(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- a:begin -->\nx\n<!-- a:end -->\n")
    with pytest.raises(SystemExit, match="no <!-- c:begin -->"):
        common.write_table("c", "y", readme)
    assert readme.read_text() == "<!-- a:begin -->\nx\n<!-- a:end -->\n"


def test_rounds_alternate_after_a_warmup_in_the_given_order():
    rounds = [(rnd, "".join(order)) for rnd, order in common.alternating(3, "AB")]
    assert rounds == [(-1, "AB"), (0, "AB"), (1, "BA"), (2, "AB")]
    assert [r for r, _ in common.alternating(2, "AB", warmup=0)] == [0, 1]


def test_three_sides_take_every_position_in_turn():
    """Reversing alone would leave B in the middle of A B C every round."""
    orders = ["".join(order) for _, order in common.alternating(6, "ABC", warmup=0)]
    assert orders == ["ABC", "CBA", "BCA", "ACB", "CAB", "BAC"]
    for side in "ABC":
        assert sorted(o.index(side) for o in orders) == [0, 0, 1, 1, 2, 2]


def test_interleaved_keeps_each_sides_results_apart_and_drops_the_warmup():
    calls = []

    def side(name):
        def run(warm):
            calls.append((name, warm))
            return f"{name}{len(calls)}"
        return run

    a, b = common.interleaved(2, side("a"), side("b"))
    assert calls == [("a", True), ("b", True), ("a", False), ("b", False), ("b", False), ("a", False)]
    assert a == ["a3", "a6"] and b == ["b4", "b5"]


def test_ratio_median_is_of_round_by_round_ratios():
    # medians of each side would give 20 / 10 = 2; the rounds' own ratios are 1, 1, 4
    assert common.ratio_median([10, 20, 40], [10, 20, 10]) == 1.0


def test_machine_line_names_the_cpu_cores_and_extras():
    line = common.measured_line("2 torch threads")
    assert line.startswith("Measured 20") and f"{common.cpu_model()}" in line
    assert re.search(r", \d+ cores, ", line) and line.endswith(", 2 torch threads.")
    assert set(common.cpu_units()) <= set(common.UNITS.values())


def test_no_benchmark_edits_sys_path():
    offenders = [p.name for p in BENCH.glob("*.py") if "sys.path.insert" in p.read_text(encoding="utf-8")
                 or "sys.path.append" in p.read_text(encoding="utf-8")]
    assert offenders == []


def test_every_table_a_benchmark_writes_has_its_markers():
    readme = common.README.read_text(encoding="utf-8")
    names = set()
    for path in BENCH.glob("*.py"):
        names |= set(re.findall(r'(?:publish|write_table)\(\s*"(\w+)"', path.read_text(encoding="utf-8")))
    assert {"engine_vs_hf", "engine_vs_hf_gpu", "sim_speed", "policies"} <= names
    missing = [n for n in sorted(names) if not all(m in readme for m in common.markers(n))]
    assert missing == []
