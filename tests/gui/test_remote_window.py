"""The window says when a remote run's client could not keep up (and says nothing when it could)."""
from tests.fakes.gui_fixtures import RUN_TIMEOUT_MS

import pytest
from PySide6 import QtCore

from backend.targets.remote import honesty
from tests.fakes.fake_openai import Behaviour, FakeOpenAI


def use_remote(w, url: str) -> None:
    w.controls.select_remote(url, "m")
    form = w.controls.form
    form.preset_combo.setCurrentText("custom")
    form.arrival_combo.setCurrentText("constant")
    form.source_combo.setCurrentText("synthetic")
    f = form.fields["load"]
    f["requests"].setText("4")
    f["rate"].setText("20")
    f["prompt_len"].setText("8")
    f["output_len"].setText("4")


@pytest.mark.parametrize("limited", [True, False])
def test_the_status_line_says_client_limited_and_by_how_much(qtbot, inprocess_window, monkeypatch, limited):
    # the thresholds set so that any run crosses them (or none can): the detection itself is
    # tested with a really starved client in test_remote_honest.py
    limit = -1.0 if limited else 1e9
    monkeypatch.setattr(honesty, "LOOP_LAG_P99_MS", limit)
    monkeypatch.setattr(honesty, "CLUMPED_SHARE", limit)   # the lag counts once tokens come clumped
    monkeypatch.setattr(honesty, "DISPATCH_LATE_P99_MS", 1e9)
    monkeypatch.setattr(honesty, "CPU_SHARE", 1e9)
    w = inprocess_window
    with FakeOpenAI(Behaviour()) as fake:
        use_remote(w, fake.url)
        with qtbot.waitSignal(w.runFinished, timeout=RUN_TIMEOUT_MS) as done:
            qtbot.mouseClick(w.controls.run_button, QtCore.Qt.MouseButton.LeftButton)
    result = done.args[0]
    assert result.error is None and result.summary.num_finished == 4
    message = w.statusBar().currentMessage()
    assert message.startswith("Finished: 4 requests")
    if limited:
        assert result.summary.client_limited == 1
        assert "CLIENT-LIMITED" in message and "event-loop lag p99" in message and "> -1 ms" in message
    else:
        assert result.summary.client_limited == 0 and "CLIENT-LIMITED" not in message
