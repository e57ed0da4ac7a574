"""Each view on hand-made records: what it paints, what hovering says, how it follows the run."""
import math

import numpy as np
import pytest
from gui_fixtures import config_dir, no_thread_left, step, two_request_run  # noqa: F401

from backend.events import SweepPoint
from backend.models.shapes import SHAPES
from backend.profiles import find_profile
from backend.records import Phase, RecordBatch, TokenRecord
from gui.lanes import LanesView, lane_segments
from gui.metrics import MetricsPanel
from PySide6 import QtCore
from PySide6.QtCore import Qt

from gui.requests_table import COLUMNS, SORT_ROLE, RequestsTable
from gui.run_store import RunStore
from gui.text_view import GeneratedText
from gui.throughput import ThroughputView
from gui.timeline import TimelineView, bar_outline


@pytest.fixture
def store():
    s = RunStore()
    for event in two_request_run():
        s.add_event(event)
    return s


def test_bar_outline_traces_each_bar_with_sorted_x():
    x, y = bar_outline(np.array([0.0, 5.0]), np.array([4.0, 6.0]), np.array([10.0, 3.0]), 0.5)
    assert x.tolist() == [0, 0, 4, 4, 5, 5, 6, 6]
    assert y.tolist() == [0.5, 10, 10, 0.5, 0.5, 3, 3, 0.5]
    assert np.all(np.diff(x) >= 0)


def test_timeline_paints_one_curve_per_phase_and_describes_the_hovered_step(qtbot, store):
    view = TimelineView(store)
    qtbot.addWidget(view)
    view.refresh()
    assert len(view.curves[Phase.PREFILL].xData) == 2 * 4
    assert len(view.curves[Phase.DECODE].xData) == 3 * 4
    assert view.curves[Phase.MIXED].xData is None or len(view.curves[Phase.MIXED].xData) == 0
    text = view.hover_text(12.0)
    assert "step 1 · prefill" in text and "50 tokens" in text
    assert view.hover_text(100.0) == ""


def test_timeline_follows_the_live_edge_until_the_user_pans(qtbot):
    store = RunStore()
    view = TimelineView(store)
    qtbot.addWidget(view)
    view.resize(600, 300)
    view.set_running(True)
    for i in range(200):   # 200 steps of 100 ms: 20 s, twice the follow window
        store.add_event(RecordBatch(steps=[step(i, Phase.DECODE, i * 100.0, 100.0, decode=1)]))
    view.refresh()
    lo, hi = view.getPlotItem().getViewBox().viewRange()[0]
    assert hi >= 19_900 and lo > 5_000          # the last ten seconds, not the whole run
    view.getPlotItem().getViewBox().sigRangeChangedManually.emit([True, False])
    assert not view.follow
    store.add_event(RecordBatch(steps=[step(200, Phase.DECODE, 20_000.0, 100.0, decode=1)]))
    view.getPlotItem().getViewBox().setXRange(0, 1000, padding=0)
    view.refresh()
    assert view.getPlotItem().getViewBox().viewRange()[0][1] < 2000   # the user's zoom is kept


def test_lane_segments_split_each_request_into_queue_prefill_and_decode(store):
    seg = lane_segments(store, running=False)
    x0, x1, rows = seg["queued"]
    assert rows.tolist() == [0, 1] and x0.tolist() == [0.0, 5.0] and x1.tolist() == [0.0, 10.0]
    assert seg["prefill"][0].tolist() == [0.0, 10.0] and seg["prefill"][1].tolist() == [10.0, 15.0]
    assert seg["decode"][0].tolist() == [10.0, 15.0] and seg["decode"][1].tolist() == [21.0, 19.0]


def test_lane_of_a_running_request_reaches_the_live_edge():
    store = RunStore()
    for event in two_request_run()[:-1]:
        store.add_event(event)
    seg = lane_segments(store, running=True)
    assert seg["decode"][1].tolist() == [21.0, 21.0]   # both still decoding at the live edge
    assert seg["prefill"][0].tolist() == [0.0, 10.0]   # guessed from the steps that gave the first tokens


def test_lanes_draw_ticks_and_highlight_the_selection(qtbot, store):
    view = LanesView(store)
    qtbot.addWidget(view)
    view.resize(600, 300)
    view.refresh()
    view.getPlotItem().getViewBox().setXRange(0, 25)
    t, rows = view.visible_ticks()
    assert len(t) == 7 and sorted(rows.tolist()) == [0, 0, 0, 0, 1, 1, 1]
    assert not view.items["decode"].path().isEmpty()
    view.select_request(1)
    assert view.highlight.isVisible() and view.highlight.getRegion() == pytest.approx((0.5, 1.5))
    assert "request 1 · finished" in view.hover_text(1.2)
    assert view.hover_text(7.0) == ""


def test_table_rows_sort_numerically_and_selection_names_the_request(qtbot, store):
    table = RequestsTable(store)
    qtbot.addWidget(table)
    table.refresh()
    assert table.model().rowCount() == 2
    e2e = [c[0] for c in COLUMNS].index("end-to-end ms")
    table.sortByColumn(e2e, Qt.SortOrder.AscendingOrder)
    assert table.model().index(0, 0).data() == "1"        # 14 ms before 21 ms
    assert table.model().index(0, e2e).data(SORT_ROLE) == 14.0
    with qtbot.waitSignal(table.requestSelected) as signal:
        table.selectRow(1)
    assert signal.args == [0]


