"""Each view on hand-made records: what it paints, what hovering says, how it follows the run."""
import math

import numpy as np
import pytest
from tests.fakes.gui_fixtures import step, two_request_run

from backend.events import SweepPoint
from backend.models.shapes import SHAPES
from backend.roofline.profiles import find_profile
from backend.records import Phase, RecordBatch, TokenRecord
from gui.views.lanes import LanesView, lane_segments
from gui.views.metrics import MetricsPanel
from PySide6 import QtCore
from PySide6.QtCore import Qt

from gui.views.requests_table import COLUMNS, SORT_ROLE, RequestsTable
from gui.state.run_store import RunStore
from gui.views.text import GeneratedText
from gui.views.throughput import ThroughputView
from gui.views.timeline import TimelineView, follow_page, peak_bars


@pytest.fixture(autouse=True)
def no_thread_left():
    """The GUI tests' leak check (tests/fakes/gui_fixtures.py) without its full collection before each
    test (about half a second each on a loaded machine): these tests build views alone, with no worker
    thread, so the automatic collector frees what earlier tests left on this, the only, thread."""
    from backend.engine.process import live_engines
    from gui.worker import running_threads
    yield
    leaked = running_threads()
    assert not leaked, f"{len(leaked)} worker thread(s) still running after the test"
    engines = live_engines()
    assert not engines, f"engine process(es) {engines} still running after the test"


@pytest.fixture
def store():
    s = RunStore()
    for event in two_request_run():
        s.add_event(event)
    return s


def test_peak_bars_keeps_the_bars_in_view_and_merges_those_sharing_a_pixel():
    start = np.arange(0.0, 100.0)                         # 100 bars of 1 ms, heights 1..5
    end, height = start + 1.0, 1.0 + np.arange(100) % 5
    s, e, h = peak_bars(start, end, height, 10.0, 20.0, px=0.5)   # two pixels a bar: all exact
    assert s.tolist() == list(np.arange(9.0, 21.0)) and h.tolist() == list(height[9:21])
    s, e, h = peak_bars(start, end, height, 0.0, 100.0, px=10.0)  # ten bars a pixel: one bar each
    assert s.tolist() == list(np.arange(0.0, 100.0, 10.0)) and e.tolist() == list(np.arange(10.0, 101.0, 10.0))
    assert h.tolist() == [5.0] * 10                      # the tallest survives
    assert len(peak_bars(start, end, height, 200.0, 300.0, px=1.0)[0]) == 0


def test_the_live_edge_is_followed_in_pages_not_every_frame():
    assert follow_page(300.0) == (0.0, 512.0)            # short runs: doubling pages from 0
    assert follow_page(7_000.0) == (0.0, 10_000.0)
    lo, hi = follow_page(19_000.0)
    assert hi - lo == 10_000.0 and lo + 5_000.0 < 19_000.0 <= lo + 7_500.0
    assert follow_page(19_900.0) == (lo, hi)             # the same page while the edge stays on it
    assert follow_page(20_100.0) == (lo + 2_500.0, hi + 2_500.0)   # then a quarter page on


def test_timeline_paints_one_curve_per_phase_and_describes_the_hovered_step(qtbot, store):
    view = TimelineView(store)
    qtbot.addWidget(view)
    view.refresh()
    assert view.bars[Phase.PREFILL].shown[0].tolist() == [0.0, 10.0]
    assert len(view.bars[Phase.DECODE].shown[0]) == 3
    assert len(view.bars[Phase.MIXED].shown[0]) == 0
    assert not view.bars[Phase.DECODE].path().isEmpty()
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
    assert seg["prefill"][0].tolist() == [0.0, 10.0]   # from the admissions reported with their steps


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
    text = panel.example.text()
    assert "TTFT 10.0 ms + decode 7.5 ms (2 to 3 decode steps, TPOT 2.83 ms on average) = 17.5 ms, decode 43%" in text
    assert "measured" not in text   # a breakdown, not a check of the latency against itself
    assert "12.0×" in text
    assert "-bound" not in text     # no shape known (no ModelLoaded): no bound is made up


