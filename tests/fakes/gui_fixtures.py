"""Shared pieces of the GUI tests: offscreen Qt, a leak check for worker threads, hand-made records.

Import this module before anything imports Qt (it sets the offscreen platform), and import
the helpers by name (tests/gui/conftest.py applies the fixtures to every GUI test).
"""
import gc
import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"

import pytest  # noqa: E402

from backend.events import RequestsArrived  # noqa: E402
from backend.records import Phase, RecordBatch, RequestRecord, RequestStatus, StepRecord, TokenRecord  # noqa: E402


@pytest.fixture(autouse=True)
def no_thread_left():
    """Fails a test that leaves a worker QThread or an engine process running."""
    from backend.engine.process import live_engines
    from gui.worker import running_threads
    gc.collect()   # what earlier tests left in cycles is freed here, on the main thread (gui/collector.py)
    if not gc.get_freeze_count():   # what lives now (Qt, torch, pyqtgraph) is never scanned again (130 ms a collect)
        gc.freeze()
    yield
    leaked = running_threads()
    assert not leaked, f"{len(leaked)} worker thread(s) still running after the test"
    engines = live_engines()
    assert not engines, f"engine process(es) {engines} still running after the test"


@pytest.fixture(autouse=True)
def config_dir(tmp_path, monkeypatch):
    """Calibration writes its profile here, never into the user's configuration folder; the window's
    settings (window.ini) live here too, and a run stopped by closing the window is kept under this
    test's own data folder."""
    monkeypatch.setenv("PHASESCOPE_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))


def step(i: int, phase: Phase, start: float, duration: float, prefill: int = 0, decode: int = 0,
         running: int = 0, waiting: int = 0, kv: int = 0, capacity: int = 1024) -> StepRecord:
    return StepRecord("run-test", i, phase, num_requests=(1 if prefill else 0) + decode,
                      num_prefill_requests=1 if prefill else 0, num_decode_requests=decode,
                      num_tokens=prefill + decode, num_prefill_tokens=prefill, num_decode_tokens=decode,
                      context_tokens=prefill + decode, max_context_tokens=prefill + decode, start_ms=start,
                      duration_ms=duration, kv_tokens=kv, kv_capacity=capacity, num_waiting=waiting,
                      num_running=running)


def two_request_run() -> list:
    """Events of a tiny hand-made run: two requests, prompts of 100 and 50 tokens, 4 and 3 output tokens.

    Request 0 arrives at 0 and is prefilled in [0, 10]; request 1 arrives at 5 and is
    prefilled in [10, 15] (each admission reported with its step); then decode steps of 2 ms.
    """
    events = [RequestsArrived([0], [0.0], [100])]
    events.append(RecordBatch(steps=[step(0, Phase.PREFILL, 0.0, 10.0, prefill=100, running=1, waiting=1, kv=101)],
                              tokens=[TokenRecord(0, 0, 10.0, 7)], text={0: "Hello"}, scheduled={0: 0.0}))
    events.append(RequestsArrived([1], [5.0], [50]))
    events.append(RecordBatch(steps=[step(1, Phase.PREFILL, 10.0, 5.0, prefill=50, running=2, kv=152)],
                              tokens=[TokenRecord(1, 0, 15.0, 8)], text={1: "Hi"}, scheduled={1: 10.0}))
    t, kv = 15.0, 152
    outputs = {0: 1, 1: 1}
    for i in range(2, 5):
        batch = RecordBatch()
        for rid, limit in ((0, 4), (1, 3)):
            if outputs[rid] < limit:
                batch.tokens.append(TokenRecord(rid, outputs[rid], t + 2.0, 9))
                batch.text[rid] = " there" if rid == 0 else "!"
                outputs[rid] += 1
        kv += len(batch.tokens)
        batch.steps.append(step(i, Phase.DECODE, t, 2.0, decode=len(batch.tokens), running=2, kv=kv))
        t += 2.0
        events.append(batch)
    finished = RecordBatch(requests=[
        RequestRecord(1, RequestStatus.FINISHED, 50, 3, arrival_ms=5.0, scheduled_ms=10.0, first_token_ms=15.0,
                      finish_ms=19.0, ttft_ms=10.0, tpot_ms=2.0, e2e_ms=14.0, queue_ms=5.0, finish_reason="length",
                      text="Hi!!"),
        RequestRecord(0, RequestStatus.FINISHED, 100, 4, arrival_ms=0.0, scheduled_ms=0.0, first_token_ms=10.0,
                      finish_ms=21.0, ttft_ms=10.0, tpot_ms=11.0 / 3, e2e_ms=21.0, queue_ms=0.0,
                      finish_reason="length", text="Hello there there there"),
    ])
    events.append(finished)
    return events


RUN_TIMEOUT_MS = 120_000   # a shared CPU can be slow to load and warm up; a hang still fails


@pytest.fixture
def window(qtbot):
    from gui.main_window import MainWindow
    w = MainWindow()
    qtbot.addWidget(w)   # closed after the test: closeEvent stops the run and joins the thread
    w.show()
    return w


@pytest.fixture
def inprocess_window(qtbot):
    """A window whose runs execute in this process, for tests that inject faults into the backend
    with monkeypatch (which cannot reach the engine process)."""
    from functools import partial
    from backend.session import execute
    from gui.main_window import MainWindow
    from gui.worker import RunWorker
    w = MainWindow(worker=RunWorker(run=partial(execute, retain_records=False)))
    qtbot.addWidget(w)
    w.show()
    return w


def run_to_end(qtbot, w):
    """Press Run and wait for the run to end (its RunFinished); the views repainted after it."""
    from PySide6 import QtCore
    with qtbot.waitSignal(w.runFinished, timeout=RUN_TIMEOUT_MS) as done:
        qtbot.mouseClick(w.controls.run_button, QtCore.Qt.MouseButton.LeftButton)
    w.repaint_views()
    return done.args[0]


def use_tiny(w, prompt_len="16", output_len="6", batch="2") -> None:
    w.controls.select_model("tiny")
    w.controls.device_combo.setCurrentText("cpu")
    w.controls.form.set_kind("batch")
    w.controls.form.use_synthetic_prompt()   # random ids of the length below, not the default question
    f = w.controls.form.fields["batch"]
    f["prompt_len"].setText(prompt_len)
    f["output_len"].setText(output_len)
    f["batch"].setText(batch)
