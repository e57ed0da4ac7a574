"""Reliability in the window: every bad input and fault shows a message, and the app stays usable.

The real worker thread and the real engine on the `tiny` model; files made in tmp_path.
docs/reliability.md lists every case and the test that covers it.
"""
from tests.fakes.gui_fixtures import RUN_TIMEOUT_MS, use_tiny

import json
import os
import threading
from pathlib import Path

import pytest
from PySide6 import QtCore, QtWidgets

from backend.config import BatchRun, ModelChoice, RunConfig
from backend.errors import InputError
from backend.results.export import read_run, write_run
from backend.records import RequestStatus
from backend.session import execute
from gui.main_window import MainWindow
from tests.fakes.faults import fill_disk
from tests.cli.test_reliability import BAD_PROFILES, BAD_WORKLOADS, PROFILE, WORKLOAD, bad_model, wordlevel_llama_folder



def click(qtbot, button) -> None:
    qtbot.mouseClick(button, QtCore.Qt.MouseButton.LeftButton)


def run_to_end(qtbot, w: MainWindow):
    with qtbot.waitSignal(w.runFinished, timeout=RUN_TIMEOUT_MS) as done:
        click(qtbot, w.controls.run_button)
    w.repaint_views()
    return done.args[0]


def run_to_failure(qtbot, w: MainWindow) -> str:
    with qtbot.waitSignal(w.runFailed, timeout=RUN_TIMEOUT_MS) as failed:
        click(qtbot, w.controls.run_button)
    assert not w.running and w.last_error == failed.args[0]
    assert w.error_box is not None and w.error_box.isVisible()
    w.error_box.close()
    return failed.args[0]


def choose_file(monkeypatch, path) -> None:
    """The next file dialog answers `path` at once."""
    monkeypatch.setattr(QtWidgets.QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), "TOML (*.toml)"))


def child_processes() -> list[int]:
    """Live (not zombie) processes whose parent is this one (Linux /proc)."""
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me and fields[0] != "Z":
                found.append(int(entry.name))
    return found


# ---- profile and workload files --------------------------------------------------------------

def test_a_malformed_profile_file_shows_a_message_and_a_good_one_is_chosen(qtbot, window, tmp_path, monkeypatch):
    controls = window.controls
    before = controls.profile_combo.currentData()
    for case, text, field in BAD_PROFILES:
        path = tmp_path / f"{case}.toml"
        path.write_text(text)
        choose_file(monkeypatch, path)
        click(qtbot, controls.open_profile_button)
        assert str(path) in window.last_error and field in window.last_error, case
        assert controls.profile_combo.currentData() == before   # nothing chosen, nothing changed
    good = tmp_path / "mine.toml"
    good.write_text(PROFILE)
    choose_file(monkeypatch, good)
    click(qtbot, controls.open_profile_button)
    assert controls.profile_combo.currentData() == str(good)
    assert controls.profile_combo.currentText() == "Test GPU (mine.toml)"
    assert controls.build_config().profile == str(good) and controls.profile().name == "Test GPU"


def test_a_malformed_workload_file_shows_a_message_and_a_good_one_fills_the_form(qtbot, window, tmp_path,
                                                                                 monkeypatch):
    form = window.controls.form
    form.set_kind("load")
    before = form.preset_combo.currentText()
    for case, text, field in BAD_WORKLOADS:
        path = tmp_path / f"{case}.toml"
        path.write_text(text)
        choose_file(monkeypatch, path)
        click(qtbot, form.open_workload_button)
        assert str(path) in window.last_error and field in window.last_error, case
        assert form.preset_combo.currentText() == before
    good = tmp_path / "mine.toml"
    good.write_text(WORKLOAD)
    choose_file(monkeypatch, good)
    click(qtbot, form.open_workload_button)
    assert form.preset_combo.currentText() == str(good)
    assert form.fields["load"]["requests"].text() == "4" and form.fields["load"]["rate"].text() == "2"
    assert form.errors() == [] and form.workload().num_requests == 4
    # the file is broken after it was chosen: choosing it again says why, and Run waits
    good.write_text(WORKLOAD.replace("rate = 2.0", "rate = -1"))
    form.preset_combo.setCurrentIndex(0)
    form.preset_combo.setCurrentText(str(good))
    assert "field 'rate'" in window.last_error
    assert any("field 'rate'" in e for e in form.errors()) and not window.controls.run_button.isEnabled()


