"""The window's runs go to the engine's own process: same records as headless, crashes survived,
Stop certain, nothing left behind when the window closes."""
from tests.fakes.gui_fixtures import RUN_TIMEOUT_MS, use_tiny

import csv
import os
import signal
import time

import pytest

from backend.engine.process import live_engines
from backend.events import ModelLoaded
from backend.session import execute
from gui.main_window import MainWindow
from gui.state.run_store import PHASE_CODE


def run_to_end(qtbot, w: MainWindow):
    with qtbot.waitSignal(w.runFinished, timeout=RUN_TIMEOUT_MS) as done:
        w.start_run()
    w.repaint_views()
    return done.args[0]


def loaded_events(qtbot, w: MainWindow) -> list[ModelLoaded]:
    seen = []
    w.worker.event.connect(lambda e: seen.append(e) if isinstance(e, ModelLoaded) else None)
    return seen


def test_a_window_run_executes_in_a_child_process_with_the_records_of_a_headless_run(qtbot, window):
    use_tiny(window)
    window.controls.threads_spin.setValue(1)
    result = run_to_end(qtbot, window)
    pid = window.worker.engine.pid
    assert pid is not None and pid != os.getpid() and pid in live_engines()
    assert result.data.info.host.threads == 1 and len(result.data.info.host.affinity) == 1
    assert window.status.engine.text().startswith("engine: 1 thread on core")

    config = window.controls.build_config()
    config.threads = None   # in this process: leave the test's own cores alone
    headless = execute(config, lambda e: None, lambda: False)
    assert window.store.num_steps == len(headless.data.steps)
    assert list(window.store.steps.column("phase")) == [PHASE_CODE[s.phase] for s in headless.data.steps]
    assert list(window.store.steps.column("num_tokens")) == [s.num_tokens for s in headless.data.steps]
    assert window.store.num_requests == len(headless.data.requests) == 2
    assert result.summary.num_finished == headless.summary.num_finished == 2
    assert sum(r.output_tokens for r in result.data.requests) == 12


def test_a_second_run_on_the_same_model_does_not_reload_it(qtbot, window):
    use_tiny(window)
    seen = loaded_events(qtbot, window)
    run_to_end(qtbot, window)
    pid = window.worker.engine.pid
    run_to_end(qtbot, window)
    assert window.worker.engine.pid == pid
    assert [e.reused for e in seen] == [False, True]


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGKILL])
def test_a_killed_engine_leaves_the_window_up_with_its_records(qtbot, window, tmp_path, sig):
    use_tiny(window, prompt_len="16", output_len="1500", batch="1")
    window.start_run()
    qtbot.waitUntil(lambda: window.store.num_steps >= 20, timeout=RUN_TIMEOUT_MS)
    pid = window.worker.engine.pid
    with qtbot.waitSignal(window.runFinished, timeout=RUN_TIMEOUT_MS) as done:
        os.kill(pid, sig)
    result = done.args[0]
    assert result.error.startswith(f"engine process ended by signal {int(sig)}")
    assert window.last_error.startswith("the run failed part way: engine process ended by signal")
    window.error_box.close()
    kept = window.store.num_steps
    assert kept >= 20 and not window.running
    qtbot.waitUntil(lambda: window.store.source is not None, timeout=10_000)
    assert window.files.export_csv(str(tmp_path / "export"))
    with open(tmp_path / "export" / "steps.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == kept

    use_tiny(window)
    again = run_to_end(qtbot, window)
    assert again.error is None and window.worker.engine.pid not in (None, pid)


def test_stop_during_a_long_prefill_ends_the_run_within_3_s(qtbot, window):
    window.controls.select_model("smollm2-135m")
    window.controls.device_combo.setCurrentText("cpu")
    window.controls.threads_spin.setValue(1)
    window.controls.form.set_kind("batch")
    window.controls.form.use_synthetic_prompt()
    fields = window.controls.form.fields["batch"]
    fields["prompt_len"].setText("2000")
    fields["output_len"].setText("4")
    fields["batch"].setText("4")
    statuses = []
    window.worker.event.connect(lambda e: statuses.append(e) if getattr(e, "message", None) == "running" else None)
    window.start_run()
    qtbot.waitUntil(lambda: bool(statuses), timeout=RUN_TIMEOUT_MS)
    qtbot.wait(300)   # the prefill of 8,000 tokens is under way
    with qtbot.waitSignal(window.runFinished, timeout=RUN_TIMEOUT_MS) as done:
        started = time.monotonic()
        window.stop_run()
    assert time.monotonic() - started < 3.0
    assert done.args[0].stopped and not window.running
    assert window.worker.engine.pid is None   # ended; the next run starts a fresh one


def test_closing_the_window_mid_run_leaves_no_process(qtbot):
    w = MainWindow()
    w.show()
    use_tiny(w, output_len="1500", batch="1")
    w.start_run()
    qtbot.waitUntil(lambda: w.store.num_steps >= 5, timeout=RUN_TIMEOUT_MS)
    pid = w.worker.engine.pid
    assert pid in live_engines()
    w.close()
    assert live_engines() == []
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
