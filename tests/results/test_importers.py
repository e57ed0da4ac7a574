"""`import`: other tools' result files (built to their schemas in tests/data/imports) read into run
folders; each file's headline figures recomputed from its per-request data to the last digit the tool
prints; compare opening the folders; one line for a file of another shape or version."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from backend.cli.main import main
from backend.errors import InputError
from backend.records import RequestStatus
from backend.results.export import read_run
from backend.results.importers import import_path, write_imported
from backend.run_info import TargetKind

DATA = Path(__file__).resolve().parents[1] / "data" / "imports"
EXAMPLES = {"vllm-bench-serve": DATA / "vllm-bench-serve.json", "aiperf": DATA / "aiperf",
            "guidellm": DATA / "guidellm-benchmarks.json", "llama-bench": DATA / "llama-bench.json"}


def checks_of(path) -> dict:
    [imported] = import_path(path)
    return {c.label: c for c in imported.checks}


@pytest.mark.parametrize("tool", list(EXAMPLES))
def test_each_file_s_headline_figures_are_reproduced_to_the_last_printed_digit(tool):
    checks = checks_of(EXAMPLES[tool])
    checked = [c for c in checks.values() if c.reproduced is not None]
    assert len(checked) >= 2, f"{tool}: nothing was recomputed"
    assert [c.label for c in checked if not c.reproduced] == []
    [imported] = import_path(EXAMPLES[tool])
    assert imported.run.info.target is TargetKind.IMPORTED and imported.run.info.imported.tool == tool


def test_the_headline_figures_checked_are_the_ones_each_tool_prints():
    assert {"TTFT mean (ms)", "TTFT median (ms)", "TTFT p99 (ms)", "TPOT mean (ms)", "ITL mean (ms)",
            "ITL p99 (ms)", "output throughput (tok/s)"} <= set(checks_of(EXAMPLES["vllm-bench-serve"]))
    assert {"TTFT avg (ms)", "TTFT p99 (ms)", "ITL avg (ms)", "output throughput (tok/s)"} \
        <= set(checks_of(EXAMPLES["aiperf"]))
    assert {"TTFT mean (ms)", "ITL mean (ms)", "ITL p99 (ms)", "TPOT mean (ms)"} <= set(checks_of(EXAMPLES["guidellm"]))
    assert {"pp512 tokens/s", "tg128 tokens/s"} <= set(checks_of(EXAMPLES["llama-bench"]))


def test_a_figure_the_file_misstates_is_shown_as_differing(tmp_path, capsys):
    """What the reproduction test relies on: one more in the last printed digit is caught."""
    data = json.loads(EXAMPLES["vllm-bench-serve"].read_text())
    data["mean_ttft_ms"] += 0.01
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    assert checks_of(path)["TTFT mean (ms)"].reproduced is False
    assert main(["import", str(path)]) == 0
    out = capsys.readouterr().out
    assert "differs from the file" in out and "the file's TTFT mean (ms) differ from" in out


def test_vllm_records_its_requests_tokens_and_failures():
    [imported] = import_path(EXAMPLES["vllm-bench-serve"])
    data = json.loads(EXAMPLES["vllm-bench-serve"].read_text())
    run = imported.run
    assert len(run.requests) == len(data["ttfts"])
    assert [r.request_id for r in run.requests if r.status is RequestStatus.ERROR] == \
        [i for i, e in enumerate(data["errors"]) if e]
    ok = [i for i, e in enumerate(data["errors"]) if not e]
    assert len(run.tokens) == sum(len(data["itls"][i]) + 1 for i in ok)
    assert run.requests[ok[0]].ttft_ms == pytest.approx(data["ttfts"][ok[0]] * 1000)
    assert run.summary.num_finished == data["completed"]


def test_where_the_definitions_differ_the_reason_is_given():
    vllm = checks_of(EXAMPLES["vllm-bench-serve"])
    # the example's latencies run past the last token (the stream's end): vLLM's TPOT is larger than this tool's
    assert vllm["TPOT mean (ms)"].definitions_differ and vllm["TPOT mean (ms)"].ours < vllm["TPOT mean (ms)"].theirs
    assert "stream's end" in vllm["TPOT mean (ms)"].why
    guidellm = checks_of(EXAMPLES["guidellm"])
    assert "#1145" in guidellm["ITL mean (ms)"].why
    assert guidellm["TPOT mean (ms)"].definitions_differ and "TTFT included" in guidellm["TPOT mean (ms)"].why
    aiperf = checks_of(EXAMPLES["aiperf"])
    assert aiperf["ITL p99 (ms)"].definitions_differ and "one value per request" in aiperf["ITL p99 (ms)"].why


def test_aiperf_reads_its_records_alone_and_its_summary_alone(tmp_path):
    shutil.copy(DATA / "aiperf" / "profile_export.jsonl", tmp_path / "profile_export.jsonl")
    [records_only] = import_path(tmp_path / "profile_export.jsonl")
    assert len(records_only.run.requests) == 6
    assert all(c.theirs is None for c in records_only.checks)
    [summary_only] = import_path(DATA / "aiperf" / "profile_export_aiperf.json")
    assert summary_only.run.requests
    only = tmp_path / "only"
    only.mkdir()
    shutil.copy(DATA / "aiperf" / "profile_export_aiperf.json", only / "profile_export_aiperf.json")
    [alone] = import_path(only)
    assert alone.run.requests == [] and all(c.recomputed is None for c in alone.checks)
    assert alone.run.info.imported.version == "0.3.0"


def test_llama_bench_csv_gives_the_rates_without_recomputing_them():
    [imported] = import_path(DATA / "llama-bench.csv")
    checks = {c.label: c for c in imported.checks}
    json_checks = checks_of(EXAMPLES["llama-bench"])
    assert checks["pp512 tokens/s"].theirs == json_checks["pp512 tokens/s"].theirs
    assert checks["pp512 tokens/s"].recomputed is None
    assert imported.run.summary.prefill_tokens_per_s == checks["pp512 tokens/s"].theirs
    assert imported.run.summary.decode_tokens_per_s == checks["tg128 tokens/s"].theirs


def test_the_folder_reads_back_and_compare_opens_it_beside_another(tmp_path, capsys):
    folders = {}
    for tool, path in EXAMPLES.items():
        assert main(["import", str(path), "--out", str(tmp_path / tool)]) == 0
        folders[tool] = tmp_path / tool
    printed = capsys.readouterr().out
    assert "differs from the file" not in printed and "same" in printed
    run = read_run(folders["vllm-bench-serve"])
    assert run.info.is_imported and run.info.imported.tool == "vllm-bench-serve"
    assert any("TPOT" in note for note in run.info.imported.notes)
    assert main(["compare", str(folders["vllm-bench-serve"]), str(folders["aiperf"]), str(folders["guidellm"])]) == 0
    out = capsys.readouterr().out
    assert "imported from vllm-bench-serve" in out and "imported from aiperf 0.3.0" in out
    ttft = next(line for line in out.splitlines() if line.startswith("TTFT p50"))
    assert "48.53" in ttft   # the vLLM file's own median TTFT, now a column of compare


def test_several_guidellm_benchmarks_write_one_folder_each(tmp_path):
    data = json.loads(EXAMPLES["guidellm"].read_text())
    data["benchmarks"] = data["benchmarks"] * 2
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(data))
    folders = write_imported(import_path(tmp_path), tmp_path / "out")
    assert [f.name for f in folders] == ["benchmark-1", "benchmark-2"]
    assert all(read_run(f).info.imported.tool == "guidellm" for f in folders)


BAD = {
    "unknown.json": ({"results": [1, 2]}, "not a result file this version reads (an object with results): expected "
                     "a vLLM bench serve result JSON"),
    "profile_export_aiperf.json": ({"schema_version": "2.0", "aiperf_version": "9.0", "time_to_first_token": {}},
                                   "AIPerf export schema_version '2.0': this version reads 1.0"),
    "vllm.json": ({"duration": 1.0, "completed": 2, "mean_ttft_ms": 3.0},
                  "not a vLLM bench serve result: missing total_input_tokens, total_output_tokens, output_throughput"),
    "guidellm.json": ({"args": {}, "benchmarks": [{"type_": "embeddings_benchmark"}]},
                      "benchmark 1 is not a GuideLLM generative_benchmark"),
    "llama.json": ([{"n_prompt": 512, "avg_ts": 1.0}], "test 1 is not a llama-bench result: missing build_commit"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_a_file_of_another_shape_or_version_gets_one_line_naming_what_was_expected(name, tmp_path, capsys):
    data, message = BAD[name]
    path = tmp_path / name
    path.write_text(json.dumps(data))
    assert main(["import", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: ") and message in err


def test_unreadable_files_get_one_line_too(tmp_path, capsys):
    (tmp_path / "x.json").write_text("{not json")
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    (tmp_path / "empty").mkdir()
    for path, message in ((tmp_path / "x.json", "is not JSON"), (tmp_path / "x.csv", "not a llama-bench CSV"),
                          (tmp_path / "empty", "a folder without profile_export.jsonl"),
                          (tmp_path / "none.json", "no such file")):
        assert main(["import", str(path)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and message in err
    with pytest.raises(InputError):
        import_path(tmp_path / "x.json")


def test_the_window_adds_an_imported_folder_as_a_reference(tmp_path):
    from gui.state.live_metrics import compute
    from gui.state.references import ReferenceSet
    refs = ReferenceSet()
    for tool in ("vllm-bench-serve", "aiperf", "guidellm"):
        folder = write_imported(import_path(EXAMPLES[tool]), tmp_path / tool)[0]
        ref = refs.add(folder)
        assert f"imported from {tool}" in ref.label and ref.store.num_requests == len(ref.run.requests)
        compute(ref.store)   # the metrics panel's figures
    # llama-bench's tests hold no requests or steps: the window has nothing to overlay
    folder = write_imported(import_path(EXAMPLES["llama-bench"]), tmp_path / "llama-bench")[0]
    with pytest.raises(InputError, match="holds no steps, requests or sweep points"):
        refs.add(folder)


def test_a_vllm_result_saved_without_detail_gives_its_figures_and_says_why_nothing_is_recomputed(tmp_path, capsys):
    data = json.loads(EXAMPLES["vllm-bench-serve"].read_text())
    for key in ("input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors"):
        del data[key]   # what vLLM deletes without --save-detailed
    path = tmp_path / "plain.json"
    path.write_text(json.dumps(data))
    [imported] = import_path(path)
    assert imported.run.requests == []
    ttft = next(c for c in imported.checks if c.label == "TTFT mean (ms)")
    assert ttft.theirs == data["mean_ttft_ms"] and ttft.recomputed is None and ttft.reproduced is None
    assert main(["import", str(path)]) == 0
    assert "--save-detailed" in capsys.readouterr().out


def test_a_guidellm_sample_of_requests_is_named(tmp_path):
    data = json.loads(EXAMPLES["guidellm"].read_text())
    data["benchmarks"][0]["metrics"]["request_totals"]["successful"] = 600
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(data))
    [imported] = import_path(path)
    assert any("6 of its 600" in note for note in imported.notes)
    folder = write_imported([imported], tmp_path / "out")[0]
    assert any("6 of its 600" in note for note in read_run(folder).info.imported.notes)


def test_compare_shows_llama_bench_s_rates_side_by_side(tmp_path, capsys):
    for name in ("llama-bench.json", "llama-bench.csv"):
        assert main(["import", str(DATA / name), "--out", str(tmp_path / name)]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "llama-bench.json"), str(tmp_path / "llama-bench.csv")]) == 0
    rows = {line.split("  ")[0]: line for line in capsys.readouterr().out.splitlines()}
    pp = json.loads(EXAMPLES["llama-bench"].read_text())[0]["avg_ts"]
    assert f"{pp:,.1f}" in rows["pp512: tokens/s (imported)"] and "+0.0%" in rows["pp512: tokens/s (imported)"]
    assert "tg128: tokens/s (imported)" in rows


def test_a_later_guidellm_report_names_its_version(tmp_path):
    data = json.loads(EXAMPLES["guidellm"].read_text())
    data["metadata"] = {"version": 2, "guidellm_version": "0.7.2"}
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(data))
    [imported] = import_path(path)
    assert imported.run.info.imported.version == "0.7.2 (report version 2)"
    assert all(c.reproduced is not False for c in imported.checks)
