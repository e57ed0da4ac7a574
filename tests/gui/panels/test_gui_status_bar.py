"""The status bar's messages are never clipped: the permanent labels elide first (gui/panels/status_bar.py)."""

from PySide6 import QtWidgets

from backend.events import EngineStatus
from gui.panels.status_bar import ElidedLabel, MessageBar

# the message that was cut at 1,400 px ("Finished: precision swe...")
PRECISION = ("Finished: precision sweep, 4 precisions measured; note: bfloat16 runs on the CPU's AVX512-BF16 unit "
             "here, q4_1 through the C kernels")


def fill_labels(w) -> None:
    """Long permanent labels, as a real run on a CPU shows them."""
    w.status.show_choices("smollm2-135m", "cpu (AMD EPYC 9R14 96-Core Processor, 2 threads)", "float32",
                          "This machine (measured, calibrated 2026-12-02)")
    w.status.show_engine(EngineStatus(1234, 1, [1], 1.0, 1.0, False))
    w.status.show_window_cpu(0.12, 30)


def settle(w, width: int, height: int = 900) -> None:
    w.resize(width, height)
    QtWidgets.QApplication.processEvents()
    w.statusBar().fit_message()
    QtWidgets.QApplication.processEvents()


def test_a_long_message_is_whole_at_1400_px_and_the_labels_give_way(qtbot, window):
    fill_labels(window)
    bar = window.statusBar()
    assert isinstance(bar, MessageBar)
    window.statusBar().showMessage(PRECISION)
    settle(window, 1400)
    assert bar.currentMessage() == PRECISION
    label = bar.message
    assert label.fontMetrics().horizontalAdvance(PRECISION) <= label.contentsRect().width()
    assert not bar.is_clipped()
    # the permanent labels are elided, but keep their whole text (and show it on hover)
    elided = [l for l in (*window.status.labels.values(), window.status.engine) if l.is_elided()]
    assert elided
    assert all(l.shown_text().endswith("…") and l.toolTip() for l in elided)
    assert window.status.labels["device"].text().startswith("device: cpu (AMD EPYC")


def test_a_short_message_leaves_the_labels_whole(qtbot, window):
    fill_labels(window)
    window.statusBar().showMessage("Finished: 8 requests")
    settle(window, 1920, 1080)
    assert not window.statusBar().is_clipped()
    assert not any(l.is_elided() for l in window.status.labels.values())


def test_a_message_wider_than_the_window_wraps_instead_of_losing_its_end(qtbot, window):
    fill_labels(window)
    bar = window.statusBar()
    long = "; ".join([PRECISION] * 3)
    bar.showMessage(long)
    settle(window, 900)
    QtWidgets.QApplication.processEvents()
    label = bar.message
    assert label.fontMetrics().horizontalAdvance(long) > label.width()      # it needs more than one line
    assert label.height() >= label.heightForWidth(label.width())            # ... and has them
    assert not bar.is_clipped()
    assert bar.height() > 2 * label.fontMetrics().height()


def test_the_bar_keeps_qstatusbars_meaning(qtbot, window):
    bar = window.statusBar()
    bar.showMessage("for a moment", 50)
    assert bar.currentMessage() == "for a moment"
    qtbot.waitUntil(lambda: bar.currentMessage() == "")
    bar.showMessage("stays")
    bar.clearMessage()
    assert bar.currentMessage() == ""


def test_an_elided_label_keeps_its_own_tooltip(qtbot):
    label = ElidedLabel()
    qtbot.addWidget(label)
    label.setToolTip("what this counts")
    label.setText("engine: " + "x" * 200)
    label.resize(60, 20)
    label.show()
    QtWidgets.QApplication.processEvents()
    assert label.is_elided() and label.toolTip() == "what this counts"
    assert label.minimumSizeHint().width() < 30


def test_a_stage_says_its_seconds_since_the_run_began_and_counts_on(qtbot, monkeypatch):
    """The first run's stages (compiling, loading, probing, warming up) each show the time since the
    run began, ticking each second while the stage lasts; running needs no bar and no clock."""
    import types
    from backend.events import Progress
    from gui.panels import status as status_panel
    now = [100.0]
    monkeypatch.setattr(status_panel, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    bar = QtWidgets.QStatusBar()
    qtbot.addWidget(bar)
    run = status_panel.RunStatus(bar)
    run.start_clock()
    now[0] += 2.4
    run.show_progress(Progress("loading smollm2-135m", None))
    assert run.progress.format() == "loading smollm2-135m (2 s)"
    now[0] += 3.0
    run._tick.timeout.emit()            # the clock's next second
    assert run.progress.format() == "loading smollm2-135m (5 s)"
    assert run._tick.isActive()
    run.show_progress(Progress("running", None))
    assert run.progress.format() == "running" and run.progress.isHidden()
    run.hide_progress()
    assert not run._tick.isActive()