def test_metrics_panel_gives_each_phase_the_bound_of_the_devices_roofline(qtbot):
    from backend.events import ModelLoaded
    shape = SHAPES["smollm2-135m"]
    s = RunStore()
    s.add_event(ModelLoaded("smollm2-135m", "cpu", "Test CPU", "float32", "test", False, shape.num_params(),
                            4 * shape.num_params(), 1024, shape))
    for event in two_request_run():
        s.add_event(event)
    panel = MetricsPanel(s)
    qtbot.addWidget(panel)
    panel.refresh()
    text = panel.example.text()
    assert "<b>Roofline</b> — generic CPU profile (run `calibrate` for this machine's)" in text
    # 100- and 50-token prompts against a 25.7 FLOP/byte ridge; decode at one token a step
    assert "prefill: " in text and "above the ridge: <b>compute-bound</b>" in text
    assert "decode: " in text and "below the ridge: <b>memory-bound</b>" in text


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


def test_a_mixture_of_experts_sweep_draws_the_weights_a_step_reads_against_the_prediction(qtbot):
    """Right axis: weights read per step, measured points over the predicted curve, which rises with
    the batch (more experts touched) toward every expert's weights; a dense model keeps step times."""
    from dataclasses import replace
    from backend.roofline.cost import step_cost
    moe = replace(SHAPES["tiny"], num_experts=8, experts_per_token=2)
    store = RunStore()
    view = ThroughputView(store)
    qtbot.addWidget(view)
    view.set_inputs(shape=moe, run_dtype="float32", profile=find_profile("cpu"), context=64)
    for b, read in ((1, 30e6), (4, 60e6)):
        store.add_event(SweepPoint("batch", b, 2.0, 500.0 * b, 1.0, 1.0, None, None, None, None, "memory",
                                   weight_bytes=read, predicted_weight_bytes=read))
    view.refresh()
    assert view.getPlotItem().getAxis("right").labelText == "weights read per step (MB)"
    assert view.step_time.yData.tolist() == [30.0, 60.0]
    predicted = view.predicted_bytes.yData
    assert np.all(np.diff(predicted) >= 0) and predicted[-1] > 1.5 * predicted[0]
    last = round(2 ** view.predicted_bytes.xData[-1])
    assert predicted[-1] == pytest.approx(step_cost(moe, 4, [1] * last, [64] * last).weight_bytes / 1e6)
    assert "mixture of experts" in view.note.text() and "measured 60 MB at batch 4" in view.note.text()
    view.set_inputs(shape=SHAPES["tiny"])
    view.refresh()
    assert view.getPlotItem().getAxis("right").labelText == "decode step (ms)"
    assert view.step_time.yData.tolist() == [2.0, 2.0] and view.predicted_bytes.yData is None


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
    assert view.bars[Phase.PREFILL].shown[0][0] == 1000.0
    assert table.model().rowCount() == 2


def test_log_axes_label_round_numbers_only():
    from gui.views.plot_style import RateAxis
    labels = RateAxis("left").logTickStrings([0.0, math.log10(2), math.log10(3), 3.0, math.log10(5e6)], 1, 1)
    assert labels == ["1", "2", "", "1k", "5M"]


def test_a_chunked_prefill_lane_starts_at_its_admission_while_it_runs():
    """Three chunks of one prompt, one per step: the lane shows the whole prefill before the first token."""
    from backend.events import RequestsArrived
    store = RunStore()
    store.add_event(RequestsArrived([0], [0.0], [96]))
    store.add_event(RecordBatch(steps=[step(0, Phase.PREFILL, 1.0, 4.0, prefill=32)], scheduled={0: 1.0}))
    store.add_event(RecordBatch(steps=[step(1, Phase.PREFILL, 5.0, 4.0, prefill=32)]))
    seg = lane_segments(store, running=True)
    assert seg["queued"][0].tolist() == [0.0] and seg["queued"][1].tolist() == [1.0]
    assert seg["prefill"][0].tolist() == [1.0] and seg["prefill"][1].tolist() == [9.0]   # up to the live edge
    assert len(seg["decode"][0]) == 0
    store.add_event(RecordBatch(steps=[step(2, Phase.PREFILL, 9.0, 4.0, prefill=32)],
                                tokens=[TokenRecord(0, 0, 13.0)]))
    seg = lane_segments(store, running=True)
    assert seg["prefill"][0].tolist() == [1.0] and seg["prefill"][1].tolist() == [13.0]


