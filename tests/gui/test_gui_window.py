"""The main window driving the real worker thread and the real engine on the `tiny` model."""
import json
from tests.fakes.model_homes import homes  # noqa: F401
from tests.fakes.gui_fixtures import RUN_TIMEOUT_MS, use_tiny, step, run_to_end
from tests.fakes.llama_server import FakeServer, free_port

import pytest

from backend.summary import Summary
from PySide6 import QtCore, QtGui, QtWidgets

from backend.config import BatchRun, ModelChoice, RunConfig, SweepSpec
from backend.events import Progress, RequestsArrived, RunFinished, SweepPoint
from backend.results.export import read_run
from backend.roofline.profiles import LOCAL_KEY, GpuProfile
from backend.records import Phase, RecordBatch, RequestStatus, TokenRecord
from backend.session import execute
from backend.sweeps.points import read_points
from gui.views.lanes import lane_segments
from gui.main_window import REMOTE_MESSAGE, MainWindow, run_app
from gui.worker import RunWorker



def no_run(config, emit, should_stop):
    raise AssertionError("this test starts no run")


@pytest.fixture
def idle_window(qtbot):
    """A window for a test that starts no run: a worker without an engine process, so none is started
    ahead for the bundled model (torch's import and the model's load) only to be ended at the close."""
    w = MainWindow(worker=RunWorker(run=no_run))
    qtbot.addWidget(w)
    w.show()
    return w


def test_a_run_fills_the_timeline_lanes_table_and_metrics(qtbot, window):
    use_tiny(window)
    result = run_to_end(qtbot, window)
    assert not result.error and not result.stopped
    assert not window.running and window.controls.run_button.isEnabled()
    # the step strip: one prefill bar, then a decode bar per further token
    assert len(window.timeline.bars[Phase.PREFILL].shown[0]) == 1
    assert len(window.timeline.bars[Phase.DECODE].shown[0]) == 5
    assert not window.lanes.items["prefill"].path().isEmpty()
    assert not window.lanes.items["decode"].path().isEmpty()
    assert window.table.model().rowCount() == 2
    assert window.table.model().index(0, 1).data() == "finished"
    assert window.metrics.values["ttft"].text() != "— / —"
    # where the time goes: the phases' bounds from the engine process's ModelLoaded shape and the steps
    example = window.metrics.example.text()
    assert "<b>Roofline</b>" in example and "prefill: " in example and "decode: " in example
    assert "-bound</b>" in example
    assert window.status.labels["model"].text() == "model: tiny"
    assert window.status.labels["dtype"].text() == "dtype: float32"
    # the tiny model's byte tokenizer decodes its (random) tokens into some text
    assert window.text.toPlainText() == window.store.request_text(0)


def test_stop_mid_run_ends_it_within_a_second_and_keeps_the_records(qtbot, window, tmp_path):
    use_tiny(window, prompt_len="16", output_len="2000", batch="1")
    window.controls.form.ignore_eos.setChecked(True)
    qtbot.mouseClick(window.controls.run_button, QtCore.Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: len(window.store.steps) >= 5, timeout=RUN_TIMEOUT_MS)
    assert window.controls.stop_button.isEnabled()
    with qtbot.waitSignal(window.runFinished, timeout=1_000) as done:
        qtbot.mouseClick(window.controls.stop_button, QtCore.Qt.MouseButton.LeftButton)
    assert done.args[0].stopped
    window.repaint_views()
    record = window.store.records[0]
    assert record.finish_reason == "stopped by user" and record.output_tokens < 2000
    assert window.table.model().rowCount() == 1
    assert window.files.export_csv(str(tmp_path / "partial"))
    assert len(read_run(tmp_path / "partial").steps) == len(window.store.steps)


def test_export_csv_writes_what_the_cli_reader_accepts(qtbot, window, tmp_path):
    use_tiny(window)
    run_to_end(qtbot, window)
    assert window.files.export_csv(str(tmp_path / "out"))
    run = read_run(tmp_path / "out")
    assert len(run.steps) == 6 and len(run.requests) == 2 and len(run.tokens) == 12
    assert run.info.model == "tiny"
    assert (tmp_path / "out" / "trace.json").is_file()


def test_export_with_nothing_to_export_says_so(idle_window, tmp_path):
    window = idle_window
    assert not window.files.export_csv(str(tmp_path / "empty"))
    assert "nothing to export" in window.last_error
    assert not (tmp_path / "empty").exists()


