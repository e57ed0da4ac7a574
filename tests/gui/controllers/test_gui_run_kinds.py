"""The window's run kinds for the load sweeps, Fit…, the worked example, and its first run: a real
question answered, on an engine process started before Run was pressed."""
from tests.fakes.gui_fixtures import RUN_TIMEOUT_MS, run_to_end, use_tiny

from PySide6 import QtCore

from backend.sweeps.points import read_points
from tests.fakes.cache_home import private_cache_home


def tiny_workload(w, kind: str) -> None:
    w.controls.select_model("tiny")
    w.controls.device_combo.setCurrentText("cpu")
    form = w.controls.form
    form.set_kind(kind)
    f = form.fields["load"]
    for key, value in (("requests", "4"), ("prompt_len", "8"), ("output_len", "4"), ("max_batch", "4")):
        f[key].setText(value)


def test_the_engine_process_is_up_before_the_first_run_and_serves_it(qtbot, window):
    engine = window.worker.engine
    # the window opened on the bundled model: its engine process starts without a Run
    qtbot.waitUntil(lambda: engine.is_alive() and window.tools.warmed is not None, timeout=RUN_TIMEOUT_MS)
    assert window.tools.warmed[0] == "smollm2-135m" and not window.running
    first = engine.pid
    use_tiny(window)   # another model: the engine process starts again for it, still before any Run
    qtbot.waitUntil(lambda: window.tools.warmed[0] == "tiny" and engine.is_alive() and engine.pid != first,
                    timeout=RUN_TIMEOUT_MS)
    warmed = engine.pid
    result = run_to_end(qtbot, window)
    assert not result.error
    assert engine.pid == warmed   # the run went to the process started ahead of it


def test_the_default_first_run_answers_a_real_question(qtbot, window):
    form = window.controls.form
    assert form.kind() == "batch"
    config = window.controls.build_config()
    assert config.batch.prompt and config.batch.chat   # a question, as a chat message
    result = run_to_end(qtbot, window)
    assert not result.error and result.summary.num_finished == 1
    text = window.text.toPlainText().lower()
    # the bundled instruct model answers the sky question in words (random prompt ids give noise)
    assert any(word in text for word in ("light", "blue", "scatter", "sun", "atmosphere")), text
    assert sum(c.isalpha() or c.isspace() for c in text) > 0.8 * len(text)


def test_synthetic_prompts_are_one_click_away_and_say_what_they_are(qtbot, window):
    form = window.controls.form
    assert not form.synthetic_note.isVisibleTo(form)
    form.use_synthetic_prompt()
    assert form.synthetic_note.isVisibleTo(form) and "noise" in form.synthetic_note.text()
    assert form.batch_run().prompt is None and form.fields["batch"]["prompt_len"].isEnabled()
    # the workload's prompts: real text by default, synthetic in the same list, each said in words
    form.set_kind("load")
    assert form.workload().prompt_source == "text" and "real prompts" in form.source_note.text()
    form.source_combo.setCurrentText("synthetic")
    assert form.workload().prompt_source == "synthetic" and "noise" in form.source_note.text()


def test_a_rate_sweep_draws_throughput_per_device_against_per_user(qtbot, window, tmp_path):
    tiny_workload(window, "sweep-rate")
    window.controls.form.fields["load-sweep"]["rates"].setText("50,100")
    window.controls.form.fields["load"]["slo_ttft_ms"].setText("100000")
    result = run_to_end(qtbot, window)
    assert not result.error and result.summary.kind == "rate"
    points = window.store.load_points
    assert [p.x for p in points] == [50.0, 100.0] and all(p.num_finished == 4 for p in points)
    assert window.view_tabs.currentWidget() is window.load_sweep.parentWidget()
    assert len(window.load_sweep.points.xData) == 2 and len(window.load_sweep.labels) == 2
    # the front and the best goodput, marked in the window as the sweep marked them in the engine process
    assert sum(p.pareto for p in points) >= 1 and len(window.load_sweep.front.xData) >= 1
    assert sum(p.best_goodput for p in points) == 1 and len(window.load_sweep.best.xData) == 1
    assert "Pareto front" in window.load_sweep.note.text() and "best goodput" in window.load_sweep.note.text()
    assert window.statusBar().currentMessage().startswith("Rate sweep finished: 2 points, best goodput")
    # Export CSV writes it as `sweep rate --out` does, and Open run shows it again
    assert window.files.export_csv(str(tmp_path / "rate"))
    kind, saved = read_points(tmp_path / "rate")
    assert kind == "rate" and [p.x for p in saved] == [50.0, 100.0]
    window.store.reset()
    assert window.files.open_run(str(tmp_path / "rate"))
    window.repaint_views()
    assert len(window.store.load_points) == 2 and len(window.load_sweep.points.xData) == 2


def test_a_concurrency_sweep_runs_closed_loops(qtbot, window):
    tiny_workload(window, "sweep-concurrency")
    window.controls.form.fields["load-sweep"]["concurrencies"].setText("1,2")
    result = run_to_end(qtbot, window)
    assert not result.error and [p.x for p in window.store.load_points] == [1.0, 2.0]
    assert "users" in window.load_sweep.labels[0].textItem.toPlainText()


