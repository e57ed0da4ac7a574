"""--repeats N: the same settings N times on one loaded model, each repeat its own run folder, and
every metric's mean, Student's t interval and CV; the t quantile against the printed tables."""
import csv
import json
import math
import statistics

import pytest

from backend.results.stats import interval_of, t_quantile
from tests.cli.test_cli import assert_clean_error, cli, main_in_process


@pytest.mark.parametrize("p, df, table", [
    (0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 4, 2.776), (0.975, 9, 2.262), (0.975, 29, 2.045),
    (0.975, 100, 1.984), (0.995, 5, 4.032), (0.95, 10, 1.812), (0.9, 3, 1.638)])
def test_t_quantile_matches_the_tables(p, df, table):
    assert t_quantile(p, df) == pytest.approx(table, abs=6e-4)
    assert t_quantile(1 - p, df) == pytest.approx(-table, abs=6e-4)


def test_interval_is_the_t_interval_of_the_mean():
    iv = interval_of([10.0, 12.0, 14.0])          # sd 2, n 3
    assert iv.mean == 12.0 and iv.n == 3
    assert iv.half_width == pytest.approx(4.303 * 2 / math.sqrt(3), rel=1e-3)
    assert iv.cv == pytest.approx(2 / 12)
    assert iv.low < 10.0 and iv.high > 14.0
    one = interval_of([5.0, float("nan")])        # NaN left out; one value has no interval
    assert one.n == 1 and one.mean == 5.0 and math.isnan(one.half_width)


def _repeats_table(folder):
    with open(folder / "repeats.csv") as f:
        return {row["metric"]: row for row in csv.DictReader(f)}


def test_run_repeats_writes_each_repeat_and_intervals_holding_every_repeat(tmp_path):
    out = tmp_path / "reps"
    proc = cli("run", "--model", "tiny", "--prompt-len", "16", "--output-len", "8", "--batch", "2",
               "--ignore-eos", "--repeats", "3", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("loading tiny") == 1          # the model is loaded once for the three
    assert proc.stderr.count("warming up") == 3
    assert "repeats  3 of 3" in proc.stdout and "TTFT mean (ms)" in proc.stdout and "± 95% CI" in proc.stdout
    assert "TPOT" in proc.stdout.split("repeats  3 of 3")[0]   # the last repeat's usual summary comes first
    folders = [out / f"repeat-{k}" for k in (1, 2, 3)]
    run_ids = set()
    for folder in folders:
        meta = json.loads((folder / "run.json").read_text())
        assert meta["config"]["repeats"] == 3
        run_ids.add(meta["run_id"])
        assert (folder / "steps.csv").is_file() and (folder / "requests.csv").is_file()
    assert len(run_ids) == 3
    table = _repeats_table(out)
    def decode_median(folder):
        with open(folder / "steps.csv") as f:
            return statistics.median(float(r["duration_ms"]) for r in csv.DictReader(f) if r["phase"] == "decode")
    for metric in ("ttft_mean_ms", "tpot_mean_ms", "e2e_mean_ms", "decode_step_p50_ms"):
        row = table[metric]
        assert row["n"] == "3"
        per_repeat = [decode_median(f) if metric == "decode_step_p50_ms"
                      else json.loads((f / "run.json").read_text())["summary"][metric] for f in folders]
        assert [float(row[f"repeat_{k}"]) for k in (1, 2, 3)] == pytest.approx(per_repeat)
        assert float(row["mean"]) == pytest.approx(sum(per_repeat) / 3)
        assert all(float(row["ci_low"]) <= v <= float(row["ci_high"]) for v in per_repeat), (metric, row)
    index = json.loads((out / "repeats.json").read_text())
    assert index["format"] == "phasescope-repeats/1" and index["requested"] == 3
    assert [r["folder"] for r in index["repeats"]] == ["repeat-1", "repeat-2", "repeat-3"]
    assert index["metrics"]["ttft_mean_ms"]["ci_half_width"] == pytest.approx(float(table["ttft_mean_ms"]["ci_half_width"]))


def test_one_repeat_is_a_plain_run(tmp_path):
    from backend.config import BatchRun, ModelChoice, RunConfig
    from backend.session import execute
    config = RunConfig(mode="batch", model=ModelChoice("tiny", "cpu", "float32"),
                       batch=BatchRun(prompt_len=8, output_len=3), out_dir=str(tmp_path))
    finished = execute(config, lambda e: None, lambda: False)
    assert finished.repeats is None and finished.error is None
    assert (tmp_path / "run.json").is_file() and not (tmp_path / "repeat-1").exists()
    assert not (tmp_path / "repeats.csv").exists()


def test_sweep_repeats_give_each_point_an_interval(tmp_path):
    out = tmp_path / "sweep"
    proc = main_in_process("sweep", "batch", "--model", "tiny", "--batches", "1,2", "--context", "16", "--steps",
                           "2", "--repeats", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "repeat-1" / "sweep.csv").is_file() and (out / "repeat-2" / "sweep.csv").is_file()
    table = _repeats_table(out)
    for metric in ("batch_1_step_ms", "batch_2_step_ms", "batch_1_tokens_per_s", "batch_2_tokens_per_s"):
        assert table[metric]["n"] == "2"
        assert float(table[metric]["ci_low"]) <= float(table[metric]["mean"]) <= float(table[metric]["ci_high"])
    assert "batch_2_tokens_per_s" in proc.stdout


@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_bad_repeats_is_one_line_and_exit_2(value):
    proc = main_in_process("run", "--model", "tiny", "--repeats", value)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "--repeats" in proc.stderr


def test_bad_repeats_in_the_settings_is_an_input_error():
    from backend.config import RunConfig
    from backend.errors import InputError
    from backend.session import execute
    with pytest.raises(InputError, match="--repeats must be a positive whole number"):
        execute(RunConfig(repeats=0), lambda e: None, lambda: False)


def test_repeats_on_load(tmp_path):
    proc = main_in_process("load", "--model", "tiny", "--requests", "4", "--arrival", "burst", "--prompt-len", "8",
                           "--output-len", "4", "--ignore-eos", "--repeats", "2", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "4 finished" in proc.stdout and "repeats  2 of 2" in proc.stdout
    table = _repeats_table(tmp_path)
    assert table["num_finished"]["mean"] == "4.0" and table["ttft_p50_ms"]["n"] == "2"
    assert_clean_error(main_in_process("load", "--model", "tiny", "--repeats", "0"), 2, "--repeats")


def test_each_repeat_is_announced_before_its_events():
    from backend.config import RunConfig
    from backend.events import RepeatStarted, RunFinished
    from backend.session import execute_repeats
    from backend.summary import Summary
    seen = []

    def target(config, emit, should_stop):
        emit("step")
        return RunFinished(f"run-{len(seen)}", summary=Summary(ttft_mean_ms=10.0 + len(seen)))
    finished = execute_repeats(RunConfig(repeats=3), target, seen.append, lambda: False)
    announced = [e for e in seen if isinstance(e, RepeatStarted)]
    assert [(e.index, e.count) for e in announced] == [(1, 3), (2, 3), (3, 3)]
    # each announcement comes before that repeat's own events
    kinds = ["R" if isinstance(e, RepeatStarted) else "s" if e == "step" else "p" for e in seen]
    assert kinds == ["R", "p", "s"] * 3
    assert finished.repeats.num_done == 3 and finished.repeats.metrics["ttft_mean_ms"].n == 3