def test_open_run_shows_a_folder_written_by_the_cli(qtbot, window, tmp_path):
    config = RunConfig(mode="batch", model=ModelChoice("tiny", "cpu"), batch=BatchRun(prompt_len=8, output_len=5,
                                                                                      batch=3),
                       out_dir=str(tmp_path / "cli"))
    execute(config, lambda event: None, lambda: False)
    assert window.files.open_run(str(tmp_path / "cli"))
    window.repaint_views()
    assert window.table.model().rowCount() == 3
    assert len(window.timeline.bars[Phase.DECODE].shown[0]) == 4
    assert window.status.labels["model"].text() == "model: tiny"
    assert window.metrics.values["done"].text() == "3 / 3"
    assert window.throughput.shape is not None     # the run's shape drives the prediction


def test_open_run_of_an_incomplete_folder_names_what_is_missing(idle_window, tmp_path):
    window = idle_window
    (tmp_path / "half").mkdir()
    assert not window.files.open_run(str(tmp_path / "half"))
    assert "missing" in window.last_error and "steps.csv" in window.last_error


def test_a_worker_error_is_shown_and_the_next_run_works(qtbot, window, tmp_path):
    (tmp_path / "no-config").mkdir()
    use_tiny(window)
    window.controls.select_model(str(tmp_path / "no-config"))
    assert window.controls.run_button.isEnabled()   # a folder that exists passes the typed check
    with qtbot.waitSignal(window.runFailed, timeout=RUN_TIMEOUT_MS) as failed:
        qtbot.mouseClick(window.controls.run_button, QtCore.Qt.MouseButton.LeftButton)
    assert "config.json" in failed.args[0]
    assert window.last_error == failed.args[0]
    assert window.error_box is not None and window.error_box.isVisible()
    assert "config.json" in window.statusBar().currentMessage()
    window.error_box.close()
    window.controls.select_model("tiny")
    result = run_to_end(qtbot, window)
    assert not result.error and window.table.model().rowCount() == 2


def test_fields_are_checked_as_typed(qtbot, window):
    field = window.controls.form.fields["batch"]["output_len"]
    qtbot.keyClicks(field.edit, "x")   # "64x"
    assert not window.controls.run_button.isEnabled()
    assert "whole number" in field.error_label.text() and not field.error_label.isHidden()
    field.setText("0")
    assert "at least 1" in field.error
    field.setText("12")
    assert window.controls.run_button.isEnabled() and field.error_label.isHidden()
    window.controls.hub_field.setText("not a model")
    assert not window.controls.run_button.isEnabled()
    assert "hub id" in window.controls.problem_label.text()


def test_workload_fields_are_checked_together(idle_window):
    window = idle_window
    form = window.controls.form
    form.set_kind("load")
    form.preset_combo.setCurrentText("custom")
    form.fields["load"]["prompt_len"].setText("64:16")
    assert any("min 64 > max 16" in e for e in form.errors())
    form.fields["load"]["prompt_len"].setText("16:64")
    assert form.errors() == []


def test_selecting_a_request_highlights_its_lane_and_shows_its_text(qtbot, window):
    use_tiny(window, batch="3")
    run_to_end(qtbot, window)
    window.table.selectRow(2)
    assert window.selected_request == 2
    assert window.lanes.highlight.isVisible()
    assert window.text.toPlainText() == window.store.request_text(2)
    assert window.text_dock.windowTitle() == "Generated text — request 2"
    window.lanes.requestClicked.emit(1)   # a click on lane 1 selects its table row
    assert window.table.currentIndex().row() == 1


def test_save_plot_writes_a_png(qtbot, window, tmp_path):
    use_tiny(window)
    run_to_end(qtbot, window)
    for plot in (window.timeline, window.lanes, window.throughput):
        path = tmp_path / f"{plot.objectName()}.png"
        assert window.files.save_plot(str(path), plot)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_workload_through_the_load_driver(qtbot, window):
    use_tiny(window)
    form = window.controls.form
    form.set_kind("load")
    form.preset_combo.setCurrentText("custom")
    form.arrival_combo.setCurrentText("burst")
    f = form.fields["load"]
    f["requests"].setText("5")
    f["prompt_len"].setText("8:24")
    f["output_len"].setText("4")
    f["max_batch"].setText("2")
    form.policy_combo.setCurrentText("continuous")
    result = run_to_end(qtbot, window)
    assert result.summary.num_finished == 5
    assert window.table.model().rowCount() == 5
    statuses = {window.store.lane(r)["status"] for r in range(5)}
    assert statuses == {RequestStatus.FINISHED}
    # with two slots and five requests, some waited in the queue, and their lanes show it
    x0, x1, _ = lane_segments(window.store, running=False)["queued"]
    assert (x1 - x0).max() > 0