def test_a_split_sweep_is_simulated_and_marks_the_best_split(qtbot, inprocess_window):
    w = inprocess_window
    controls = w.controls
    controls.form.set_kind("sweep-pd-ratio")
    assert controls.simulate_check.isChecked()   # chosen with the kind, as the CLI's pd-ratio forces it
    controls.select_model("llama-8b")
    controls.select_profile("h100-sxm")
    f = controls.form.fields["load"]
    for key, value in (("requests", "20"), ("prompt_len", "512"), ("output_len", "32")):
        f[key].setText(value)
    controls.form.fields["load-sweep"]["total_devices"].setText("3")
    result = run_to_end(qtbot, w)
    assert not result.error and result.summary.kind == "pd-ratio"
    assert [p.split for p in w.store.pd_points] == ["1P:2D", "2P:1D"]
    assert sum(p.best for p in w.store.pd_points) == 1
    assert "best split" in w.load_sweep.note.text() and "a verification" not in w.load_sweep.note.text()
    # the speculation box's settings reach every split: its decode devices guess, priced as the box says
    controls.form.spec_combo.setCurrentText("ngram")
    controls.sim_spec_box.acceptance_spin.setValue(0.8)
    plain = {p.split: p for p in w.store.pd_points}
    result = run_to_end(qtbot, w)
    assert not result.error and result.summary.kind == "pd-ratio"
    for p in w.store.pd_points:
        assert p.spec_mean_acceptance_length > 2 and p.output_tokens_per_s > plain[p.split].output_tokens_per_s
    assert "tokens a verification" in w.load_sweep.note.text()
    controls.simulate_check.setChecked(False)
    assert "is simulated" in controls.errors()[0]   # and Run waits until it is again


def test_fit_from_the_profile_box_shows_the_held_out_error(qtbot, inprocess_window, tmp_path, monkeypatch):
    import torch
    import backend.fitting as fitting
    from backend.config import EngineConfig, RunConfig, SweepSpec
    from backend.loaders.device import device_name
    from backend.roofline.profiles import load_profile, local_profile_path
    private_cache_home(monkeypatch, tmp_path / "cache")
    monkeypatch.setattr(fitting, "STANDARD_MODEL", "tiny")   # the same three kinds of run, small
    monkeypatch.setattr(fitting, "standard_runs", lambda: [
        ("batch", RunConfig(mode="sweep-batch", sweep=SweepSpec("batch", batches=[1, 2], context=32, steps=2))),
        ("prompt", RunConfig(mode="sweep-prompt", sweep=SweepSpec("prompt", lengths=[16, 32], steps=2))),
        ("load", RunConfig(mode="load", workload=fitting.poisson(1, 50.0, "8:24", "4:8", 6),
                           engine=EngineConfig(max_batch=4)))])
    profile = local_profile_path()
    profile.parent.mkdir(parents=True, exist_ok=True)
    profile.write_text(f'name = "This machine: {device_name(torch.device("cpu"))} (2 threads)"\nvendor = "x"\n'
                       'memory_gb = 8\nbandwidth_gbs = 20\nmeasured = true\nsource = "test"\n[tflops]\nfp32 = 0.1\n')
    w = inprocess_window
    w.controls.reload_profiles()
    with qtbot.waitSignal(w.fitFinished, timeout=RUN_TIMEOUT_MS) as done:
        qtbot.mouseClick(w.controls.fit_button, QtCore.Qt.MouseButton.LeftButton)
    report = done.args[0]
    assert len(report.held_out) == 3 and load_profile(profile).simulation["fitted"] is True
    assert (tmp_path / "cache" / "phasescope" / "calibration-runs" / "load" / "steps.csv").is_file()
    assert w.tools.fit_dialog.isVisible() and len(w.tools.fit_dialog.tables) == 3
    assert w.tools.fit_dialog.tables[0].rowCount() >= 2 and w.tools.fit_dialog.tables[0].item(0, 3).text().endswith("%")
    assert "held-out step-time error" in w.statusBar().currentMessage()
    assert not w.running and w.controls.run_button.isEnabled()


def test_the_worked_example_fills_its_table_from_the_windows_own_run(qtbot, inprocess_window):
    w = inprocess_window
    w.tools.open_example()
    dialog = w.tools.example_dialog
    assert dialog.table.rowCount() == 1   # the seed's own row
    dialog.measure_check.setChecked(False)   # the simulated row only (the measured one takes a minute)
    with qtbot.waitSignal(w.runFinished, timeout=RUN_TIMEOUT_MS):
        qtbot.mouseClick(dialog.run_button, QtCore.Qt.MouseButton.LeftButton)
    assert dialog.table.rowCount() == 2
    assert dialog.table.item(1, 0).text() == "llama-8b on h100-sxm, simulated"
    assert dialog.table.item(1, 1).text().endswith(" ms") and dialog.status.text() == "done"
    assert w.store.config["model"]["name"] == "llama-8b"   # the views show it as any run
