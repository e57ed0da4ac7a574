"""The command line as a user meets it: exit codes, one-line errors, files written.

One real process per command (run, load, sweep, an argument error, Ctrl+C) checks what only a process
shows (its exit status, its streams); the other cases call the same entry point in this process,
which skips a torch import per case and asserts the same status and lines."""
import contextlib
import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "main.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def main_in_process(*args, entry=None) -> subprocess.CompletedProcess:
    """`python main.py ARGS` without the process: `entry` (backend.cli.main.main unless given, e.g.
    gui.app.main) with stdout and stderr captured; argparse's usage errors (SystemExit) become the
    status a process would exit with."""
    from backend.cli.main import main
    main = entry or main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(["main.py", *args], code, out.getvalue(), err.getvalue())


def assert_clean_error(proc, code: int, text: str):
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:") or "error:" in line]
    assert errors and text in errors[-1], proc.stderr


def test_bundled_model_answers_the_chat_question_with_paris():
    proc = cli("run", "--prompt", "What is the capital of France?", "--chat", "--output-len", "24")
    assert proc.returncode == 0, proc.stderr
    assert "Paris" in proc.stdout
    for word in ("TTFT", "TPOT", "tok/s", "decoded token costs", "decode steps x", "roofline", "FLOP/byte"):
        assert word in proc.stdout
    # the bounds come from the roofline (below, on hand-made records, in test_report.py), not fixed text
    assert "(compute-bound)" not in proc.stdout and "(memory-bound)" not in proc.stdout


def test_run_writes_every_file_with_the_documented_columns(tmp_path):
    proc = cli("run", "--model", "tiny", "--prompt-len", "16", "--output-len", "5", "--batch", "2",
               "--ignore-eos", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "RANDOM weights" in proc.stdout
    columns = {
        "steps.csv": "step phase num_requests num_tokens context_tokens start_ms duration_ms kv_tokens",
        "requests.csv": "request_id status prompt_tokens output_tokens arrival_ms first_token_ms finish_ms "
                        "ttft_ms tpot_ms e2e_ms",
        "tokens.csv": "request_id index time_ms",
    }
    for name, wanted in columns.items():
        with open(tmp_path / name) as f:
            header = next(csv.reader(f))
        assert set(wanted.split()) <= set(header), name
    assert {p.name for p in tmp_path.iterdir()} >= {"summary.csv", "run.json", "trace.json"}
    import json
    trace = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    with open(tmp_path / "steps.csv") as f:
        num_steps = sum(1 for _ in f) - 1
    assert num_steps == 5 and len([e for e in trace if e["ph"] == "X" and e["pid"] == 1]) == num_steps


def test_load_and_sweep_and_listings(tmp_path):
    proc = cli("load", "--model", "tiny", "--requests", "6", "--arrival", "burst", "--prompt-len", "8:16",
               "--output-len", "4", "--ignore-eos", "--policy", "chunked", "--chunk-tokens", "16",
               "--out", str(tmp_path / "load"))
    assert proc.returncode == 0, proc.stderr
    assert "6 finished" in proc.stdout and "p99" in proc.stdout
    proc = cli("sweep", "batch", "--model", "tiny", "--batches", "1,2", "--context", "32", "--steps", "2",
               "--profile", "h100-sxm", "--out", str(tmp_path / "sweep"))
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "sweep" / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["batch"] for r in rows] == ["1", "2"]
    assert {"step_ms", "tokens_per_s", "flops", "bytes", "mfu", "mbu", "predicted_ms", "predicted_local_ms",
            "bound"} <= set(rows[0])
    assert "h100-sxm" in main_in_process("profiles").stdout
    assert "smollm2-135m" in main_in_process("models").stdout


@pytest.mark.parametrize("args, text", [
    (["run", "--model", "no-such-model"], "unknown model"),
    (["run", "--model", "tiny", "--prompt-len", "5000"], "exceeds tiny's context"),
    (["run", "--model", "tiny", "--prompt", "  "], "--prompt is empty"),
    (["run", "--model", "tiny", "--temperature", "-1"], "--temperature"),
    (["run", "--model", "tiny", "--batch", "100000000"], "GiB is free"),
    (["load", "--model", "tiny", "--max-batch", "100000000"], "GiB is free"),
    (["load", "--model", "tiny", "--workload", "no-such-workload"], "no-such-workload"),
    (["load", "--model", "tiny", "--rate", "0"], "--rate"),
    (["load", "--model", "tiny", "--prompt-len", "50:10"], "min 50 > max 10"),
    (["load", "--model", "tiny", "--chunk-tokens", "0", "--policy", "chunked"], "--chunk-tokens"),
    (["sweep", "batch", "--model", "tiny", "--profile", "no-such-gpu"], "no-such-gpu"),
    (["sweep", "batch", "--model", "tiny", "--batches", "1,x"], "--batches"),
    (["run", "--model", "tiny", "--tp", "2"], "add --simulate"),
    (["run", "--simulate", "--profile", "h100-sxm", "--model", "llama-3.1-70b", "--tp", "3"], "does not divide"),
    (["run", "--simulate", "--profile", "a100-80gb-sxm", "--model", "llama-8b", "--dtype", "fp8"], "no fp8 peak"),
    (["run", "--simulate", "--profile", "h100-sxm", "--model", "llama-8b", "--link", "pigeon"], "unknown link"),
    (["run", "--model", "tiny", "--dtype", "fp8"], "the simulator prices"),
])
def test_bad_input_gets_one_line_and_exit_2(args, text):
    assert_clean_error(main_in_process(*args), 2, text)


def test_bad_input_in_a_real_process_is_one_line_and_exit_2():
    assert_clean_error(cli("load", "--model", "tiny", "--rate", "0"), 2, "--rate")


def test_argument_errors_exit_2_without_traceback():
    proc = cli("run", "--output-len", "0")
    assert proc.returncode == 2 and "must be positive" in proc.stderr and "Traceback" not in proc.stderr


def test_unwritable_output_folder_is_refused_and_nothing_is_left(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("keep me")
    assert_clean_error(main_in_process("run", "--model", "tiny", "--out", str(blocker / "run")), 2, "cannot write to output folder")
    assert blocker.read_text() == "keep me" and [p.name for p in tmp_path.iterdir()] == ["a-file"]


def test_malformed_workload_file_names_the_field(tmp_path):
    path = tmp_path / "w.toml"
    path.write_text('arrival = "poisson"\nrate = -2\nnum_requests = 4\n')
    proc = main_in_process("load", "--model", "tiny", "--workload", str(path))
    assert_clean_error(proc, 2, "rate")
    assert "w.toml" in proc.stderr


def test_ctrl_c_stops_the_run_and_still_writes_the_records(tmp_path):
    import signal
    from backend.results.export import read_run
    from tests.fakes.faults import start_load_run
    proc = start_load_run(tmp_path)
    try:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    run = read_run(tmp_path)
    assert run.steps and len(run.requests) < 400
    assert any(r.finish_reason == "stopped by user" for r in run.requests)