def test_a_broken_measured_profile_is_named_when_the_window_opens_and_the_rest_work(qtbot, tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "this-machine.toml").write_text("name = [broken")
    w = MainWindow()
    qtbot.addWidget(w)
    assert "this-machine.toml" in w.last_error and "not TOML" in w.last_error
    keys = [w.controls.profile_combo.itemData(i) for i in range(w.controls.profile_combo.count())]
    assert "h100-sxm" in keys and "this-machine" not in keys
    w.controls.select_profile("h100-sxm")
    assert w.controls.profile().key == "h100-sxm"


# ---- models ---------------------------------------------------------------------------------

BAD_MODELS = [("no-config", "no config.json"), ("unsupported-arch", "BertModel is not supported"),
              ("truncated-gguf", "not a readable GGUF file"), ("corrupt-gguf", "not a readable GGUF file"),
              ("truncated-safetensors", "cannot read safetensors file"),
              ("corrupt-safetensors", "cannot read safetensors file")]


def test_each_model_that_cannot_load_shows_why_and_the_next_run_works(qtbot, inprocess_window, tmp_path,
                                                                       monkeypatch):
    """Every case, with the runs in this process: the window's engine process starts afresh for each
    other model (a Python start and torch's import each time); the test below checks that the message
    comes through that process the same and that its next run works."""
    window = inprocess_window
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")   # the hub id case: never the network
    use_tiny(window)
    for case, words in BAD_MODELS:
        window.controls.select_model(bad_model(tmp_path, case))
        assert words in run_to_failure(qtbot, window), case
        assert words in window.statusBar().currentMessage()
    window.controls.select_model("phasescope-test/does-not-exist")
    assert "cannot download phasescope-test/does-not-exist: offline" in run_to_failure(qtbot, window)
    # a name that is neither listed, a folder, a .gguf nor a hub id is refused as it is typed
    for name in ("no-such-model", str(tmp_path / "nowhere" / "model.gguf")):
        window.controls.select_model(name)
        assert not window.controls.run_button.isEnabled()
        assert "neither a hub id" in window.controls.problem_label.text()
    window.controls.select_model("tiny")
    result = run_to_end(qtbot, window)
    assert not result.error and window.table.model().rowCount() == 2