def test_table_grows_as_requests_arrive(qtbot):
    store = RunStore()
    table = RequestsTable(store)
    qtbot.addWidget(table)
    events = two_request_run()
    store.add_event(events[0])
    table.refresh()
    assert table.model().rowCount() == 1
    for event in events[1:]:
        store.add_event(event)
    table.refresh()
    assert table.model().rowCount() == 2
    store.reset()
    table.refresh()
    assert table.model().rowCount() == 0


def test_metrics_panel_shows_the_worked_example(qtbot, store):
    panel = MetricsPanel(store)
    qtbot.addWidget(panel)
    panel.refresh()
    assert panel.values["ttft"].text().startswith("10.0 ms")
    assert "157 / 1,024 tokens" in panel.values["kv"].text()
    assert "TTFT + (output tokens − 1) × TPOT" in panel.example.text()
    assert "12.0×" in panel.example.text()


def test_generated_text_streams_the_first_request_then_the_selected_one(qtbot):
    store = RunStore()
    view = GeneratedText(store)
    qtbot.addWidget(view)
    events = two_request_run()
    for event in events[:2]:
        store.add_event(event)
    view.refresh()
    assert view.toPlainText() == "Hello"
    for event in events[2:]:
        store.add_event(event)
    view.refresh()
    assert view.toPlainText() == "Hello there there there"
    view.show_request(1)
    assert view.toPlainText() == "Hi!!"


def test_throughput_plots_sweep_points_on_log2_and_marks_the_crossover(qtbot):
    store = RunStore()
    view = ThroughputView(store)
    qtbot.addWidget(view)
    view.set_inputs(shape=SHAPES["llama-8b"], run_dtype="float32", profile=find_profile("cpu"), context=512)
    view.refresh()
    assert view.crossover is not None and 1 < view.crossover < 1024
    assert view.crossover_line.isVisible()
    assert view.crossover_line.value() == pytest.approx(math.log2(view.crossover))
    px, py = view.predicted.xData, view.predicted.yData
    assert len(px) > 10 and np.all(np.diff(py) >= -1e-9 * py.max())   # tokens/s never falls with batch
    for b, rate in ((1, 10.0), (2, 19.0), (4, 35.0)):
        store.add_event(SweepPoint("batch", b, 1000 * b / rate, rate, 1.0, 1.0, None, None, None, 1.0, "memory"))
    view.refresh()
    x, y = view.measured.xData, view.measured.yData
    assert x.tolist() == [0.0, 1.0, 2.0] and y.tolist() == [10.0, 19.0, 35.0]
    assert view.getPlotItem().getAxis("bottom").tickStrings([0.0, 3.0, 10.0], 1, 1) == ["1", "8", "1024"]


def test_throughput_says_when_decode_never_turns_compute_bound(qtbot):
    view = ThroughputView(RunStore())
    qtbot.addWidget(view)
    view.set_inputs(shape=SHAPES["tiny"], run_dtype="float32", profile=find_profile("h100-sxm"), context=512)
    view.refresh()
    assert not view.crossover_line.isVisible()
    assert "no crossover" in view.note.text()
    view.set_kind("prompt")
    view.refresh()
    assert "prompt length" in view.getPlotItem().getAxis("bottom").labelText
    assert len(view.predicted.xData) > 10


def test_text_of_a_token_without_a_lane_still_gets_one():
    store = RunStore()
    store.add_event(RecordBatch(tokens=[TokenRecord(5, 0, 3.0)], text={5: "x"}))
    assert store.rows == {5: 0} and store.request_text(5) == "x"


def test_hovering_a_step_shows_its_tooltip(qtbot, store):
    from PySide6 import QtWidgets
    view = TimelineView(store)
    qtbot.addWidget(view)
    view.resize(600, 300)
    view.show()
    view.refresh()
    vb = view.getPlotItem().getViewBox()
    vb.setXRange(0, 25, padding=0)
    scene_pos = vb.mapViewToScene(QtCore.QPointF(12.0, 0.5))
    view.scene().sigMouseMoved.emit(scene_pos)
    qtbot.waitUntil(lambda: "step 1 · prefill" in QtWidgets.QToolTip.text())


def test_a_new_run_with_as_many_steps_as_the_last_is_repainted(qtbot):
    store = RunStore()
    view = TimelineView(store)
    table = RequestsTable(store)
    qtbot.addWidget(view)
    qtbot.addWidget(table)
    for event in two_request_run():
        store.add_event(event)
    view.refresh()
    table.refresh()
    store.reset()
    for event in two_request_run():
        if isinstance(event, RecordBatch):
            for s in event.steps:
                s.start_ms += 1000.0
        store.add_event(event)
    view.refresh()
    table.refresh()
    assert view.curves[Phase.PREFILL].xData[0] == 1000.0
    assert table.model().rowCount() == 2


def test_log_axes_label_round_numbers_only():
    from gui.plot_style import RateAxis
    labels = RateAxis("left").logTickStrings([0.0, math.log10(2), math.log10(3), 3.0, math.log10(5e6)], 1, 1)
    assert labels == ["1", "2", "", "1k", "5M"]
