"""The window under the disaggregated policy: the step strip one row per worker (prefill above, decode
below), the lanes' KV transfer segment, the TTFT split in the metrics, and the policy in the form."""
from tests.fakes.gui_fixtures import RUN_TIMEOUT_MS, use_tiny

import numpy as np
from PySide6 import QtCore

from backend.targets.disaggregated.events import WorkerLayout
from backend.events import RequestsArrived
from backend.records import Phase, RecordBatch, RequestRecord, RequestStatus, StepRecord, TokenRecord
from gui.views.lanes import lane_segments
from gui.state.live_metrics import compute
from gui.views.metrics import worked_example
from gui.state.run_store import RunStore
from gui.views.worker_strip import WorkerStripView


def worker_step(i, worker, phase, start, duration, tokens) -> StepRecord:
    prefill = [tokens] if phase is Phase.PREFILL else []
    return StepRecord.measured(run_id="run-pd", step=i, phase=phase, prefill_tokens=prefill,
                               num_decode=0 if prefill else tokens, contexts=[tokens], start_ms=start,
                               duration_ms=duration, worker=worker)


def disaggregated_events() -> list:
    """Request 0: prefill [0, 40] on prefill-0, KV transfer 40-45, decode from 45 on decode-0."""
    record = RequestRecord.from_times(request_id=0, status=RequestStatus.FINISHED, prompt_tokens=100, output_tokens=3,
                                      arrival_ms=0.0, scheduled_ms=0.0, first_token_ms=50.0, last_token_ms=60.0,
                                      finish_ms=60.0, finish_reason="length")
    record.prefill_ms, record.kv_transfer_ms, record.first_decode_ms, record.kv_bytes = 40.0, 5.0, 5.0, 4_000_000
    return [
        WorkerLayout([{"name": "decode-0", "role": "decode"}, {"name": "prefill-1", "role": "prefill"},
                      {"name": "prefill-0", "role": "prefill"}], "shm"),
        RequestsArrived([0], [0.0], [100]),
        RecordBatch(steps=[worker_step(0, "prefill-0", Phase.PREFILL, 0.0, 40.0, 99)], scheduled={0: 0.0}),
        RecordBatch(steps=[worker_step(1, "decode-0", Phase.DECODE, 45.0, 5.0, 1),
                           worker_step(2, "decode-0", Phase.DECODE, 50.0, 5.0, 1),
                           worker_step(3, "decode-0", Phase.DECODE, 55.0, 5.0, 1)],
                    tokens=[TokenRecord(0, i, 50.0 + 5 * i, 7) for i in range(3)], requests=[record]),
    ]


def test_worker_rows_put_prefill_workers_above_decode_workers(qtbot):
    store = RunStore()
    for event in disaggregated_events():
        store.add_event(event)
    assert store.workers.names == ["prefill-0", "prefill-1", "decode-0"]
    view = WorkerStripView(store)
    qtbot.addWidget(view)
    view.getPlotItem().getViewBox().setXRange(0, 100, padding=0)
    view.refresh()
    assert view.row_of("prefill-0") > view.row_of("prefill-1") > view.row_of("decode-0")
    ticks = view.getPlotItem().getAxis("left")._tickLevels[0]
    assert [name for _, name in sorted(ticks, reverse=True)] == ["prefill-0", "prefill-1", "decode-0"]
    prefill_rect = view.items[Phase.PREFILL].path().boundingRect()
    decode_rect = view.items[Phase.DECODE].path().boundingRect()
    assert prefill_rect.left() == 0 and prefill_rect.right() == 40
    assert prefill_rect.bottom() <= view.row_of("prefill-0") + 1 and prefill_rect.top() >= view.row_of("prefill-0")
    assert decode_rect.left() == 45 and decode_rect.top() >= view.row_of("decode-0")
    assert decode_rect.bottom() < view.row_of("prefill-1")   # each bar stays in its own worker's row
    assert "decode-0 · decode" in view.hover_text(47.0, view.row_of("decode-0") + 0.3)
    assert view.hover_text(47.0, view.row_of("prefill-0") + 0.3) == ""   # prefill-0 was idle then


def test_lanes_show_the_kv_transfer_between_prefill_and_decode():
    store = RunStore()
    for event in disaggregated_events():
        store.add_event(event)
    seg = lane_segments(store, running=False)
    assert seg["prefill"][0].tolist() == [0.0] and seg["prefill"][1].tolist() == [40.0]
    assert seg["KV transfer"][0].tolist() == [40.0] and seg["KV transfer"][1].tolist() == [45.0]
    assert seg["decode"][0].tolist() == [45.0] and seg["decode"][1].tolist() == [60.0]


def test_metrics_show_the_ttft_split():
    store = RunStore()
    for event in disaggregated_events():
        store.add_event(event)
    m = compute(store)
    assert m.handed_off == 1 and m.ttft_split == {"queue": 0.0, "prefill": 40.0, "kv_transfer": 5.0,
                                                  "first_decode": 5.0}
    text = worked_example(m)
    assert "KV transfer 5.0" in text and "4.00 MB" in text and "= 50.0 ms" in text


def test_a_single_engine_run_has_no_worker_rows():
    from tests.fakes.gui_fixtures import two_request_run
    store = RunStore()
    for event in two_request_run():
        store.add_event(event)
    assert not store.workers and compute(store).ttft_split is None
    assert len(lane_segments(store, running=False)["KV transfer"][0]) == 0


def test_disaggregated_run_from_the_window(qtbot, inprocess_window):
    """Policy disaggregated with 1 prefill + 1 decode worker on the tiny model: the per-worker rows replace
    the strip, decode rows hold decode steps only, and the metrics split the TTFT. The run in this
    process: what is checked is the window's, not the engine process's (a Python start and torch's
    import saved; tests/gui/test_gui_engine_process.py checks runs through that process)."""
    window = inprocess_window
    use_tiny(window)
    form = window.controls.form
    form.set_kind("load")
    form.preset_combo.setCurrentText("custom")
    form.arrival_combo.setCurrentText("burst")
    f = form.fields["load"]
    f["requests"].setText("4")
    f["prompt_len"].setText("24")
    f["output_len"].setText("5")
    form.ignore_eos.setChecked(True)
    form.policy_combo.setCurrentText("disaggregated")
    assert f["prefill_workers"].isEnabled() and f["decode_workers"].isEnabled()
    engine = window.controls.build_config().engine
    assert (engine.policy, engine.prefill_workers, engine.decode_workers) == ("disaggregated", 1, 1)
    with qtbot.waitSignal(window.runFinished, timeout=RUN_TIMEOUT_MS) as done:
        qtbot.mouseClick(window.controls.run_button, QtCore.Qt.MouseButton.LeftButton)
    result = done.args[0]
    assert result.error is None and len(result.data.requests) == 4
    window.repaint_views()
    assert window.worker_strip.isVisibleTo(window) and window.store.workers.names == ["prefill-0", "decode-0"]
    decode = window.store.workers.rows["decode-0"]
    assert len(decode) > 0 and np.all(decode.column("phase") == float(list(Phase).index(Phase.DECODE)))
    assert window.metrics.metrics.handed_off == 4
    assert "TTFT, disaggregated" in window.metrics.example.text()
    form.policy_combo.setCurrentText("continuous")
    assert not f["prefill_workers"].isEnabled()
