"""The window's "Simulate on this profile": a simulated sweep said to be simulated everywhere, and a
measured sweep drawn beside this machine's cost model with its error."""
from tests.fakes.gui_fixtures import run_to_end, use_tiny


def test_a_simulated_batch_sweep_of_an_8b_model_on_an_h100(qtbot, window):
    c = window.controls
    c.select_model("llama-8b")
    c.select_profile("h100-sxm")
    c.simulate_check.setChecked(True)
    assert c.device_combo.isHidden() or not c.model_form.isRowVisible(c.device_combo)
    form = c.form
    form.set_kind("sweep-batch")
    form.fields["sweep-batch"]["batches"].setText("1,16,256")
    form.fields["sweep-batch"]["context"].setText("1000")   # 256 x 2,000 tokens of KV would not fit in 80 GB
    config = c.build_config()
    assert config.simulate and config.profile == "h100-sxm" and config.threads is None
    finished = run_to_end(qtbot, window)
    assert finished.data.info.target == "simulated"
    assert "SIMULATED" in window.windowTitle()
    assert "SIMULATED on h100-sxm" in window.status.labels["device"].text()
    view = window.throughput
    assert view.measured.xData.tolist() == [0.0, 4.0, 8.0]
    rates = view.measured.yData
    assert rates[2] > 20 * rates[0]   # batching 256 decodes on an H100: far more tokens/s than one
    assert "simulated run" in view.getPlotItem().titleLabel.text
    assert len(view.profile_simulated.xData) > 0   # the profile's cost model beside its roofline
    # a model the simulator has no shape for is refused before the run
    c.select_model("someone/some-model")
    assert c.is_simulated()
    assert any("known model shape" in e for e in c.errors()), c.errors()


def test_a_measured_sweep_shows_this_machines_cost_model_beside_it(qtbot, window):
    use_tiny(window)
    form = window.controls.form
    form.set_kind("sweep-prompt")
    form.fields["sweep-prompt"]["lengths"].setText("16,32,64")
    form.fields["sweep-prompt"]["steps"].setText("2")
    run_to_end(qtbot, window)
    view = window.throughput
    assert view.simulated.xData.tolist() == view.measured.xData.tolist() == [4.0, 5.0, 6.0]
    assert all(v > 0 for v in view.simulated.yData)
    assert "cost model (placeholder terms" in view.note.text() and "% at worst" in view.note.text()
    assert "SIMULATED" not in window.windowTitle()


def test_the_precision_tab_draws_the_simulated_medians_beside_the_measured(qtbot):
    from backend.events import PrecisionPoint
    from gui.main_window import MainWindow
    from gui.worker import RunWorker
    from tests.gui.views.test_gui_precision import curve, fake_sweep, precision_form, same
    points = [PrecisionPoint("float32", 400_000_000, 32.0, 100.0, 40.0, 320.0, 25.0, None, None, None, None,
                             110.0, 36.0),
              PrecisionPoint("q8_0", 106_250_000, 8.5, 95.0, 12.0, 337.0, 83.3, None, None, None, None,
                             95.0, 12.0)]
    w = MainWindow(worker=RunWorker(run=fake_sweep(points)))
    qtbot.addWidget(w)
    w.show()
    precision_form(w, dtypes="float32,q8_0")
    run_to_end(qtbot, w)
    view = w.precision
    assert same(curve(view, "simulated_tpot")[1], [1.0, 12.0 / 36.0])
    assert same(curve(view, "simulated_ttft")[1], [1.0, 95.0 / 110.0])
    # TTFT 10% off at float32 and exact at q8_0; TPOT 10% and 0%
    assert "mean error: TTFT 5.0%, TPOT 5.0%" in view.note.text()
