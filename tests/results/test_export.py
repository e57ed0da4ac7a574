"""Run folders: what is written reads back identically; bad folders get one clear message."""
import csv
import json
import os

import pytest

from backend.errors import InputError
from backend.results.export import chrome_trace, read_run, RunWriter, write_run
from backend.run_info import RunInfo
from backend.summary import Summary
from backend.records import Phase, RecordBatch, RequestRecord, RequestStatus, RunData, StepRecord, TokenRecord


def sample_run() -> RunData:
    steps = [StepRecord("r1", 0, Phase.PREFILL, 2, 2, 0, 20, 20, 0, 20, 10, 0.0, 5.5, 20, 100),
             StepRecord("r1", 1, Phase.DECODE, 2, 0, 2, 2, 0, 2, 22, 11, 5.5, 1.25, 22, 100)]
    requests = [RequestRecord(0, RequestStatus.FINISHED, 10, 2, 0.0, 0.0, 5.5, 6.75, 5.5, 1.25, 6.75, 0.0, 0,
                              "length", 'text with "quotes",\ncommas and a newline'),
                RequestRecord(1, RequestStatus.REJECTED, 10, 0, 0.0, finish_reason="too long")]
    tokens = [TokenRecord(0, 0, 5.5, 42), TokenRecord(0, 1, 6.75, 7)]
    return RunData("r1", {"mode": "batch"}, RunInfo(model="tiny"), steps, requests, tokens, Summary(ttft_mean_ms=5.5))


def test_write_then_read_gives_the_same_records(tmp_path):
    run = sample_run()
    write_run(tmp_path / "out", run)
    back = read_run(tmp_path / "out")
    assert back.steps == run.steps
    assert back.requests == run.requests
    assert back.tokens == run.tokens
    assert back.summary == run.summary and back.config == run.config and back.run_id == "r1"
    assert sorted(os.listdir(tmp_path / "out")) == sorted(
        ["steps.csv", "requests.csv", "tokens.csv", "summary.csv", "run.json", "trace.json"])


def test_streaming_writer_renames_partial_files_at_close(tmp_path):
    run = sample_run()
    writer = RunWriter(tmp_path)
    writer.add(RecordBatch(steps=run.steps[:1], tokens=run.tokens[:1]))
    writer.flush()
    assert (tmp_path / "steps.csv.partial").read_text().count("\n") == 2   # header + one step, already on disk
    assert not (tmp_path / "steps.csv").exists()
    writer.add(RecordBatch(steps=run.steps[1:], tokens=run.tokens[1:], requests=run.requests))
    writer.close(run)
    assert not list(tmp_path.glob("*.partial"))
    assert read_run(tmp_path).steps == run.steps


def test_trace_has_a_slice_per_step_and_per_request_phase():
    events = chrome_trace(sample_run())["traceEvents"]
    slices = [e for e in events if e["ph"] == "X"]
    assert [e["name"] for e in slices if e["pid"] == 1] == ["prefill", "decode"]
    assert {e["name"] for e in slices if e["pid"] == 2} == {"queued", "prefill", "decode"}
    assert all(e["dur"] >= 0 for e in slices)


def test_incomplete_folder_names_what_is_missing(tmp_path):
    write_run(tmp_path, sample_run())
    (tmp_path / "tokens.csv").unlink()
    with pytest.raises(InputError, match="missing tokens.csv"):
        read_run(tmp_path)


