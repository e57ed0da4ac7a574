"""Trace files: the three formats, their refusals (one line, with the line number), and their replay."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.errors import InputError
from backend.workload.spec import apply_overrides, load_workload, validate_workload, workload_from_dict
from backend.workload.trace import read_trace, replay_rows
from backend.workload.arrivals import WorkloadSource

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
AZURE = TRACES / "azure-conv-50.csv"
MOONCAKE = TRACES / "mooncake-50.jsonl"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_azure_timestamps_are_seconds_since_the_first_row_with_their_100ns_digits():
    rows = read_trace(AZURE).rows
    assert len(rows) == 50 and rows[0].arrival_ms == 0.0
    lines = AZURE.read_text().splitlines()
    assert lines[0] == "TIMESTAMP,ContextTokens,GeneratedTokens"
    # 18:15:46.6805902 -> 18:15:46.7999443: 119.3541 ms
    assert lines[1].startswith("2023-11-16 18:15:46.6805902") and lines[2].startswith("2023-11-16 18:15:46.7999443")
    assert rows[1].arrival_ms == pytest.approx(119.3541, abs=1e-6)
    first = lines[1].split(",")
    assert (rows[0].prompt_len, rows[0].output_len) == (int(first[1]), int(first[2]))
    assert all(a.arrival_ms <= b.arrival_ms for a, b in zip(rows, rows[1:]))


def test_azure_zones_and_plain_seconds(tmp_path):
    zoned = write(tmp_path, "z.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                  "2024-05-10 00:00:00.009930+00:00,10,2\n2024-05-10 02:00:01.5+02:00,20,3\n")
    assert [r.arrival_ms for r in read_trace(zoned).rows] == pytest.approx([0.0, 1490.07])
    seconds = write(tmp_path, "s.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n5.5,10,2\n7,20,0\n")
    rows = read_trace(seconds).rows
    assert [r.arrival_ms for r in rows] == [0.0, 1500.0] and rows[1].output_len == 1   # 0 tokens replay as 1


def test_mooncake_lines_keep_their_block_ids():
    rows = read_trace(MOONCAKE).rows
    first = json.loads(MOONCAKE.read_text().splitlines()[0])
    assert len(rows) == 50 and rows[0].hash_ids == tuple(first["hash_ids"])
    assert (rows[0].prompt_len, rows[0].output_len) == (first["input_length"], first["output_length"])
    assert rows[-1].arrival_ms == json.loads(MOONCAKE.read_text().splitlines()[-1])["timestamp"]


def test_own_requests_csv_and_its_folder_sorted_by_arrival(tmp_path):
    (tmp_path / "run").mkdir()
    write(tmp_path / "run", "requests.csv", "request_id,status,prompt_tokens,output_tokens,arrival_ms,ttft_ms\n"
          "1,finished,30,5,250.5,9\n0,finished,20,4,100.0,8\n2,rejected,40,0,300.0,\n")
    for path in (tmp_path / "run", tmp_path / "run" / "requests.csv"):
        trace = read_trace(path)
        assert trace.format == "requests.csv"
        assert [(r.arrival_ms, r.prompt_len, r.output_len) for r in trace.rows] == \
            [(0.0, 20, 4), (150.5, 30, 5), (200.0, 40, 1)]


REFUSED = [
    ("empty.csv", "", "empty file"),
    ("blank.jsonl", "\n  \n", "empty file"),
    ("header.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "no rows after the header"),
    ("missing.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,10\n", "missing column GeneratedTokens; accepted:"),
    ("missing2.csv", "arrival_ms,status\n1,finished\n", "missing columns prompt_tokens, output_tokens; accepted:"),
    ("other.csv", "a,b,c\n1,2,3\n", "none of a trace format's; accepted: the Azure"),
    ("negative.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1,10,2\n2,-4,2\n", "line 3: ContextTokens -4 is negative"),
    ("words.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1,10,lots\n", "line 2: GeneratedTokens 'lots' is not a whole"),
    ("fraction.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1,10.5,2\n", "line 2: ContextTokens '10.5' is not a whole"),
    ("when.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,2\n", "line 2: TIMESTAMP 'yesterday' is not a date"),
    ("short.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1,10\n", "line 2: 2 fields"),
    ("m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"timestamp": 1, "input_length": 5}\n',
     "line 2: missing field output_length; accepted:"),
    ("n.jsonl", '{"timestamp": 0, "input_length": -5, "output_length": 2}\n', "line 1: input_length -5 is negative"),
    ("o.jsonl", '{"timestamp": "soon", "input_length": 5, "output_length": 2}\n', "line 1: timestamp 'soon' is not a number"),
    ("p.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 2}\nnot json\n', "line 2: not a JSON object"),
    ("q.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 2, "hash_ids": "x"}\n', "line 1: hash_ids"),
]


@pytest.mark.parametrize("name, text, message", REFUSED, ids=[r[0] for r in REFUSED])
def test_bad_files_are_refused_in_one_line_naming_the_file(tmp_path, name, text, message):
    path = write(tmp_path, name, text)
    with pytest.raises(InputError) as err:
        read_trace(path)
    assert message in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_the_spec_takes_the_trace_rows_count_and_lengths():
    base = load_workload("poisson-chat")
    spec = apply_overrides(base, trace=str(AZURE), prompt_source="synthetic")
    rows = read_trace(AZURE).rows
    assert spec.arrival == "trace" and spec.num_requests == 50 and spec.name == "azure-conv-50"
    assert spec.prompt_len.low == min(r.prompt_len for r in rows) and spec.prompt_len.high == max(r.prompt_len for r in rows)
    assert spec.output_len.high == max(r.output_len for r in rows)
    assert validate_workload(spec) == spec                      # run.json's settings give the same spec back
    assert apply_overrides(base, trace=str(AZURE), num_requests=7).num_requests == 7
    fast = apply_overrides(base, trace=str(AZURE), trace_speed=4.0, duration_s=2.0, prompt_source="synthetic")
    assert all(r.arrival_ms < 2000.0 for r in replay_rows(AZURE, 4.0, None, 2.0))
    assert len(WorkloadSource(fast, None, 100).due(float("inf"))) == len(replay_rows(AZURE, 4.0, None, 2.0))


@pytest.mark.parametrize("overrides, message", [
    (dict(trace_speed=0.0), "--trace-speed: must be a number greater than 0"),
    (dict(trace_speed=-2.0), "--trace-speed: must be a number greater than 0"),
    (dict(num_requests=51), "--trace: "),
    (dict(prompt_len="8"), "--prompt-len: a trace's lengths are its own"),
    (dict(arrival="closed", concurrency=4), "--arrival: a trace replays its own arrival times"),
    (dict(think_ms=10.0), "--think-ms: is for a closed loop's users"),
])
def test_trace_flags_are_checked(overrides, message):
    with pytest.raises(InputError, match=message):
        apply_overrides(load_workload("poisson-chat"), trace=str(AZURE), **overrides)
    with pytest.raises(InputError, match="--trace-speed: scales a trace's times"):
        apply_overrides(load_workload("poisson-chat"), trace_speed=2.0)


def test_the_preset_finds_its_trace_beside_it_and_refuses_a_missing_one(tmp_path):
    spec = load_workload("azure-trace")
    assert spec.arrival == "trace" and spec.num_requests == 200 and Path(spec.trace).is_file()
    assert Path(spec.trace).stat().st_size < 200_000
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", "t.jsonl", MOONCAKE.read_text())
    toml = write(tmp_path, "w.toml", 'trace = "sub/t.jsonl"\ntrace_speed = 2.0\n')
    assert load_workload(str(toml)).num_requests == 50
    gone = write(tmp_path, "gone.toml", 'trace = "nowhere.csv"\n')
    with pytest.raises(InputError, match=r"gone.toml: field 'trace': .*nowhere.csv: cannot read"):
        load_workload(str(gone))
    with pytest.raises(InputError, match="field 'trace': expected the path of a trace file"):
        workload_from_dict({"trace": 3}, "x", "x.toml")


def test_trace_source_replays_times_lengths_and_shared_prefixes():
    spec = apply_overrides(load_workload("poisson-chat"), trace=str(MOONCAKE), trace_speed=2.0, prompt_source="synthetic")
    source = WorkloadSource(spec, None, 1000, max_prompt_len=8192)
    assert source.num_total == 50
    rows = read_trace(MOONCAKE).rows
    reqs = source.due(float("inf"))
    assert source.is_exhausted() and source.next_arrival_ms() is None
    assert [r.arrival_ms for r in reqs] == [row.arrival_ms / 2.0 for row in rows]
    assert [len(r.prompt_ids) for r in reqs] == [min(row.prompt_len, 8192) for row in rows]   # cut to the context
    assert max(row.prompt_len for row in rows) > 8192
    assert [r.max_new_tokens for r in reqs] == [row.output_len for row in rows]
    # rows sharing a first block id share its 512 tokens; rows that do not, do not
    pairs = [(i, j) for i in range(50) for j in range(i + 1, 50)]
    shared = next((i, j) for i, j in pairs if rows[i].hash_ids[0] == rows[j].hash_ids[0])
    apart = next((i, j) for i, j in pairs if rows[i].hash_ids[0] != rows[j].hash_ids[0])
    assert reqs[shared[0]].prompt_ids[:512] == reqs[shared[1]].prompt_ids[:512]
    assert reqs[apart[0]].prompt_ids[:512] != reqs[apart[1]].prompt_ids[:512]
    again = WorkloadSource(spec, None, 1000, max_prompt_len=8192).due(float("inf"))
    assert [r.prompt_ids for r in again] == [r.prompt_ids for r in reqs]   # the same from the seed


def test_trace_source_due_hands_out_in_time_and_text_prompts_fit():
    spec = apply_overrides(load_workload("poisson-chat"), trace=str(AZURE))
    source = WorkloadSource(spec, lambda text: [len(w) for w in text.split()], 100)
    rows = read_trace(AZURE).rows
    assert [r.request_id for r in source.due(rows[2].arrival_ms)] == [0, 1, 2]
    assert source.next_arrival_ms() == rows[3].arrival_ms
    rest = source.due(float("inf"))
    assert all(len(r.prompt_ids) == rows[r.request_id].prompt_len and r.prompt_text for r in rest)
