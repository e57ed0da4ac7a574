"""The window remembers its settings between sessions (gui/settings.py), in this test's own folder."""

from pathlib import Path

from PySide6 import QtCore, QtWidgets

from gui.main_window import MainWindow
from gui.worker import RunWorker
from gui.settings import open_settings, remember_folder, settings_path, start_folder


def no_run(config, emit, should_stop):
    raise AssertionError("these tests start no run")


def new_window(qtbot) -> MainWindow:
    """The app's window: it remembers (a window made by code does not, below). Its worker has no engine
    process: nothing runs here, and one started ahead for the model would only be ended at the close."""
    w = MainWindow(worker=RunWorker(run=no_run), remember=True)
    qtbot.addWidget(w)
    w.show()
    return w


def test_the_settings_file_is_the_tests_own(tmp_path):
    # the config_dir fixture points PHASESCOPE_CONFIG_DIR here: the user's settings are never touched
    assert settings_path() == tmp_path / "config" / "window.ini"
    assert Path(open_settings().fileName()) == settings_path()


def test_model_profile_form_and_docks_come_back_in_the_next_session(qtbot, tmp_path):
    first = new_window(qtbot)
    c = first.controls
    c.select_model("tiny")
    c.select_profile("h100-sxm")
    c.threads_spin.setValue(1)
    form = c.form
    form.set_kind("load")
    form.preset_combo.setCurrentText("custom")
    form.arrival_combo.setCurrentText("closed")
    form.fields["load"]["requests"].setText("77")
    form.fields["load"]["concurrency"].setText("5")
    form.policy_combo.setCurrentText("chunked")
    form.fields["sampling"]["seed"].setText("42")
    form.ignore_eos.setChecked(True)
    form.prompt_edit.setPlainText("Why is the sky blue?")
    form.think_spin.setValue(250.0)
    first.text_dock.hide()                 # a dock closed by the user stays closed
    first.close()
    assert settings_path().is_file()

    second = new_window(qtbot)
    c2, form2 = second.controls, second.controls.form
    assert c2.model_name() == "tiny"
    assert c2.profile_combo.currentData() == "h100-sxm"
    assert form2.kind() == "load"
    assert form2.preset_combo.currentText() == "custom"
    assert form2.arrival_combo.currentText() == "closed"
    assert form2.fields["load"]["requests"].text() == "77"
    assert form2.fields["load"]["concurrency"].text() == "5"
    assert form2.policy_combo.currentText() == "chunked"
    assert form2.fields["sampling"]["seed"].text() == "42"
    assert form2.ignore_eos.isChecked()
    assert form2.prompt_edit.toPlainText() == "Why is the sky blue?"
    assert form2.think_spin.value() == 250.0
    assert not second.text_dock.isVisibleTo(second) and second.metrics_dock.isVisibleTo(second)
    # the restored settings build the same run
    config = c2.build_config()
    assert config.mode == "load" and config.engine.policy == "chunked" and config.workload.num_requests == 77


def test_the_api_key_is_never_written(qtbot):
    w = new_window(qtbot)
    w.controls.select_remote("http://127.0.0.1:9/v1", "served-name", api_key="sk-secret-123")
    w.close()
    text = settings_path().read_text()
    assert "sk-secret-123" not in text
    assert "served-name" in text   # the rest of the remote settings are kept
    again = new_window(qtbot)
    assert again.controls.is_remote() and again.controls.served_field.text() == "served-name"
    assert again.controls.key_edit.text() != "sk-secret-123"


def test_a_saved_value_that_no_longer_fits_is_skipped(qtbot, tmp_path):
    profile = tmp_path / "mine.toml"
    first = new_window(qtbot)
    first.controls.form.set_kind("sweep-batch")
    first.controls.form.fields["sweep-batch"]["batches"].setText("1,2,3")
    first.close()
    s = open_settings()
    text = s.value("window/controls")
    # a model gone from the disk and a profile file deleted since the last session
    s.setValue("window/controls", text.replace('"model": "smollm2-135m"', '"model": "/gone/model.gguf"')
               .replace('"profile": "cpu"', f'"profile": "{profile}"'))
    s.sync()
    second = new_window(qtbot)   # opens; the defaults stand where the saved values do not fit
    assert second.controls.model_combo.currentIndex() >= 0
    assert second.controls.profile_combo.currentData() != str(profile)
    assert second.controls.form.fields["sweep-batch"]["batches"].text() == "1,2,3"


def test_a_broken_settings_file_opens_the_default_window(qtbot):
    settings_path().parent.mkdir(parents=True, exist_ok=True)
    settings_path().write_text("[window]\ncontrols=\"{not json\"\ngeometry=12\n")
    w = new_window(qtbot)
    assert w.controls.form.kind() == "batch" and w.controls.build_config().mode == "batch"


def test_dialogs_open_where_they_were_used_last(tmp_path):
    runs = tmp_path / "runs"
    (runs / "a").mkdir(parents=True)
    assert start_folder("runs") == ""
    remember_folder("runs", str(runs))
    assert start_folder("runs") == str(runs)
    remember_folder("plots", str(runs / "a" / "strip.png"))   # a file: its folder
    assert start_folder("plots") == str(runs / "a")
    (runs / "a").rmdir()
    assert start_folder("plots") == ""   # a folder gone since: the dialog's own default


def test_the_geometry_is_restored(qtbot):
    first = new_window(qtbot)
    # the offscreen screen (800 x 800) is narrower than the window's least width: as narrow as it goes,
    # a size larger than the screen would give way to a first start's (tests/gui/test_gui_layout.py)
    first.resize(first.minimumSizeHint().width(), 700)
    QtWidgets.QApplication.processEvents()
    size = first.size()
    first.close()
    second = new_window(qtbot)
    assert second.size() == size != QtCore.QSize(1400, 900)


def test_a_window_made_by_code_neither_reads_nor_writes_the_settings(qtbot):
    first = new_window(qtbot)
    first.controls.form.fields["batch"]["output_len"].setText("99")
    first.close()
    saved = settings_path().read_text()
    plain = MainWindow(worker=RunWorker(run=no_run))   # a test's or a benchmark's window: the defaults, whatever was saved
    qtbot.addWidget(plain)
    assert plain.controls.form.fields["batch"]["output_len"].text() == "64"
    plain.controls.form.fields["batch"]["output_len"].setText("5")
    plain.close()
    assert settings_path().read_text() == saved