class FirstPointSpy(QtCore.QObject):
    """Lives in the window's thread and notes what the window knew when the first sweep point came."""

    def __init__(self, window: MainWindow):
        super().__init__()
        self.window = window
        self.model_at_first_point = None
        self.points = 0

    @QtCore.Slot(object)
    def on_event(self, event) -> None:
        if isinstance(event, SweepPoint):
            if self.points == 0:
                self.model_at_first_point = self.window.store.model
            self.points += 1


def test_a_batch_sweep_streams_points_into_the_throughput_plot(qtbot, window):
    use_tiny(window)
    form = window.controls.form
    form.set_kind("sweep-batch")
    form.fields["sweep-batch"]["batches"].setText("1,2,4")
    form.fields["sweep-batch"]["context"].setText("32")
    form.fields["sweep-batch"]["steps"].setText("2")
    spy = FirstPointSpy(window)
    window.worker.event.connect(spy.on_event)   # queued to this thread, after the window's own slot
    run_to_end(qtbot, window)
    # the sweep announced its model before its first point: status bar and roofline were set from the start
    assert spy.model_at_first_point is not None and spy.model_at_first_point.name == "tiny"
    x, y = window.throughput.measured.xData, window.throughput.measured.yData
    assert x.tolist() == [0.0, 1.0, 2.0] and all(v > 0 for v in y)
    assert len(window.throughput.predicted.xData) > 0
    # a batch of the same model afterwards keeps the sweep on the throughput plot
    form.set_kind("batch")
    run_to_end(qtbot, window)
    assert window.throughput.measured.xData.tolist() == [0.0, 1.0, 2.0]
    assert window.throughput.context == 32   # the prediction stays at the context the points were measured at


def test_closing_mid_run_stops_the_worker_and_joins_its_thread(qtbot, tmp_path):
    w = MainWindow()
    w.show()
    use_tiny(w, output_len="2000", batch="1")
    w.controls.form.ignore_eos.setChecked(True)
    w.start_run()
    qtbot.waitUntil(lambda: len(w.store.steps) >= 3, timeout=RUN_TIMEOUT_MS)
    w.close()
    assert not w.worker_thread.thread.isRunning()


def test_run_app_opens_with_the_choices_made_and_autostarts(qtbot, monkeypatch):
    seen = {}

    def fake_exec(app):
        w = next(x for x in QtWidgets.QApplication.topLevelWidgets() if isinstance(x, MainWindow) and x.isVisible())
        seen["model"], seen["profile"] = w.controls.model_name(), w.controls.profile_combo.currentData()
        qtbot.waitUntil(lambda: w.running, timeout=5_000)
        qtbot.waitUntil(lambda: not w.running, timeout=RUN_TIMEOUT_MS)
        seen["steps"] = len(w.store.steps)
        w.close()
        return 0

    monkeypatch.setattr(QtWidgets.QApplication, "exec", fake_exec)
    assert run_app(model="tiny", profile="h100-sxm", autostart=True) == 0
    assert seen["model"] == "tiny" and seen["profile"] == "h100-sxm" and seen["steps"] > 0


def test_run_app_refuses_an_unknown_profile(capsys):
    assert run_app(profile="no-such-gpu") == 2
    assert "unknown profile" in capsys.readouterr().err


def test_calibration_from_the_window_adds_and_selects_this_machine(qtbot):
    def measure(device, progress):
        progress("memory bandwidth (copy)", 0.7)
        return GpuProfile(key=LOCAL_KEY, name="Test CPU", vendor="test", memory_gb=8.0, bandwidth_gbs=20.0,
                          tflops={"fp32": 0.5}, source="measured in a test", measured=True)

    w = MainWindow(worker=RunWorker(measure=measure))
    qtbot.addWidget(w)
    w.show()
    w.runs.calibrate("cpu")
    assert w.running and not w.controls.run_button.isEnabled()
    qtbot.waitUntil(lambda: not w.running, timeout=10_000)
    assert w.controls.profile_combo.currentData() == LOCAL_KEY
    assert w.controls.profile_combo.currentText() == "Test CPU (measured)"
    assert "Calibrated Test CPU" in w.statusBar().currentMessage()


