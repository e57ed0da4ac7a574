"""bench/server_fit.py's parts that need no server: the measuring order, the pooled medians, the line on
how busy the rest of the machine was."""
from __future__ import annotations

import csv
import statistics

from bench.server_fit import FIT_RATES, HELD_RATES, pooled_p50s, quiet_line, schedule


def test_every_other_round_runs_backwards_and_each_rate_once_a_round():
    order = schedule(2)
    first, second = [rate for rate, r in order if r == 0], [rate for rate, r in order if r == 1]
    assert sorted(first) == sorted(FIT_RATES + HELD_RATES) and second == first[::-1]
    # within a round the fit's and the held-out rates alternate
    assert [rate in FIT_RATES for rate in first] == [True, False, True, False, True]
    # the mean position of a low and of a high load is the same over the two rounds: drift falls alike
    position = {rate: statistics.fmean(i for i, (x, _) in enumerate(order) if x == rate) for rate in first}
    assert len(set(position.values())) == 1


def write_run(folder, rows):
    folder.mkdir()
    with open(folder / "requests.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["request_id", "status", "ttft_ms", "tpot_ms"])
        out.writerows(rows)


def test_pooled_medians_take_every_finished_request_of_every_run(tmp_path):
    write_run(tmp_path / "a", [[0, "finished", 100, 9], [1, "finished", 300, 11], [2, "failed", "", ""]])
    write_run(tmp_path / "b", [[0, "finished", 200, 10], [1, "finished", 900, 30], [2, "finished", 250, ""]])
    ttft, tpot = pooled_p50s([tmp_path / "a", tmp_path / "b"])
    assert ttft == 250 and tpot == 10.5     # not the mean of the two runs' own medians (200, 250 and 10, 20)


def test_the_table_line_names_each_rate_it_measured_and_none_when_unknown():
    assert quiet_line({0.25: None}) == []
    line = quiet_line({1.0: 0.5, 0.25: 1.234, 2.0: None})[-1]
    assert "1.23 at 0.25/s, 0.50 at 1.0/s." in line and "2.0/s" not in line
