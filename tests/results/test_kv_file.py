"""kv_map.jsonl: the KV map snapshots a run folder keeps, read back cell for cell."""
import json

import numpy as np
import pytest

from backend.errors import InputError
from backend.events import KV_CACHED_FREE, KV_FREE, KvMap
from backend.records import Phase, RecordBatch, RunData, StepRecord
from backend.results.export import RunWriter
from backend.results.kv_file import FILE, KEYS, KvFileWriter, expand, read_kv_map, run_lengths


def snap(time_ms, owners, tokens, reused=(), cached=None, final=False, layout="paged", per_row=0):
    return KvMap(time_ms, layout, 16, per_row, np.asarray(owners, np.int32).tobytes(),
                 np.asarray(tokens, np.uint16).tobytes(), np.asarray(reused, np.int32).tobytes(),
                 dict(cached or {}), final)


def test_run_lengths_round_trip():
    values = np.array([3, 3, 3, -1, -1, 7, -2, -2, -2, -2], dtype=np.int32)
    runs = run_lengths(values)
    assert runs == [[3, 3], [-1, 2], [7, 1], [-2, 4]]
    assert np.array_equal(expand(runs, np.int32), values)
    assert run_lengths(np.empty(0, np.int32)) == [] and len(expand([], np.int32)) == 0


def test_the_file_keeps_a_snapshot_every_interval_and_the_last_merging_what_it_skips(tmp_path):
    writer = KvFileWriter(tmp_path, every_ms=500)
    free = [KV_FREE] * 4
    writer.add(snap(0, [1, 1, *free[:2]], [16, 5, 0, 0]), None)
    writer.add(snap(100, [1, 1, 2, KV_FREE], [16, 16, 3, 0], reused=[0], cached={2: 16}), 0.2)   # skipped
    writer.add(snap(300, [1, 1, 2, 3], [16, 16, 9, 1], reused=[1], cached={3: 16}), 0.25)        # skipped
    writer.add(snap(600, [KV_CACHED_FREE, KV_CACHED_FREE, 2, 3], [16, 16, 16, 4]), 0.3)
    writer.add(snap(650, [KV_CACHED_FREE] * 3 + [KV_FREE], [16, 16, 16, 0], final=True), 0.31)
    assert read_kv_map(tmp_path) is None   # nothing until the run ends: the file is still .partial
    writer.close()
    snaps = read_kv_map(tmp_path)
    assert [s.time_ms for s in snaps] == [0, 600, 650] and [s.final for s in snaps] == [False, False, True]
    # the reuse the file skipped is listed on the next line it kept
    assert np.frombuffer(snaps[1].reused, np.int32).tolist() == [0, 1] and snaps[1].cached_tokens == {2: 16, 3: 16}
    assert np.frombuffer(snaps[2].owners, np.int32).tolist() == [KV_CACHED_FREE] * 3 + [KV_FREE]
    assert np.frombuffer(snaps[1].tokens, np.uint16).tolist() == [16, 16, 16, 4]
    lines = [json.loads(t) for t in (tmp_path / FILE).read_text().splitlines()]
    assert tuple(lines[0]) == KEYS
    assert (lines[1]["held"], lines[1]["cached"], lines[1]["free"], lines[1]["hit_rate"]) == (2, 2, 0, 0.3)
    assert lines[0]["hit_rate"] is None


def test_a_run_without_a_map_writes_no_file_and_an_abandoned_one_leaves_none(tmp_path):
    writer = KvFileWriter(tmp_path)
    writer.close()
    assert read_kv_map(tmp_path) is None and not list(tmp_path.iterdir())
    writer = KvFileWriter(tmp_path)
    writer.add(snap(0, [KV_FREE], [0]), None)
    writer.abandon()
    assert not list(tmp_path.iterdir())


def test_a_damaged_line_is_one_line_naming_the_file_and_line(tmp_path):
    (tmp_path / FILE).write_text('{"time_ms": 1}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"kv_map.jsonl, line 1: not a KV map snapshot"):
        read_kv_map(tmp_path)


def test_the_run_writer_streams_the_maps_with_the_steps_hit_rate(tmp_path):
    writer = RunWriter(tmp_path)
    step = StepRecord.measured(run_id="r", step=0, phase=Phase.PREFILL, prefill_tokens=[48], num_decode=0,
                               contexts=[64], start_ms=0.0, duration_ms=5.0, num_reused_tokens=16)
    writer.add(RecordBatch(steps=[step]))
    writer.add_kv(snap(5, [0, 0, 0, KV_FREE], [16, 16, 16, 0], final=True))
    writer.close(RunData(run_id="r"))
    line = json.loads((tmp_path / FILE).read_text())
    assert line["hit_rate"] == 0.25 and line["held"] == 3
    assert len(read_kv_map(tmp_path)) == 1


def test_the_recorder_writes_the_maps_a_target_emits_beside_its_records(tmp_path):
    from backend.config import RunConfig
    from backend.results.recorder import RunRecorder
    from backend.run_info import RunInfo
    seen = []
    with RunRecorder(RunConfig(out_dir=str(tmp_path)), seen.append, run_id="r") as recorder:
        recorder.emit(snap(0, [0, KV_FREE], [7, 0]))
        recorder.emit(snap(900, [KV_CACHED_FREE, KV_FREE], [16, 0], final=True))
        recorder.finish(RunInfo(), stopped=False, error=None)
    assert len(seen) == 2   # the window still gets them
    assert [s.final for s in read_kv_map(tmp_path)] == [False, True]