def test_hovering_older_history_describes_the_merged_bar(qtbot):
    store = RunStore(steps_kept=64, tokens_kept=64, bars_kept=64)
    store.add_event(RecordBatch(steps=[step(i, Phase.DECODE, float(i), 1.0, decode=3) for i in range(1000)]))
    view = TimelineView(store)
    qtbot.addWidget(view)
    assert "steps merged · decode" in view.hover_text(2.5)
    assert view.hover_text(999.5).startswith("step 999 · decode")


def test_metrics_panel_shows_a_remote_servers_own_gauges(qtbot):
    from backend.events import RequestsArrived
    from backend.targets.remote.metrics import ServerMetrics
    store = RunStore()
    store.remote = True
    panel = MetricsPanel(store)
    qtbot.addWidget(panel)
    store.add_event(RequestsArrived([0, 1, 2], [0.0, 0.0, 0.0], [7, 7, 7]))
    panel.refresh()
    assert panel.values["load"].text() == "3 in flight / — (client's view)"
    assert "not published" in panel.values["kv"].text()
    store.add_event(ServerMetrics(10.0, running=5.0, waiting=1.0, kv_usage=0.5))
    panel.refresh()
    assert panel.values["load"].text() == "5 / 1 (server)"
    assert panel.values["kv"].text() == "50% (server)"


def test_the_height_fits_the_bars_in_view_even_when_a_phase_has_none_there(qtbot):
    store = RunStore()
    store.add_event(RecordBatch(steps=[step(0, Phase.PREFILL, 0.0, 10.0, prefill=500)]
                                + [step(i, Phase.DECODE, 10.0 + i, 1.0, decode=4) for i in range(1, 200)]))
    view = TimelineView(store)
    qtbot.addWidget(view)
    view.resize(600, 300)
    view.show()
    view.refresh()
    vb = view.getPlotItem().getViewBox()
    vb.setXRange(100.0, 200.0, padding=0)   # decode steps only: no prefill bar in view
    view.grab()                             # paints, and auto-ranges the height on what is in view
    assert vb.viewRange()[1][1] < np.log10(100)   # fitted to the 4-token steps, not the 500-token prefill
    assert len(view.bars[Phase.PREFILL].shown[0]) == 0 and len(view.bars[Phase.DECODE].shown[0]) > 50


def test_lane_rows_are_labelled_with_whole_numbers_and_grow_in_steps():
    from gui.views.lanes import RowAxis, room_for
    axis = RowAxis("left")
    assert all(v == int(v) for _, values in axis.tickValues(-0.6, 0.6, 300) for v in values)
    assert axis.tickValues(-0.6, 0.6, 300)[0][1] == [0.0]
    # while running, room is made in a few steps as requests arrive; at the end, exactly their rows
    rooms = {room_for(n, running=True) for n in range(1, 200)}
    assert len(rooms) < 30 and all(room_for(n, True) >= n for n in range(1, 200))
    assert room_for(137, running=False) == 137


def test_a_step_tooltip_and_the_metrics_say_what_the_weights_cost_where_measured():
    from gui.state.live_metrics import LiveMetrics
    from gui.views.metrics import weights_text
    from gui.views.timeline import describe_step
    base = dict(step=3, phase=Phase.DECODE, start_ms=1.0, duration_ms=2.0, num_requests=4, num_prefill_requests=0,
                num_decode_requests=4, num_tokens=4, num_prefill_tokens=0, num_decode_tokens=4, context_tokens=40,
                max_context_tokens=10, kv_tokens=40, kv_capacity=100, num_running=4, num_waiting=0)
    assert "weights read" not in describe_step(dict(base, weight_bytes=0, experts_touched=0))
    dense = describe_step(dict(base, weight_bytes=538e6, experts_touched=0))
    assert dense.endswith("weights read 538.0 MB")
    moe = describe_step(dict(base, weight_bytes=61.5e6, experts_touched=12))
    assert moe.endswith("weights read 61.5 MB, 12 experts touched (all layers)")
    assert weights_text(LiveMetrics()) == "—"
    assert weights_text(LiveMetrics(weights_per_step=61.5e6, experts_per_layer=6.0, num_experts=8)) == \
        "61.5 MB (6.0 of 8 experts per layer)"


