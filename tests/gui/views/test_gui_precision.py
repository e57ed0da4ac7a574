"""The precision sweep in the window: its form, its store, its view, a saved folder and a real run."""
import dataclasses
import math

from tests.fakes.gui_fixtures import run_to_end

import pytest

from backend.cli.main import build_parser
from backend.run_info import RunInfo
from backend.cli.tools import sweep_config
from backend.config import config_dict, ModelChoice, RunConfig, SweepSpec
from backend.sweeps.points import read_points, write_points
from backend.sweeps.steps import precision_summary
from backend.events import PrecisionPoint, RunFinished
from backend.models.shapes import SHAPES
from backend.records import Phase, RecordBatch, RunData, StepRecord
from gui.main_window import PRECISION_TITLE, MainWindow
from gui.views.precision import EMPTY_NOTE
from gui.worker import RunWorker

# weights of 400, 106.25 and 62.5 MB; decode steps that shrink with them, prefills that do not
POINTS = [
    PrecisionPoint("float32", 400_000_000, 32.0, 100.0, 40.0, 5120.0, 25.0, 80.0, 20.0, 90.0, 30.0),
    PrecisionPoint("q8_0", 106_250_000, 8.5, 95.0, 12.0, 5389.5, 83.3, 80.0, 5.3125, 90.0, 7.96875),
    PrecisionPoint("q4_1", 62_500_000, 5.0, 110.0, 8.0, 4654.5, 125.0, None, None, 90.0, 4.6875),
]
SKIPPED = "q4_0: this machine has no C kernels"


def curve(view, name):
    item = view.curves[name]
    return ([] if item.xData is None else item.xData.tolist()), ([] if item.yData is None else item.yData.tolist())


def same(values, expected):
    return len(values) == len(expected) and all(
        (math.isnan(a) and b is None) or (b is not None and a == pytest.approx(b)) for a, b in zip(values, expected))


def precision_form(w: MainWindow, model="tiny", dtypes="float32,q8_0", prompt_len="32", output_len="4",
                   batch="1", steps="1"):
    w.controls.select_model(model)
    w.controls.device_combo.setCurrentText("cpu")
    form = w.controls.form
    form.set_kind("sweep-precision")
    f = form.fields["sweep-precision"]
    for key, text in (("dtypes", dtypes), ("prompt_len", prompt_len), ("output_len", output_len),
                      ("batch", batch), ("steps", steps)):
        f[key].setText(text)
    return f


def test_the_form_builds_the_clis_precision_sweep_and_refuses_bad_precisions(fake_window):
    window = fake_window   # nothing runs here: a window without an engine process
    f = precision_form(window, dtypes="fp32, q8_0,bf16,q8_0", prompt_len="48", output_len="6", batch="2",
                       steps="2")
    config = window.controls.build_config()
    args = build_parser().parse_args(["sweep", "precision", "--model", "tiny", "--device", "cpu",
                                      "--dtypes", "fp32, q8_0,bf16,q8_0", "--prompt-len", "48", "--output-len", "6",
                                      "--batch", "2", "--steps", "2"])
    cli = sweep_config(args)
    assert config.mode == cli.mode == "sweep-precision"
    assert config.sweep == cli.sweep
    assert config.sweep.dtypes == ["float32", "q8_0", "bfloat16"]   # canonical, each once, in the order given
    assert (config.model.name, config.model.device) == (cli.model.name, cli.model.device)
    # the sweep loads the model at each of its precisions: the Dtype choice has no say
    assert not window.controls.dtype_combo.isEnabled()
    window.controls.form.set_kind("batch")
    assert window.controls.dtype_combo.isEnabled()
    window.controls.form.set_kind("sweep-precision")

    f["dtypes"].setText("float32,fp6")   # (fp8 is a precision now: the simulator's E4M3)
    assert f["dtypes"].error.startswith("precisions takes comma-separated precisions") and "fp6" in f["dtypes"].error
    assert f["dtypes"].error_label.isVisibleTo(window)
    assert not window.controls.run_button.isEnabled()
    assert "fp6" in window.controls.problem_label.text()
    f["dtypes"].setText("auto")
    assert "auto" in f["dtypes"].error and "--dtypes" not in f["dtypes"].error   # the field's words, not the flag's
    f["dtypes"].setText(" , ")
    assert f["dtypes"].error == "precisions: give a comma-separated list such as float32,q8_0,q4_1"
    f["dtypes"].setText("float32")
    f["output_len"].setText("0")
    assert not window.controls.run_button.isEnabled() and "output length" in window.controls.problem_label.text()
    f["output_len"].setText("4")
    assert window.controls.run_button.isEnabled()