def test_widgets_and_actions_carry_their_automation_names(window):
    names = {"modelCombo": QtWidgets.QComboBox, "deviceCombo": QtWidgets.QComboBox,
             "dtypeCombo": QtWidgets.QComboBox, "profileCombo": QtWidgets.QComboBox,
             "runButton": QtWidgets.QPushButton, "stopButton": QtWidgets.QPushButton,
             "requestsTable": QtWidgets.QTableView, "generatedText": QtWidgets.QPlainTextEdit,
             "metricsPanel": QtWidgets.QWidget, "timelinePlot": QtWidgets.QGraphicsView,
             "requestLanesPlot": QtWidgets.QGraphicsView, "throughputPlot": QtWidgets.QGraphicsView}
    for name, cls in names.items():
        assert window.findChild(cls, name) is not None, name
    shortcuts = {"exportCsvAction": "Ctrl+E", "openRunAction": "Ctrl+O", "savePlotAction": None,
                 "runAction": "Ctrl+R", "stopAction": "Esc"}
    for name, keys in shortcuts.items():
        action = window.findChild(QtGui.QAction, name)
        assert action is not None, name
        if keys:
            assert action.shortcut().toString() == keys
    # the device list offers only what this machine has, and the dtypes what that device runs
    devices = [window.controls.device_combo.itemText(i) for i in range(window.controls.device_combo.count())]
    assert devices[:2] == ["auto", "cpu"]
    window.controls.device_combo.setCurrentText("cpu")
    dtypes = [window.controls.dtype_combo.itemText(i) for i in range(window.controls.dtype_combo.count())]
    assert dtypes[0] == "auto" and "float32" in dtypes


def test_stop_and_run_shortcuts_drive_the_window(qtbot, window):
    use_tiny(window, output_len="2000", batch="1")
    window.controls.form.ignore_eos.setChecked(True)
    window.findChild(QtGui.QAction, "runAction").trigger()
    qtbot.waitUntil(lambda: len(window.store.steps) >= 3, timeout=RUN_TIMEOUT_MS)
    with qtbot.waitSignal(window.runFinished, timeout=RUN_TIMEOUT_MS) as done:
        window.findChild(QtGui.QAction, "stopAction").trigger()
    assert done.args[0].stopped


def test_saving_a_plot_into_a_missing_folder_says_so(idle_window, tmp_path):
    window = idle_window
    assert not window.files.save_plot(str(tmp_path / "missing" / "plot.png"))
    assert "could not save" in window.last_error


def test_progress_shows_long_work_in_the_status_bar(idle_window):
    window = idle_window
    bar = window.status.progress
    window.runs.take_event(Progress("loading smollm2-135m", None))
    assert not bar.isHidden() and (bar.minimum(), bar.maximum()) == (0, 0)   # busy
    window.runs.take_event(Progress("sweep batch: 8", 0.5))
    assert bar.value() == 500 and "sweep batch: 8" in bar.format()
    window.runs.take_event(Progress("running", None))
    assert bar.isHidden()


def use_remote(w: MainWindow, url: str, model: str = "ok") -> None:
    """A short constant-rate workload (about a second: the server's /metrics is read once a second)."""
    w.controls.select_remote(url, model)
    form = w.controls.form
    form.preset_combo.setCurrentText("custom")
    form.arrival_combo.setCurrentText("constant")
    form.source_combo.setCurrentText("synthetic")
    f = form.fields["load"]
    f["requests"].setText("5")
    f["rate"].setText("4")
    f["prompt_len"].setText("8")
    f["output_len"].setText("5")


def test_a_remote_run_fills_lanes_and_table_and_the_strip_says_why_it_is_empty(qtbot, window, tmp_path):
    with FakeServer() as server:
        use_remote(window, server.url)
        window.controls.key_edit.setText("sk-secret-123")
        assert window.controls.form.kind() == "load" and window.controls.errors() == []
        assert not window.controls.device_combo.isVisibleTo(window)   # a server has no device or dtype here
        result = run_to_end(qtbot, window)
    assert not result.error and result.summary.num_finished == 5
    assert server.auth[0] == "Bearer sk-secret-123"
    assert window.table.model().rowCount() == 5
    assert {window.store.lane(r)["status"] for r in range(5)} == {RequestStatus.FINISHED}
    assert not window.lanes.items["prefill"].path().isEmpty()   # sent -> first token
    assert not window.lanes.items["decode"].path().isEmpty()    # streaming
    assert window.timeline.empty_label.isVisible()
    assert window.timeline.empty_label.toPlainText() == REMOTE_MESSAGE
    assert window.metrics.values["load"].text().endswith("(server)")
    assert window.metrics.values["kv"].text() == "50% (server)"
    assert window.text.toPlainText() == "Hello from the fake server"
    assert window.status.labels["device"].text().startswith("device: remote (http://127.0.0.1:")
    # the same files as a local run, and the key in none of them
    assert window.files.export_csv(str(tmp_path / "remote"))
    assert len(read_run(tmp_path / "remote").requests) == 5
    for path in (tmp_path / "remote").iterdir():
        assert "sk-secret-123" not in path.read_text(encoding="utf-8"), path.name


