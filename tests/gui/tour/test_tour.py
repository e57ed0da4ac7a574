"""Learn › The tour: every step's runs are settings the engine accepts, its finding comes from the
measured records, and the panel runs a step through the real window and navigates."""
import csv
import math
from dataclasses import replace

from tests.fakes.gui_fixtures import RUN_TIMEOUT_MS, step

import pytest
from PySide6 import QtCore, QtGui

from backend.config import ModelChoice
from backend.events import PrecisionPoint, SweepPoint
from backend.records import Phase, RunData
from backend.session import execute
from backend.targets.engine_run import validate
from backend.workload.spec import validate_workload
from gui.tour import measure
from gui.tour.finding import Outcome, ms
from gui.tour.steps import STEPS


@pytest.fixture
def window(inprocess_window):
    """The window with its runs in this process: the tour's steps go through the window's own run path
    either way (tests/gui/test_gui_engine_process.py checks runs through the engine process), and each
    test is spared that process's start (a Python start and torch's import)."""
    return inprocess_window


def _simulated(config):
    """The config run by the simulator: the same scheduler and engine settings, priced, in a moment. The
    simulator refuses speculation and text prompts: such a run runs for real on the bundled model, one thread,
    few tokens."""
    events = []
    if config.spec.is_on or config.batch.prompt is not None:
        config = replace(config, threads=1, batch=replace(config.batch, output_len=12))
    else:
        config = replace(config, simulate=True, profile=config.profile or "cpu", threads=None)
    finished = execute(config, events.append, lambda: False)
    assert not finished.error and not finished.stopped
    return finished, events


@pytest.mark.parametrize("tour_step", STEPS, ids=[s.key for s in STEPS])
def test_every_step_runs_settings_the_engine_accepts_and_measures_them(tour_step):
    outcomes = []
    for name, config in tour_step.runs():
        if config.mode in ("batch", "load") and config.engine.policy != "disaggregated":
            validate(config)
        if config.workload is not None:
            validate_workload(config.workload)
        if not config.simulate:   # the bundled model, measured: what docs/window.md's times are for
            assert config.model.name == "smollm2-135m"
        finished, events = _simulated(config)
        outcomes.append(Outcome(name, finished.data, [e for e in events if isinstance(e, SweepPoint)],
                                [e for e in events if isinstance(e, PrecisionPoint)]))
    finding = tour_step.measure(outcomes)
    assert finding.sentence and "—" not in finding.sentence and "nan" not in finding.sentence
    assert finding.figure.marks, "every step shows what to look at"
    assert finding.rows and all(len(row) == len(finding.header) for row in finding.rows)


def test_the_steps_are_the_ten_claims_in_order():
    assert [s.key for s in STEPS] == ["one-request", "prompt-length", "precision", "batch", "static-continuous",
                                      "chunked", "disaggregated", "worked-example", "tpot-definitions",
                                      "speculation"]
    assert all(s.text and s.look and s.title for s in STEPS)
    # only the datacenter GPU is simulated
    assert [[c.simulate for _, c in s.runs()] for s in STEPS if s.key == "worked-example"] == [[True]]
    assert not any(c.simulate for s in STEPS if s.key != "worked-example" for _, c in s.runs())


def test_the_tpot_step_says_each_definition_from_the_runs_token_times():
    from backend.records import RequestRecord, RequestStatus, TokenRecord
    from gui.tour.definitions import tpot_definitions
    # a 3-token request with gaps of 10 and 30 ms (its mean 20), a 5-token one with four gaps of 10 (its mean 10);
    # the first stream ends 4 ms after its last token
    requests = [RequestRecord.from_times(request_id=0, status=RequestStatus.FINISHED, prompt_tokens=8, output_tokens=3,
                                         arrival_ms=0.0, first_token_ms=50.0, last_token_ms=90.0, finish_ms=94.0),
                RequestRecord.from_times(request_id=1, status=RequestStatus.FINISHED, prompt_tokens=8, output_tokens=5,
                                         arrival_ms=0.0, first_token_ms=60.0, last_token_ms=100.0, finish_ms=100.0)]
    tokens = [TokenRecord(0, i, t) for i, t in enumerate((50.0, 60.0, 90.0))] + \
             [TokenRecord(1, i, 60.0 + 10.0 * i) for i in range(5)]
    finding = tpot_definitions([Outcome("continuous", RunData(requests=requests, tokens=tokens))])
    # by hand: per request 20 and 10, their mean 15; pooled (10 + 30 + 4 x 10) / 6 = 13.3; to the end (44 / 2 + 10) / 2
    assert "mean of each request's own mean gap (this window's TPOT, GuideLLM's ITL) is 15.0 ms" in finding.sentence
    assert "the mean over every gap pooled (vLLM's and SGLang's mean ITL) is 13.3 ms" in finding.sentence
    assert "its 5-token request weighs 4 times where the 3-token one weighs 2" in finding.sentence
    assert "vLLM's own TPOT runs to the stream's end: 16.0 ms" in finding.sentence
    assert "Here each streamed chunk carried one token" in finding.sentence
    assert finding.rows == [[0, 3, 20.0, 22.0, 30.0], [1, 5, 10.0, 10.0, 10.0]]
    assert finding.figure.marks[0].y == 20.0 and finding.figure.marks[0].x0 == 3