def fake_sweep(points, skipped=(), stopped=False):
    """A run function for RunWorker: the precision sweep's events without an engine."""
    def run(config, emit, should_stop):
        for i, p in enumerate(points):
            emit(RecordBatch(steps=[StepRecord.measured(run_id="fake", step=2 * i, phase=Phase.PREFILL,
                                                        prefill_tokens=[32], num_decode=0, contexts=[32],
                                                        start_ms=10.0 * i, duration_ms=p.ttft_ms / 100),
                                    StepRecord.measured(run_id="fake", step=2 * i + 1, phase=Phase.DECODE,
                                                        prefill_tokens=[], num_decode=1, contexts=[33],
                                                        start_ms=10.0 * i + 5, duration_ms=p.tpot_ms / 100)]))
            emit(p)
        summary = precision_summary(config.sweep, list(points), list(skipped), "stopped by user" if stopped else "")
        return RunFinished("fake", summary, stopped)
    return run


@pytest.fixture
def fake_window(qtbot):
    w = MainWindow(worker=RunWorker(run=fake_sweep(POINTS, [SKIPPED])))
    qtbot.addWidget(w)
    w.show()
    return w


def test_precision_points_fill_the_views_curves_as_ratios_to_the_first(qtbot, fake_window):
    w = fake_window
    precision_form(w, dtypes="float32,q8_0,q4_0,q4_1")
    assert w.view_tabs.currentWidget() is w.live_page   # the live view until the sweep has its result
    result = run_to_end(qtbot, w)
    assert result.summary.kind == "precision" and w.store.precision_points == POINTS
    view = w.precision
    assert view.isVisible() and w.view_tabs.currentWidget() is view.parentWidget()
    assert w.view_tabs.tabToolTip(w.view_tabs.currentIndex()) == PRECISION_TITLE
    x, y = curve(view, "bytes")
    assert x == [0.0, 1.0, 2.0] and same(y, [1.0, 0.265625, 0.15625])
    assert same(curve(view, "tpot")[1], [1.0, 0.3, 0.2])            # TPOT follows the bytes down...
    assert same(curve(view, "ttft")[1], [1.0, 0.95, 1.1])           # ... TTFT stays near 1
    assert same(curve(view, "predicted_tpot")[1], [1.0, 0.265625, None])   # the profile has no q4_1 peak: a gap
    assert same(curve(view, "predicted_ttft")[1], [1.0, 1.0, None])
    assert view.labels == ["float32\n400 MB", "q8_0\n106 MB", "q4_1\n62.5 MB"]
    assert "float32 100.0 / 40.00" in view.note.text() and "q4_1 110.0 / 8.00" in view.note.text()
    assert "skipped " + SKIPPED in view.note.text()
    assert "q8_0 106 MB (3.76× fewer bytes): TTFT 95.0 ms (1.05× faster), TPOT 12.00 ms (3.33× faster)" \
        in view.note.toolTip()
    message = w.statusBar().currentMessage()
    assert message.startswith("Precision sweep finished: 3 precisions measured") and SKIPPED in message
    # the metrics panel took the sweep's steps without a request or a roofline of mixed precisions
    w.metrics.refresh()
    assert w.metrics.metrics.decode_ms_per_token is not None and w.metrics.metrics.roofline == []
    assert w.metrics.values["done"].text() == "0 / 0"
    # a batch sweep of the same model afterwards (no points: the live view stays) leaves the precision
    # sweep on its tab; another model clears it
    w.controls.form.set_kind("sweep-batch")
    w.controls.form.fields["sweep-batch"]["batches"].setText("1,2")
    w.worker._run = lambda config, emit, should_stop: RunFinished("b")
    run_to_end(qtbot, w)
    assert w.view_tabs.currentWidget() is w.live_page   # the live view until the sweep has its result
    assert w.store.precision_points == POINTS and w.view_tabs.tabText(1) == "Throughput vs batch size"
    w.view_tabs.show_view(view)
    w.repaint_views()
    assert len(curve(view, "tpot")[1]) == 3 and w.view_tabs.currentWidget() is view.parentWidget()
    w.controls.select_model("gpt2-124m")
    run_to_end(qtbot, w)
    assert w.store.precision_points == []
    assert w.view_tabs.currentWidget() is w.live_page   # the live view until the sweep has its result
    w.view_tabs.show_view(view)
    w.repaint_views()
    assert curve(view, "tpot") == ([], []) and view.labels == [] and view.note.text() == EMPTY_NOTE


def write_sweep_folder(folder, points=POINTS):
    spec = SweepSpec("precision", dtypes=[p.dtype for p in points], prompt_len=32, output_len=4, steps=1)
    config = RunConfig(mode="sweep-precision", model=ModelChoice("tiny", "cpu"), sweep=spec, profile="cpu")
    steps = [StepRecord.measured(run_id="saved", step=i, phase=Phase.DECODE, prefill_tokens=[], num_decode=1,
                                 contexts=[33], start_ms=float(i), duration_ms=p.tpot_ms)
             for i, p in enumerate(points)]
    info = RunInfo(model="tiny", device="cpu", device_name="test CPU", dtype=",".join(p.dtype for p in points),
                   shape=dataclasses.asdict(SHAPES["tiny"]), profile="cpu")
    data = RunData("saved", config_dict(config), info, steps, [], [], precision_summary(spec, points, [SKIPPED], ""))
    write_points(folder, "precision", points, data)