def test_a_model_that_cannot_load_in_the_engine_process_shows_why_and_the_next_run_works(qtbot, window, tmp_path,
                                                                                        monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")   # the engine process inherits it: never the network
    use_tiny(window)
    for case, words in (BAD_MODELS[1], BAD_MODELS[3]):   # a folder the loader refuses, a file it cannot read
        window.controls.select_model(bad_model(tmp_path, case))
        assert words in run_to_failure(qtbot, window), case
        assert words in window.statusBar().currentMessage()
    window.controls.select_model("phasescope-test/does-not-exist")
    assert "cannot download phasescope-test/does-not-exist: offline" in run_to_failure(qtbot, window)
    window.controls.select_model("tiny")
    result = run_to_end(qtbot, window)
    assert not result.error and window.table.model().rowCount() == 2


# ---- numbers --------------------------------------------------------------------------------

FIELD_CASES = [
    # (run kind, field, text, words in the reason shown beside it)
    ("batch", "batch", "0", "at least 1"), ("batch", "batch", "-2", "at least 1"),
    ("batch", "batch", "many", "whole number"), ("batch", "batch", "100000", "at most 65,536"),
    ("batch", "output_len", "0", "at least 1"), ("batch", "output_len", "1.5", "whole number"),
    ("batch", "prompt_len", "99999999", "at most 1,048,576"),
    ("load", "rate", "0", "more than 0"), ("load", "rate", "-1", "more than 0"),
    ("load", "rate", "fast", "must be a number"), ("load", "rate", "1e12", "at most"),
    ("load", "rate", "nan", "finite"), ("load", "requests", "0", "at least 1"),
    ("load", "max_batch", "0", "at least 1"), ("load", "max_batch", "1000000", "at most 65,536"),
    ("load", "prompt_len", "64:16", "min 64 > max 16"), ("load", "output_len", "-3", ""),
    ("sweep-batch", "batches", "1,0", "at least 1"), ("sweep-batch", "batches", "1,x", "whole number"),
    ("sweep-batch", "context", "0", "at least 1"), ("sweep-prompt", "lengths", "", "comma-separated"),
]


def test_every_bad_number_is_refused_as_it_is_typed(window):
    form = window.controls.form
    form.use_synthetic_prompt()   # the batch page's prompt length counts only for random prompt tokens
    form.preset_combo.setCurrentText("custom")
    form.arrival_combo.setCurrentText("poisson")
    form.fields["load"]["rate"].setText("4")
    form.fields["load"]["requests"].setText("8")
    for kind, name, text, words in FIELD_CASES:
        form.set_kind(kind)
        field = form.fields[kind][name]
        good = field.text()
        field.setText(text)
        assert not window.controls.run_button.isEnabled(), (kind, name, text)
        assert words in window.controls.problem_label.text(), (kind, name, text, window.controls.problem_label.text())
        with pytest.raises(InputError):
            window.controls.build_config()
        field.setText(good)
        assert window.controls.run_button.isEnabled(), (kind, name, good)


def test_a_batch_that_cannot_fit_says_what_it_needs_and_what_there_is(qtbot, inprocess_window, monkeypatch):
    window = inprocess_window   # the fault is injected in this process
    import backend.loaders.weights
    # undone at the block's end: monkeypatch.undo() would also undo config_dir's, and the window would
    # then write the user's own settings (and another test worker's)
    with monkeypatch.context() as m:
        m.setattr(backend.loaders.weights, "free_memory", lambda device: 8 * 2**20)   # room for tiny's weights only
        use_tiny(window)
        window.controls.select_model("llama-1b")      # its weights alone do not fit: refused before allocating
        message = run_to_failure(qtbot, window)
        assert "llama-1b needs" in message and "float32 weights on cpu, but only 0.0 GiB is free" in message
        use_tiny(window, prompt_len="1000", output_len="1000", batch="60000")
        message = run_to_failure(qtbot, window)
        assert "the KV cache for 60,000 sequences of 2,000 tokens needs" in message and "GiB is free" in message
    use_tiny(window)
    assert not run_to_end(qtbot, window).error


# ---- prompts --------------------------------------------------------------------------------

def test_a_prompt_longer_than_the_context_shows_why(qtbot, window):
    use_tiny(window, prompt_len="5000", output_len="4", batch="1")
    assert "prompt of 5000 tokens + 4 output tokens exceeds tiny's context of 2048 tokens" in \
        run_to_failure(qtbot, window)


def test_an_empty_prompt_box_means_synthetic_tokens(window):
    use_tiny(window)
    window.controls.form.prompt_edit.setPlainText("   \n ")
    assert window.controls.form.fields["batch"]["prompt_len"].isEnabled()
    assert window.controls.build_config().batch.prompt is None


def test_text_the_tokenizer_cannot_round_trip_is_noted_in_the_status_bar(qtbot, window, tmp_path):
    window.controls.select_model(str(wordlevel_llama_folder(tmp_path / "wordlevel")))
    window.controls.device_combo.setCurrentText("cpu")
    window.controls.form.fields["batch"]["output_len"].setText("3")
    window.controls.form.prompt_edit.setPlainText("the capital of Zanzibar")
    window.controls.form.chat_check.setChecked(False)   # the text itself, not wrapped in a chat template
    result = run_to_end(qtbot, window)
    assert not result.error
    assert "does not round-trip this prompt exactly" in window.statusBar().currentMessage()


# ---- export and open run --------------------------------------------------------------------

def test_export_creates_a_missing_folder_and_refuses_an_unwritable_one(qtbot, window, tmp_path):
    use_tiny(window)
    run_to_end(qtbot, window)
    assert window.files.export_csv(str(tmp_path / "a" / "b"))
    assert len(read_run(tmp_path / "a" / "b").steps) == 6
    blocker = tmp_path / "a-file"
    blocker.write_text("keep me")
    assert not window.files.export_csv(str(blocker / "run"))
    assert window.last_error.startswith("export failed: cannot write to output folder")
    assert blocker.read_text() == "keep me"
    if os.geteuid() != 0:   # as root chmod does not stop writes; the path under a file stands for it
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        try:
            assert not window.files.export_csv(str(locked))
        finally:
            locked.chmod(0o700)
        assert list(locked.iterdir()) == []


def test_a_full_disk_during_export_says_so_and_leaves_the_saved_files(qtbot, window, tmp_path, monkeypatch):
    use_tiny(window)
    run_to_end(qtbot, window)
    out = tmp_path / "out"
    write_run(out, read_run_of(window, tmp_path / "first"))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with monkeypatch.context() as m:   # not monkeypatch.undo(): that would undo config_dir's too (see above)
        fill_disk(m)
        assert not window.files.export_csv(str(out))
    assert "export failed" in window.last_error and "No space left on device" in window.last_error
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before   # no temporary, nothing replaced
    assert window.files.export_csv(str(tmp_path / "later"))             # the app carries on


def read_run_of(window: MainWindow, folder: Path):
    assert window.files.export_csv(str(folder))
    return read_run(folder)


def test_opening_a_bad_run_folder_names_what_is_wrong_and_a_good_one_still_opens(window, tmp_path):
    good = tmp_path / "good"
    execute(RunConfig(mode="batch", model=ModelChoice("tiny", "cpu"), batch=BatchRun(prompt_len=8, output_len=3),
                      out_dir=str(good)), lambda e: None, lambda: False)
    cases = {}
    for name in ("old-version", "no-tokens", "no-column", "bad-json"):
        folder = tmp_path / name
        write_run(folder, read_run(good))
        cases[name] = folder
    meta = json.loads((cases["old-version"] / "run.json").read_text())
    meta["format"] = "phasescope-run/0"
    (cases["old-version"] / "run.json").write_text(json.dumps(meta))
    (cases["no-tokens"] / "tokens.csv").unlink()
    lines = (cases["no-column"] / "steps.csv").read_text().splitlines()
    (cases["no-column"] / "steps.csv").write_text("\n".join(line.split(",", 1)[1] for line in lines) + "\n")
    (cases["bad-json"] / "run.json").write_text("{not json")
    expected = {"old-version": "another version", "no-tokens": "missing tokens.csv",
                "no-column": "missing column(s) run_id", "bad-json": "not valid JSON"}
    for name, words in expected.items():
        assert not window.files.open_run(str(cases[name]))
        assert words in window.last_error, (name, window.last_error)
    assert not window.files.open_run(str(tmp_path / "nowhere"))
    assert "is not a folder" in window.last_error
    assert window.files.open_run(str(good))
    window.repaint_views()
    assert window.table.model().rowCount() == 1


# ---- faults ---------------------------------------------------------------------------------

def fail_on_step(monkeypatch, step: int, exc: BaseException) -> dict:
    """Runner.run raises `exc` on its `step`-th call (counted across runs), then works again."""
    from backend.engine.runner import Runner
    real_run = Runner.run
    calls = {"n": 0}

    def run(self, out):
        calls["n"] += 1
        if calls["n"] == step:
            raise exc
        return real_run(self, out)
    monkeypatch.setattr(Runner, "run", run)
    return calls


def test_out_of_memory_mid_run_shows_it_and_the_partial_run_is_visible_and_exportable(qtbot, inprocess_window, tmp_path,
                                                                                       monkeypatch):
    window = inprocess_window   # the fault is injected in this process
    import torch
    fail_on_step(monkeypatch, 4, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    use_tiny(window, output_len="10")
    result = run_to_end(qtbot, window)
    assert result.error.startswith("out of memory: CUDA out of memory")
    assert "out of memory" in window.last_error and "records so far are kept" in window.last_error
    assert window.store.num_steps == 3 and window.table.model().rowCount() == 2
    assert window.files.export_csv(str(tmp_path / "partial"))
    run = read_run(tmp_path / "partial")
    assert len(run.steps) == 3
    assert all(r.finish_reason.startswith("run failed: out of memory") for r in run.requests)


def test_an_exception_mid_run_shows_it_keeps_the_partial_run_and_the_next_run_starts_cleanly(qtbot, inprocess_window, tmp_path,
                                                                                             monkeypatch):
    window = inprocess_window   # the fault is injected in this process
    fail_on_step(monkeypatch, 3, RuntimeError("device lost"))
    use_tiny(window, output_len="10")
    result = run_to_end(qtbot, window)
    assert result.error == "RuntimeError: device lost" and "device lost" in window.last_error
    assert window.store.num_steps == 2 and window.table.model().rowCount() == 2
    assert window.files.export_csv(str(tmp_path / "partial"))
    assert len(read_run(tmp_path / "partial").steps) == 2
    window.error_box.close()
    second = run_to_end(qtbot, window)
    assert not second.error and not second.stopped
    assert window.store.num_steps == 10 and window.table.model().rowCount() == 2   # only the new run's records
    assert all(window.store.lane(r)["status"] is RequestStatus.FINISHED for r in range(2))


def test_stop_in_the_window_ends_the_run_within_one_engine_step(qtbot, inprocess_window, monkeypatch):
    window = inprocess_window   # the fault is injected in this process
    from backend.engine.runner import Runner
    real_run = Runner.run
    calls = {"n": 0}

    def counted(self, out):
        calls["n"] += 1
        return real_run(self, out)
    monkeypatch.setattr(Runner, "run", counted)
    use_tiny(window, output_len="2000", batch="1")
    window.controls.form.ignore_eos.setChecked(True)
    click(qtbot, window.controls.run_button)
    qtbot.waitUntil(lambda: window.store.num_steps >= 5, timeout=RUN_TIMEOUT_MS)
    with qtbot.waitSignal(window.runFinished, timeout=RUN_TIMEOUT_MS) as done:
        click(qtbot, window.controls.stop_button)   # sets the stop flag before it returns
        steps_at_stop = calls["n"]
    assert done.args[0].stopped
    assert calls["n"] - steps_at_stop <= 1          # at most the step that was running
    assert window.store.num_steps == calls["n"]     # and every step that ran is on screen


def test_closing_the_window_mid_run_leaves_no_thread_or_process(qtbot):
    threads_before = {t.ident for t in threading.enumerate()}
    children_before = set(child_processes())
    w = MainWindow()
    w.show()
    use_tiny(w, output_len="2000", batch="1")
    w.controls.form.ignore_eos.setChecked(True)
    w.start_run()
    qtbot.waitUntil(lambda: w.store.num_steps >= 3, timeout=RUN_TIMEOUT_MS)
    w.close()
    assert not w.worker_thread.thread.isRunning()
    left = [t for t in threading.enumerate() if t.ident not in threads_before and not t.daemon and t.is_alive()]
    assert left == []
    assert set(child_processes()) <= children_before


def test_every_gui_test_module_applies_the_thread_leak_fixture():
    """Each module that drives Qt in the test process (imports PySide6, pyqtgraph or the window's
    modules, or takes qtbot) lives under tests/gui/, whose conftest.py applies the autouse
    no_thread_left fixture to every test; a module that only names them in a subprocess's script
    does not need it."""
    import ast
    tests = Path(__file__).parents[1]
    conftest = ast.parse((tests / "gui" / "conftest.py").read_text())
    applied = {alias.name for node in ast.walk(conftest) if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert {"no_thread_left", "config_dir"} <= applied
    drivers = 0
    for path in sorted(tests.rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        qt = any(name.split(".")[0] in ("PySide6", "pyqtgraph") or name in ("gui.main_window", "gui.worker")
                 for name in imported)
        takes_qtbot = any(isinstance(node, ast.arg) and node.arg == "qtbot" for node in ast.walk(tree))
        if qt or takes_qtbot:
            drivers += 1
            assert path.is_relative_to(tests / "gui"), path
    assert drivers >= 5   # the check still sees the GUI test modules