def test_one_request_marks_the_prefill_and_decode_spans_of_the_records():
    steps = [step(0, Phase.PREFILL, 0.0, 212.0, prefill=128)] + \
            [step(i, Phase.DECODE, 212.0 + 24.0 * (i - 1), 24.0, decode=1) for i in range(1, 5)]
    finding = measure.one_request([Outcome("one", RunData(steps=steps))])
    prefill, decode = finding.figure.marks
    assert (prefill.x0, prefill.x1) == (0.0, 212.0)
    assert (decode.x0, decode.x1) == (212.0, 212.0 + 24.0 * 4)
    assert finding.sentence.startswith("Prefill took 212 ms for 128 prompt tokens (1.66 ms a token); each decode "
                                       "step took 24.0 ms")
    assert "the 4 decode steps were 31% of the request's 308 ms" in finding.sentence


def _on_tiny(config, **batch):
    """The config on the `tiny` model (seconds, not a minute): the same panel and window path."""
    return replace(config, model=ModelChoice("tiny", "cpu"), batch=replace(config.batch, **batch))


def _run_step(qtbot, panel, window, runs: int):
    """Press Run this step; each of its runs ends with the window's runFinished."""
    with qtbot.waitSignal(panel.stepFinished, timeout=RUN_TIMEOUT_MS * runs) as done:
        with qtbot.waitSignal(window.runFinished, timeout=RUN_TIMEOUT_MS):
            qtbot.mouseClick(panel.run_button, QtCore.Qt.MouseButton.LeftButton)
    return done.args[1]


def test_a_step_runs_through_the_window_and_its_marks_and_sentence_come_from_the_records(qtbot, window, tmp_path):
    from gui.tour.panel import TourPanel
    (name, config), = STEPS[0].runs()
    tour_step = replace(STEPS[0], runs=lambda: [(name, _on_tiny(config, prompt_len=16, output_len=6))])
    panel = TourPanel(window, [tour_step, STEPS[1]])
    qtbot.addWidget(panel)
    panel.show()
    finding = _run_step(qtbot, panel, window, 1)
    prefill = [s for s in window.store.to_run_data().steps if s.phase is Phase.PREFILL]
    decode = [s for s in window.store.to_run_data().steps if s.phase is Phase.DECODE]
    assert len(prefill) == 1 and len(decode) == 5
    region = finding.figure.marks[0]
    assert (region.x0, region.x1) == (prefill[0].start_ms, prefill[0].start_ms + prefill[0].duration_ms)
    assert f"Prefill took {ms(prefill[0].duration_ms)} for 16 prompt tokens" in finding.sentence
    assert panel.sentence.text() == "Measured here: " + finding.sentence
    assert "took" in panel.state.text() and panel.run_button.isEnabled()
    # the highlighted span is on the figure, over the measured prefill bar
    spans = [i for i in panel.plot.getPlotItem().items if type(i).__name__ == "LinearRegionItem"]
    assert [tuple(s.getRegion()) for s in spans][0] == pytest.approx((region.x0, region.x1))
    table, picture = panel.export_step(tmp_path)
    rows = list(csv.reader(table.open()))
    assert rows[0] == finding.header and len(rows) == 1 + 6
    assert not QtGui.QImage(str(picture)).isNull()


def test_a_step_of_several_runs_measures_each_in_turn(qtbot, window):
    from gui.tour.panel import TourPanel
    runs = [(f"prompt {n}", _on_tiny(c, prompt_len=n, output_len=4)) for n, (_, c) in zip((8, 32), STEPS[1].runs())]
    tour_step = replace(STEPS[1], runs=lambda: runs)
    panel = TourPanel(window, [tour_step])
    qtbot.addWidget(panel)
    finding = _run_step(qtbot, panel, window, 2)
    assert [row[0] for row in finding.rows] == [8, 32]
    assert all(math.isfinite(v) for row in finding.rows for v in row[1:])
    assert finding.sentence.startswith("From 8 to 32 prompt tokens")