def test_a_server_that_is_not_there_gives_one_message_and_the_app_keeps_working(qtbot, window):
    use_remote(window, f"http://127.0.0.1:{free_port()}/v1")
    result = run_to_end(qtbot, window)
    assert result.error and "every request failed" in window.last_error
    assert window.error_box is not None and window.error_box.isVisible()
    rows = window.table.model().rowCount()
    assert rows > 0 and {window.store.lane(r)["status"] for r in range(rows)} == {RequestStatus.ERROR}
    window.error_box.close()
    use_tiny(window)
    result = run_to_end(qtbot, window)
    assert not result.error and window.table.model().rowCount() == 2
    assert not window.timeline.empty_label.isVisible()
    assert len(window.timeline.bars[Phase.DECODE].shown[0]) > 0


def test_the_api_key_comes_from_the_environment_and_is_masked(qtbot, monkeypatch):
    monkeypatch.setenv("PHASESCOPE_API_KEY", "sk-from-env")
    w = MainWindow()
    qtbot.addWidget(w)
    edit = w.findChild(QtWidgets.QLineEdit, "apiKeyEdit")
    assert edit.text() == "sk-from-env"
    assert edit.echoMode() == QtWidgets.QLineEdit.EchoMode.Password
    w.controls.select_remote("127.0.0.1:8000", "served")
    assert w.controls.endpoint().url == "http://127.0.0.1:8000/v1"   # a bare host:port gets /v1
    assert w.controls.build_config().endpoint.api_key == "sk-from-env"
    w.controls.url_field.setText("ftp://host")
    assert not w.controls.run_button.isEnabled() and "http(s) URL" in w.controls.url_field.error


def test_a_long_run_exports_every_step_though_the_window_keeps_only_the_newest(qtbot, tmp_path, monkeypatch):
    # the window's store keeps its newest 4,096 steps and tokens here (65,536 and 262,144 in the app): the
    # same dropping, past a tenth of the rows the app's limits would need
    from gui.state.run_store import BARS_KEPT, RunStore
    monkeypatch.setattr(RunStore.__init__, "__defaults__", (4096, 4096, BARS_KEPT))
    n = 10_000

    def long_run(config, emit, should_stop):
        emit(RequestsArrived([0], [0.0], [8]))
        for start in range(0, n, 500):
            steps = range(start, start + 500)
            emit(RecordBatch(steps=[step(i, Phase.DECODE, i * 0.2, 0.2, decode=1) for i in steps],
                             tokens=[TokenRecord(0, i, i * 0.2 + 0.2) for i in steps]))
        return RunFinished("long", Summary(num_steps=n))

    w = MainWindow(worker=RunWorker(run=long_run))
    qtbot.addWidget(w)
    with qtbot.waitSignal(w.runFinished, timeout=RUN_TIMEOUT_MS):
        w.start_run()
    assert w.store.num_steps == n and len(w.store.steps) < n
    assert w.files.export_csv(str(tmp_path / "long"))
    for name in ("steps.csv", "tokens.csv"):
        with open(tmp_path / "long" / name, encoding="utf-8") as f:
            assert sum(1 for _ in f) == n + 1, name    # a header and every row
    assert len(read_run(tmp_path / "long").requests) == 1
    trace = json.loads((tmp_path / "long" / "trace.json").read_text())["traceEvents"]
    assert sum(1 for e in trace if e["ph"] == "X" and e["pid"] == 1) == n   # every step, read from the copy


