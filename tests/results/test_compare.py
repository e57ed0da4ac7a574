"""`compare`: saved runs side by side, the change against the first with its noise test, n/a where a
run cannot have a metric, compare.csv and the plot data handed to a renderer."""
import csv

import numpy as np
import pytest

from backend.results.stats import bootstrap_difference
from tests.cli.test_cli import assert_clean_error, cli, main_in_process

BURST = ["load", "--model", "tiny", "--arrival", "burst", "--requests", "16", "--prompt-len", "16",
         "--output-len", "8:64", "--seed", "1", "--max-batch", "4", "--ignore-eos"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same burst of mixed output lengths under static and continuous batching, saved (in this
    process: the runs are the input here; `compare` itself is run as a process below)."""
    root = tmp_path_factory.mktemp("runs")
    for policy in ("static", "continuous"):
        proc = main_in_process(*BURST, "--policy", policy, "--out", str(root / policy))
        assert proc.returncode == 0, proc.stderr
    return root


def _csv(folder):
    with open(folder / "compare.csv") as f:
        return list(csv.DictReader(f))


def _cell(rows, metric, letter):
    return next(r for r in rows if r["metric"] == metric and r["run"].startswith(letter + ":"))


def test_bootstrap_tells_a_shift_from_noise():
    rng = np.random.default_rng(3)
    a = rng.normal(100, 5, 300)
    low, high = bootstrap_difference(a, a + 10, "p50", seed=1)
    assert 5 < low < 10 < high < 15
    low, high = bootstrap_difference(a, rng.permutation(a), "mean", seed=1)
    assert low < 0 < high
    assert bootstrap_difference(a, a + 10, "p50", seed=1) == bootstrap_difference(a, a + 10, "p50", seed=1)


def test_continuous_finishes_the_burst_in_fewer_steps(runs, tmp_path):
    proc = cli("compare", str(runs / "static"), str(runs / "continuous"), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("A: tiny / cpu / float32 / static /") and "/ continuous /" in lines[1]
    for label in ("TTFT p50 (ms)", "TPOT p99 (ms)", "ITL p90 (ms)", "E2E p50 (ms)", "output throughput (tok/s)",
                  "decode share of latency (%)", "decode step p50 (ms)", "engine steps", "B vs A", "noise?"):
        assert label in proc.stdout, label
    assert "bootstrap, 1000 seeded resamples" in proc.stdout
    rows = _csv(tmp_path)
    # Static batching holds each batch of 4 until its longest request ends; continuous refills a
    # slot as soon as one frees: the same tokens in fewer engine steps (a count, not a timing).
    steps = _cell(rows, "num_steps", "B")
    assert float(steps["change_pct"]) < 0 and steps["test"] == "none" and steps["significant"] == ""
    assert float(steps["value"]) < float(_cell(rows, "num_steps", "A")["value"])
    e2e = _cell(rows, "e2e_p50_ms", "B")
    assert e2e["test"] == "bootstrap" and e2e["significant"] in ("yes", "no") and e2e["change_pct"] != ""
    assert _cell(rows, "e2e_p50_ms", "A")["change_pct"] == ""          # the first run is the reference
    assert "goodput_requests_per_s" not in {r["metric"] for r in rows}  # neither run recorded an SLO
    # main.py passes the window's renderer: the overlaid plots are PNGs beside compare.csv
    assert "plots: ttft_cdf.png, tpot_cdf.png, itl_cdf.png, e2e_cdf.png" in proc.stdout
    for name in ("ttft_cdf", "tpot_cdf", "itl_cdf", "e2e_cdf"):
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_remote_run_has_no_step_metrics(runs, tmp_path):
    """A real remote run: the bundled model behind llama.cpp's server, driven by `load --endpoint`."""
    from tests.fakes.llama_server import llama_server
    with llama_server(log_path=tmp_path / "server.log") as server:
        url = server.url
        proc = main_in_process("load", "--endpoint", url, "--served-model", "smollm2", "--arrival", "burst", "--requests", "4",
                   "--prompt-len", "16", "--output-len", "4", "--out", str(tmp_path / "remote"))
    assert proc.returncode == 0, proc.stderr
    proc = main_in_process("compare", str(runs / "continuous"), str(tmp_path / "remote"), "--out",
                           str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    assert f"remote {url}" in proc.stdout
    step_line = next(line for line in proc.stdout.splitlines() if line.startswith("decode step p50"))
    assert "n/a (remote: server steps not visible)" in step_line
    rows = _csv(tmp_path / "cmp")
    for metric in ("decode_step_p50_ms", "prefill_step_p50_ms", "num_steps"):
        cell = _cell(rows, metric, "B")
        assert cell["value"] == "" and cell["note"] == "n/a (remote: server steps not visible)", cell
    ttft = _cell(rows, "ttft_p50_ms", "B")   # the requests' metrics are there on both sides
    assert float(ttft["value"]) > 0 and ttft["change_pct"] != ""


def test_sweeps_and_repeats_compare_with_their_own_rows_and_plots(runs, tmp_path):
    from backend.cli.main import main
    for name in ("s1", "s2"):
        proc = main_in_process("sweep", "batch", "--model", "tiny", "--batches", "1,2", "--context", "16",
                               "--steps", "2", "--repeats", "2", "--out", str(tmp_path / name))
        assert proc.returncode == 0, proc.stderr
    drawn = []

    def render(plots, folder):
        drawn.extend(plots)
        return [folder / p.file_name for p in plots]
    argv = ["compare", str(tmp_path / "s1"), str(tmp_path / "s2"), str(runs / "static"), "--out", str(tmp_path / "c")]
    assert main(argv, render_plots=render) == 0
    rows = _csv(tmp_path / "c")
    tps = _cell(rows, "batch_2_tokens_per_s", "B")
    assert tps["test"] == "ci" and tps["ci_low"] != "" and float(tps["ci_low"]) <= float(tps["value"])
    assert _cell(rows, "batch_2_tokens_per_s", "C")["note"] == "n/a (not a sweep)"
    assert _cell(rows, "ttft_p50_ms", "A")["note"] == "n/a (sweep: no requests)"
    names = {p.name: p for p in drawn}
    assert {"ttft_cdf", "tpot_cdf", "itl_cdf", "sweep_batch_tokens_per_s"} <= set(names)
    sweep = names["sweep_batch_tokens_per_s"]
    assert [s.label[:2] for s in sweep.series] == ["A:", "B:"] and sweep.series[0].xs == [1.0, 2.0]
    cdf = names["ttft_cdf"].series
    assert [s.label[:2] for s in cdf] == ["C:"] and cdf[0].ys[-1] == 1.0 and cdf[0].xs == sorted(cdf[0].xs)


def test_a_folder_that_is_not_a_run_is_refused_in_one_line(runs, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = main_in_process("compare", str(runs / "static"), str(empty))
    assert_clean_error(proc, 2, f"{empty} is not a run folder")
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    for name in ("steps.csv", "requests.csv", "tokens.csv"):
        (corrupt / name).write_text((runs / "static" / name).read_text())
    (corrupt / "run.json").write_text("{not json")
    proc = main_in_process("compare", str(runs / "static"), str(runs / "continuous"), str(corrupt))
    assert_clean_error(proc, 2, "(run 3 of 3)")
    assert str(corrupt) in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert_clean_error(main_in_process("compare", str(runs / "static"), str(tmp_path / "nowhere")), 2,
                       "is not a folder")
    assert_clean_error(main_in_process("compare", str(runs / "static")), 2, "at least two run folders")