def test_metrics_panel_names_each_figures_definition_and_shows_the_others_on_request(qtbot):
    from backend.events import RunFinished
    from backend.records import RequestRecord, RequestStatus
    from backend.results.summary import summarize
    from gui.views.definitions import PENDING
    # two streams: one of chunks of 1, 3 and 1 tokens 10 ms apart (the 3-token chunk after 30 ms), one opening
    # with a role-only chunk at 50 ms, its two tokens at 100 and 120 ms; each sent at 0
    requests = [RequestRecord.from_times(request_id=0, status=RequestStatus.FINISHED, prompt_tokens=4, output_tokens=5,
                                         arrival_ms=0.0, first_token_ms=100.0, last_token_ms=140.0, finish_ms=150.0),
                RequestRecord.from_times(request_id=1, status=RequestStatus.FINISHED, prompt_tokens=4, output_tokens=2,
                                         arrival_ms=0.0, first_token_ms=100.0, last_token_ms=120.0, finish_ms=120.0)]
    requests[0].first_chunk_ms, requests[0].first_chunk = 100.0, "content"
    requests[1].first_chunk_ms, requests[1].first_chunk = 50.0, "role"
    tokens = [TokenRecord(0, 0, 100.0), TokenRecord(0, 3, 130.0), TokenRecord(0, 4, 140.0),
              TokenRecord(1, 0, 100.0), TokenRecord(1, 1, 120.0)]
    s = RunStore()
    panel = MetricsPanel(s)
    qtbot.addWidget(panel)
    panel.show()
    titles = [panel.layout().itemAt(0).layout().labelForField(panel.values[k]).text() for k in ("ttft", "tpot")]
    assert titles == ["TTFT, first token (mean/p99)", "TPOT, request mean (mean/p99)"]
    assert "first chunk with text - sent" in panel.values["ttft"].toolTip()
    assert "GuideLLM's ITL" in panel.values["tpot"].toolTip()
    box = panel.definitions
    assert not box.body.isVisible()                 # on request only
    qtbot.mouseClick(box.toggle, Qt.MouseButton.LeftButton)
    assert box.body.isVisible() and box.note.text() == PENDING and not box.table.isVisible()   # still running
    s.add_event(RunFinished("r", summarize([], requests, tokens)))
    panel.refresh()
    assert box.table.isVisible() and box.table.rowCount() == 6
    # by hand: chunk gaps 30, 10 and 20 ms (mean 20); split: 30 over 3 tokens (10, 10, 10), then 10, then 20
    # (5 samples, one a token after the first: mean 60 / 5 = 12)
    assert box.cell("ITL by chunk gap", "mean") == "20.00" and box.cell("ITL split over tokens", "mean") == "12.00"
    assert box.cell("TTFT to first token", "p50") == "100.00" and box.cell("TTFT to first chunk", "p50") == "75.00"
    # per-request means (40 / 4 = 10 and 20) and from the stream's end ((150 - 100) / 4 = 12.5 and 20)
    assert box.cell("TPOT = ITL per-request mean", "mean") == "15.00"
    assert box.cell("TPOT from end-to-end", "mean") == "16.25"
    assert box.tip("ITL split over tokens").endswith("Reported as such by: GenAI-Perf.")
    assert "[headline]" in box.table.item(0, 0).text() and box.table.item(0, 0).font().bold()
    assert "1 of 5 chunks carried several tokens; 1 requests' first chunk carried no text (1 role-only, 0 empty)" \
        in box.note.text()
    assert "TTFT p50 100.00 ms here, 75.00 ms to the first chunk" in box.note.text()
    qtbot.mouseClick(box.toggle, Qt.MouseButton.LeftButton)
    assert not box.body.isVisible()