def test_open_run_of_a_sweep_folder_restores_its_points(qtbot, window, tmp_path):
    config = RunConfig(mode="sweep-prompt", model=ModelChoice("tiny", "cpu"),
                       sweep=SweepSpec(kind="prompt", lengths=[8, 16], steps=1, warmup=0),
                       out_dir=str(tmp_path / "sweep"))
    execute(config, lambda event: None, lambda: False)
    assert window.files.open_run(str(tmp_path / "sweep"))
    window.repaint_views()
    assert window.throughput.measured.xData.tolist() == [3.0, 4.0]    # log2 of the prompt lengths
    assert window.view_tabs.currentWidget() is window.throughput.parentWidget()
    assert window.view_tabs.tabText(1) == "Throughput vs prompt length"
    assert window.files.export_csv(str(tmp_path / "again"))
    assert [p.x for p in read_points(tmp_path / "again")[1]] == [8, 16]


def test_the_model_list_shows_the_models_on_the_disk_and_greys_what_cannot_run(homes, qtbot, idle_window):
    """The models in the fake home's caches (tests/fakes/model_homes.py) are in the model list, each
    with where it is and its size; the ones this engine cannot run are there but disabled, with why."""
    window = idle_window
    combo = window.controls.model_combo
    items = {combo.itemText(i): i for i in range(combo.count())}
    ollama = next(t for t in items if t.startswith("qwen3-tiny:latest (Ollama, "))
    deepseek = next(t for t in items if t.startswith("deepseek-tiny.gguf (llama.cpp cache"))
    assert deepseek.endswith("- cannot run here") and not combo.model().item(items[deepseek]).isEnabled()
    assert "architecture deepseek2 is not supported yet" in combo.itemData(items[deepseek], QtCore.Qt.ItemDataRole.ToolTipRole)
    assert combo.model().item(items[ollama]).isEnabled()
    assert any(t.startswith("someone/tiny-llama (Hugging Face cache") for t in items)
    window.controls.select_model(combo.itemData(items[ollama]))
    assert window.controls.model_name().endswith("sha256-0123abcd")   # the blob, which --model takes as it is


def test_a_folder_opened_in_the_window_is_remembered_and_its_models_listed(homes, tmp_path, qtbot, window):
    """Open folder… on a folder of models: its GGUF is listed and selected, the folder is remembered
    (the next window lists it too); a folder without a model is refused in one line."""
    import shutil
    from backend.loaders import discover
    from gui.panels.controls import ControlsPanel
    extra = tmp_path / "more-models"
    extra.mkdir()
    shutil.copy(homes["OLLAMA_MODELS"] / "blobs" / "sha256-0123abcd", extra / "qwen3-copy.gguf")
    window.controls.open_model_folder(str(extra))
    assert window.controls.model_name() == str(extra / "qwen3-copy.gguf")
    assert extra.resolve() in discover.added_folders()
    later = ControlsPanel()
    qtbot.addWidget(later)
    combo = later.model_combo
    assert str(extra / "qwen3-copy.gguf") in [combo.itemData(i) for i in range(combo.count())]
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    with qtbot.waitSignal(window.controls.inputRejected) as rejected:
        window.controls.open_model_folder(str(empty))
    assert rejected.args[0] == f"{empty}: no model this engine runs in it"
    assert window.controls.model_name() == str(extra / "qwen3-copy.gguf")


@pytest.mark.parametrize("variant", ["qwen3-moe", "gemma3"])
def test_a_gemma_or_moe_folder_runs_in_the_window_and_an_moe_shows_its_experts(qtbot, window, tmp_path, variant):
    """The window's engine process runs the new families from a folder; for a mixture of experts the
    step tooltip and the metrics panel say what each decode step read and how many experts it touched."""
    from tests.models.test_families import FAMILIES
    from tests.models.test_models import VARIANTS, reference_pair
    VARIANTS.setdefault(variant, FAMILIES[variant])
    hf, _, shape = reference_pair(variant)
    hf.save_pretrained(tmp_path / variant, safe_serialization=True)
    use_tiny(window, prompt_len="12", output_len="5", batch="2")
    window.controls.select_model(str(tmp_path / variant))
    result = run_to_end(qtbot, window)
    assert not result.error and not result.stopped
    assert len(window.timeline.bars[Phase.DECODE].shown[0]) == 4
    weights = window.metrics.values["weights"].text()
    tip = window.timeline.hover_text(window.store.steps.column("start_ms")[-1] + 0.01)
    if shape.num_experts:
        assert f"of {shape.num_experts} experts per layer)" in weights and "experts touched (all layers)" in tip
    else:
        assert weights.endswith(" MB") and "experts" not in tip
