"""The window says how many threads its engine takes, of how many cores, and why; `--threads` opens it so."""
from __future__ import annotations

from PySide6 import QtWidgets

from backend.cli.main import main as cli_main
from backend.engine.threads import window_choice
from gui.main_window import MainWindow, run_app


def test_the_status_bar_says_what_the_engine_takes_before_a_run(window):
    choice = window_choice()
    assert window.controls.threads_spin.value() == choice.threads
    assert window.status.engine.text() == choice.describe()
    assert f"of {choice.cores} core" in window.status.engine.text()
    assert choice.reason in window.status.engine.toolTip()
    assert choice.reason in window.controls.threads_spin.toolTip()


def test_a_count_of_ones_own_is_named_as_asked(window):
    window.controls.threads_spin.setValue(1)
    if window_choice().threads != 1:   # on a 2-core machine 1 is the default already
        assert "asked" in window.status.engine.toolTip()
    assert window.status.engine.text().startswith("engine: 1 thread of ")


def test_run_app_takes_the_threads_asked_for(qtbot, monkeypatch):
    seen = {}

    def fake_exec(app):
        w = next(x for x in QtWidgets.QApplication.topLevelWidgets() if isinstance(x, MainWindow) and x.isVisible())
        seen["spin"], seen["tip"] = w.controls.threads_spin.value(), w.status.engine.toolTip()
        w.close()
        return 0

    monkeypatch.setattr(QtWidgets.QApplication, "exec", fake_exec)
    assert run_app(threads=1) == 0
    assert seen["spin"] == 1 and "asked" in seen["tip"]


def test_the_command_line_passes_threads_to_the_window():
    asked = {}
    assert cli_main(["--threads", "3"], open_window=lambda **kw: asked.update(kw) or 0) == 0
    assert asked["threads"] == 3
    assert cli_main([], open_window=lambda **kw: asked.update(kw) or 0) == 0
    assert asked["threads"] is None
