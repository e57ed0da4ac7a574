"""`plan` from the command line: bad input is one line (exit 2); a tiny plan prints its table and files."""
import pytest

from backend.cli.main import main

BASE = ["plan", "--model", "llama-8b", "--slo-ttft-ms", "300", "--slo-tpot-ms", "30", "--rate", "8"]


@pytest.mark.parametrize("extra, message", [
    (["--gpus", "h100-sxm,h1000"], "error: --gpus: unknown GPU 'h1000' (known: "),
    (["--slo-ttft-ms", "0"], "error: --slo-ttft-ms must be a positive number of milliseconds, got 0"),
    (["--slo-tpot-ms", "-5"], "error: --slo-tpot-ms must be a positive number of milliseconds, got -5"),
    (["--precisions", "int4"], "error: --precisions: unknown 'int4'"),
    (["--kv-dtypes", "fp4"], "error: --kv-dtypes: unknown 'fp4' (known: auto, fp8)"),
    (["--model", "profiles/models/llama-3.1-70b.json", "--gpus", "a100-80gb-sxm", "--max-gpus", "1",
      "--precisions", "bfloat16"], "error: no candidate fits profiles/models/llama-3.1-70b.json"),
])
def test_bad_input_is_one_line(capsys, extra, message):
    assert main(BASE + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


def test_a_tiny_plan_prints_and_writes(tmp_path, capsys):
    args = BASE + ["--gpus", "h100-sxm", "--max-gpus", "2", "--precisions", "bfloat16", "--policies", "continuous",
                   "--max-batches", "8", "--prompt-len", "256", "--output-len", "32", "--requests", "30",
                   "--workers", "1", "--out", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "30 requests simulated per candidate" in out and "Pareto front" in out
    assert (tmp_path / "plan.csv").is_file() and (tmp_path / "pareto.csv").is_file()
    assert (tmp_path / "plan.png").is_file() or "plot    skipped:" in out


def test_a_trace_replaces_the_poisson_arrivals(capsys):
    args = ["plan", "--model", "llama-8b", "--slo-ttft-ms", "2000", "--slo-tpot-ms", "50",
            "--trace", "profiles/workloads/traces/azure-conv-200.csv", "--requests", "20", "--gpus", "h100-sxm",
            "--max-gpus", "1", "--precisions", "fp8", "--policies", "chunked", "--max-batches", "32", "--workers", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    # fp8 with its KV cache in bfloat16 and in fp8: two candidates
    assert "trace profiles/workloads/traces/azure-conv-200.csv replayed (" in out and "2 simulated" in out