def test_folder_from_another_version_is_refused(tmp_path):
    write_run(tmp_path, sample_run())
    meta = json.loads((tmp_path / "run.json").read_text())
    meta["format"] = "phasescope-run/0"
    (tmp_path / "run.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match="another version"):
        read_run(tmp_path)


def test_missing_column_is_named(tmp_path):
    write_run(tmp_path, sample_run())
    lines = (tmp_path / "steps.csv").read_text().splitlines()
    (tmp_path / "steps.csv").write_text("\n".join(l.split(",", 1)[1] for l in lines) + "\n")   # no run_id
    with pytest.raises(InputError, match="missing column.*run_id"):
        read_run(tmp_path)


def test_a_run_from_before_the_worker_column_still_reads(tmp_path):
    """Columns added later with a default (a step's worker and the weights it read, a request's KV
    hand-off) may be absent."""
    write_run(tmp_path, sample_run())
    lines = (tmp_path / "steps.csv").read_text().splitlines()
    assert lines[0].endswith(",worker,experts_touched,weight_bytes,num_reused_tokens,num_evictions,"
                             "num_proposed_tokens,num_accepted_tokens,draft_ms")   # the last three: speculation's
    (tmp_path / "steps.csv").write_text("\n".join(l.rsplit(",", 8)[0] for l in lines) + "\n")
    run = read_run(tmp_path)
    assert run.steps and all(s.worker == "" and s.experts_touched == s.weight_bytes == 0 for s in run.steps)
    assert all(s.num_reused_tokens == s.num_evictions == 0 for s in run.steps)
    assert all(s.num_proposed_tokens == s.num_accepted_tokens == 0 and not s.is_verification for s in run.steps)


def test_a_run_from_before_prefix_caching_still_reads(tmp_path):
    """The prefix cache's columns (a step's reused tokens and evictions, a request's cached tokens) may be absent."""
    run = sample_run()
    run.steps[0].num_reused_tokens, run.steps[0].num_evictions = 32, 2
    run.requests[0].cached_prompt_tokens = 32
    write_run(tmp_path, run)
    back = read_run(tmp_path)
    assert (back.steps[0].num_reused_tokens, back.steps[0].num_evictions, back.requests[0].cached_prompt_tokens) == (32, 2, 32)
    for name, columns in (("steps.csv", {"num_reused_tokens", "num_evictions"}), ("requests.csv", {"cached_prompt_tokens"})):
        with open(tmp_path / name, newline="") as f:
            rows = list(csv.reader(f))
        keep = [i for i, column in enumerate(rows[0]) if column not in columns]
        assert len(keep) == len(rows[0]) - len(columns)
        with open(tmp_path / name, "w", newline="") as f:
            csv.writer(f).writerows([[row[i] for i in keep] for row in rows])
    old = read_run(tmp_path)
    assert old.steps[0].num_reused_tokens == old.steps[0].num_evictions == 0
    assert old.requests[0].cached_prompt_tokens is None   # unknown, as a remote answer that did not say


def test_unwritable_folder_is_refused_before_anything_is_written(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(InputError, match="cannot write to output folder"):
        write_run(blocker / "sub", sample_run())
    assert blocker.read_text() == "not a folder"


def test_a_full_disk_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    from backend.errors import RunError
    from backend.results.export import write_files
    from tests.fakes.faults import fill_disk
    target = tmp_path / "summary.csv"
    target.write_text("old")
    fill_disk(monkeypatch)
    with pytest.raises(RunError, match="No space left on device"):
        write_files(tmp_path, {"summary.csv": "new"})
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.csv"]


def test_speculation_columns_round_trip(tmp_path):
    run = sample_run()
    run.steps[0].num_proposed_tokens, run.steps[0].num_accepted_tokens, run.steps[0].draft_ms = 4, 3, 1.5
    run.requests[0].spec_proposed, run.requests[0].spec_accepted = "4 4 2", "3 0 2"
    write_run(tmp_path, run)
    back = read_run(tmp_path)
    assert (back.steps[0].num_proposed_tokens, back.steps[0].num_accepted_tokens, back.steps[0].draft_ms) == (4, 3, 1.5)
    assert back.steps[0].is_verification
    assert back.requests[0].acceptance_lengths == [(4, 3), (4, 0), (2, 2)]
    step = next(e for e in chrome_trace(back)["traceEvents"] if e.get("args", {}).get("step") == back.steps[0].step)
    assert step["name"].endswith("(verify)") and (step["args"]["proposed"], step["args"]["accepted"]) == (4, 3)