def test_the_panel_goes_forward_and_back_and_says_a_step_has_not_run(qtbot, window):
    window.findChild(QtGui.QAction, "tourAction").trigger()
    panel = window.tools.tour
    assert panel.isVisible() and panel.index == 0
    assert not panel.previous_button.isEnabled() and not panel.export_button.isEnabled()
    assert "not yet" in panel.sentence.text()
    for i in range(1, len(STEPS)):
        qtbot.mouseClick(panel.next_button, QtCore.Qt.MouseButton.LeftButton)
        assert panel.index == i and panel.heading.text().startswith(f"{i + 1} of {len(STEPS)}")
        assert panel.text.text() == STEPS[i].text
    assert not panel.next_button.isEnabled()
    qtbot.mouseClick(panel.previous_button, QtCore.Qt.MouseButton.LeftButton)
    assert panel.index == len(STEPS) - 2 and panel.next_button.isEnabled()
    window.close()   # the tour goes with the window
    assert not panel.isVisible()


def test_a_step_is_refused_while_the_window_runs(qtbot, window):
    from gui.tour.panel import TourPanel
    panel = TourPanel(window)
    qtbot.addWidget(panel)
    window.runs.running = True
    with qtbot.waitSignal(panel.stepFailed) as failed:
        panel.run_step()
    window.runs.running = False
    assert "a run is going" in failed.args[1] and panel.running_step is None


def test_the_tour_lives_in_the_window_its_figure_a_central_view_with_the_room(qtbot, window):
    window.findChild(QtGui.QAction, "tourAction").trigger()
    panel = window.tools.tour
    qtbot.waitUntil(lambda: panel.plot.isVisible())
    assert window.view_tabs.currentWidget() is panel.page and panel.dock.isVisible()
    assert panel.dock.parentWidget() is window   # a dock of the window, not a window of its own
    assert panel.plot.height() >= window.height() / 3
    assert window.notes.stack.currentWidget() is window.notes.pages[panel.page]   # its note beside, not under


def test_a_roofline_step_measures_this_machine_first_and_shows_its_view_while_it_runs(qtbot, window, monkeypatch):
    from backend.roofline.calibrate import write_profile
    from backend.roofline.profiles import LOCAL_KEY, find_profile, local_profile_path
    from gui.tour import panel as tour_panel
    assert not local_profile_path().is_file()   # the test's own configuration folder: never calibrated
    asked = []

    def calibrate(device):   # the window's calibration, answered at once with the generic figures
        asked.append(device)
        profile = replace(find_profile("cpu"), key=LOCAL_KEY, name="This machine: a test CPU (1 threads)",
                          measured=True)
        path = write_profile(profile)
        QtCore.QTimer.singleShot(0, lambda: window.runs.calibrated.emit(profile, str(path)))
    monkeypatch.setattr(window.runs, "calibrate", calibrate)
    (name, config), = STEPS[0].runs()
    tour_step = replace(STEPS[0], runs=lambda: [(name, _on_tiny(config, prompt_len=8, output_len=3))],
                        view="throughput", uses_roofline=True)
    panel = tour_panel.TourPanel(window, [tour_step])
    seen = []
    window.runs.launched.connect(lambda *_: QtCore.QTimer.singleShot(0, lambda: seen.append(
        window.view_tabs.currentWidget())))
    with qtbot.waitSignal(panel.stepFinished, timeout=RUN_TIMEOUT_MS):
        panel.run_step()
        assert asked and "Measuring this machine first" in panel.state.text()
    assert asked == [window.controls.device_combo.currentText()]
    assert seen == [window.throughput_page]                   # the step's view while its run went
    assert window.view_tabs.currentWidget() is panel.page     # then its figure
    panel.run_step()   # asked once a session: the next Run goes straight to its runs
    assert len(asked) == 1
    qtbot.waitUntil(lambda: panel.running_step is None, timeout=RUN_TIMEOUT_MS)


@pytest.mark.parametrize("size", [(1366, 768), (1920, 1080)])
def test_the_tour_figure_keeps_its_least_height_and_a_third_of_the_window(qtbot, window, size):
    import pyqtgraph as pg
    from gui.layout import MIN_PLOT_AREA
    from PySide6 import QtWidgets
    window.resize(*size)
    window.tools.open_tour()
    panel = window.tools.tour
    QtWidgets.QApplication.processEvents()
    assert window.size() == QtCore.QSize(*size)   # the tour's dock and page did not push the window past it
    plots = [p for p in window.view_tabs.currentWidget().findChildren(pg.PlotWidget) if p.isVisible()]
    assert plots == [panel.plot]
    assert panel.plot.height() >= panel.plot.minimumHeight() > 0
    assert panel.plot.getPlotItem().getViewBox().sceneBoundingRect().height() >= MIN_PLOT_AREA
    share = panel.plot.width() * panel.plot.height() / (size[0] * size[1])
    assert share >= 1 / 3, share