def test_opening_a_saved_precision_sweep_shows_its_points_and_export_keeps_them(qtbot, fake_window, tmp_path):
    window = fake_window   # nothing runs here: a window without an engine process
    write_sweep_folder(tmp_path / "saved")
    assert window.files.open_run(str(tmp_path / "saved")), window.last_error
    window.repaint_views()
    view = window.precision
    assert view.isVisible() and window.view_tabs.currentWidget() is view.parentWidget()
    assert same(curve(view, "tpot")[1], [1.0, 0.3, 0.2]) and same(curve(view, "bytes")[1], [1.0, 0.265625, 0.15625])
    assert view.labels[0] == "float32\n400 MB" and "skipped " + SKIPPED in view.note.text()
    assert window.store.sweep_points == [] and window.store.num_steps == 3
    assert "," not in str(window.throughput.run_dtype)   # "float32,q8_0,q4_1" names no one dtype to predict at
    assert window.files.export_csv(str(tmp_path / "again"))
    assert read_points(tmp_path / "again") == ("precision", POINTS)
    # a batch-size sweep opened afterwards brings the throughput tab back
    from backend.session import execute
    batch = RunConfig(mode="sweep-batch", model=ModelChoice("tiny", "cpu"),
                      sweep=SweepSpec(kind="batch", batches=[1, 2], context=8, steps=1, warmup=0),
                      out_dir=str(tmp_path / "batch"))
    execute(batch, lambda event: None, lambda: False)
    assert window.files.open_run(str(tmp_path / "batch"))
    assert window.view_tabs.currentWidget() is window.throughput.parentWidget()
    assert window.store.precision_points == [] and window.view_tabs.tabText(1) == "Throughput vs batch size"


def test_a_real_precision_sweep_of_the_bundled_model_from_the_window(qtbot, window):
    precision_form(window, model="smollm2-135m", dtypes="float32,q8_0", prompt_len="16", output_len="2", steps="1")
    result = run_to_end(qtbot, window)
    assert not result.error and not result.stopped, result.error
    assert result.summary.kind == "precision" and result.summary.num_points == 2
    assert [p.dtype for p in window.store.precision_points] == ["float32", "q8_0"]
    view = window.precision
    assert view.isVisible() and window.last_error == ""
    x, y = curve(view, "bytes")
    assert x == [0.0, 1.0] and y[0] == 1.0 and 0.2 < y[1] < 0.3   # q8_0: 8.5 bits a weight of 32 (and the rest)
    assert len(curve(view, "tpot")[1]) == 2 and all(v > 0 for v in curve(view, "ttft")[1])
    assert [label.split("\n")[0] for label in view.labels] == ["float32", "q8_0"]
    # per precision, every step of its runs: the TTFT run's warm-up and timed prefill; the TPOT run's
    # own prefill, its warm-up decode step and the two timed ones
    phases = window.store.steps.column("phase").tolist()
    assert len(phases) == 12 and phases.count(0.0) == 6
    assert window.statusBar().currentMessage().startswith("Precision sweep finished: 2 precisions measured")


def test_a_reference_precision_sweep_is_drawn_over_the_run_at_the_same_precisions(qtbot, fake_window, tmp_path):
    """Another machine's (or build's) precision sweep as a reference: its TPOT and TTFT ratios, each over
    its own first precision, dotted in its colour at the x of the same precision; one this run lacks is left out."""
    window = fake_window   # nothing runs here: a window without an engine process
    write_sweep_folder(tmp_path / "current")
    other = [dataclasses.replace(POINTS[0], tpot_ms=50.0, ttft_ms=100.0),
             dataclasses.replace(POINTS[2], tpot_ms=25.0, ttft_ms=120.0),          # q4_1 only: no q8_0
             dataclasses.replace(POINTS[1], dtype="q4_0", tpot_ms=10.0)]            # not in the current run
    write_sweep_folder(tmp_path / "reference", other)
    assert window.files.open_run(str(tmp_path / "current")), window.last_error
    ref = window.reference_runs.add(str(tmp_path / "reference"))
    assert ref is not None
    window.repaint_views()
    view = window.precision
    tpot, ttft = view._ref_curves[ref.key]
    assert tpot.xData.tolist() == [0.0, 2.0] and tpot.yData.tolist() == pytest.approx([1.0, 0.5])
    assert ttft.yData.tolist() == pytest.approx([1.0, 1.2])
    assert ref.name in view.note.text()
    window.reference_runs.remove(ref.key)
    window.repaint_views()
    assert ref.key not in view._ref_curves
