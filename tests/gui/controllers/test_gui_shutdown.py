"""Clean shutdown (gui/shutdown.py): SIGTERM, QApplication.quit() and closing the window while a run
goes stop the run, keep its records on disk, join the threads and end the engine process.

The signal and quit() tests run the real app (`main.py --autostart`) in a subprocess, offscreen, on a
long load run of the `tiny` model set up through the window's own saved settings.
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.fakes.gui_fixtures import RUN_TIMEOUT_MS

import pytest

from backend.results.export import read_run
from backend.engine.process import live_engines
from gui.controllers.recent import recent_runs
from gui.shutdown import SignalWaker, kept_runs_dir

ROOT = Path(__file__).resolve().parents[3]
WAIT_S = 180   # a shared CPU can take long to start the engine; a hang still fails

# The window, once its engine has taken steps, asks Qt to quit (as a desktop session's end or a
# script would); then the exit status is the process's. QApplication.exit() ends the loop without
# closing the window first: it used to destroy the running QThread (Qt aborts, exit status 134).
QUIT_SCRIPT = r"""
import sys
from PySide6 import QtCore, QtWidgets
app = QtWidgets.QApplication(sys.argv[:1])
from gui.main_window import MainWindow, run_app

def watch():
    for w in app.topLevelWidgets():
        if isinstance(w, MainWindow) and len(w.store.steps) >= 3:
            QtWidgets.QApplication.{call}
timer = QtCore.QTimer()
timer.timeout.connect(watch)
timer.start(100)
sys.exit(run_app(autostart=True))
"""


def long_run_settings(w) -> None:
    """A load run of tiny that would go on for hours: 100,000 requests at 5 a second."""
    c = w.controls
    c.select_model("tiny")
    c.device_combo.setCurrentText("cpu")
    form = c.form
    form.set_kind("load")
    form.preset_combo.setCurrentText("custom")
    form.arrival_combo.setCurrentText("poisson")
    f = form.fields["load"]
    for key, text in (("requests", "100000"), ("rate", "5"), ("prompt_len", "16"), ("output_len", "32")):
        f[key].setText(text)
    assert not c.errors()


def steps_recorded(tmp: Path) -> bool:
    """Whether the window's recording (under TMPDIR) holds a few steps yet (the header, then rows)."""
    for partial in tmp.glob("phasescope-run-*/steps.csv.partial"):
        if partial.read_text(errors="replace").count("\n") >= 3:
            return True
    return False


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.fixture
def app_env(qtbot, tmp_path):
    """The environment of a subprocess app whose saved settings are a long run; its TMPDIR."""
    from gui.main_window import MainWindow
    w = MainWindow(remember=True)
    qtbot.addWidget(w)
    long_run_settings(w)
    w.close()   # saves the settings into this test's configuration folder
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", TMPDIR=str(tmp), PYTHONUNBUFFERED="1")
    return env, tmp


def start_app(args, env, tmp, wait: bool = True):
    """The app in a subprocess; with `wait`, once its run has recorded a few steps."""
    proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if not wait:
        return proc
    deadline = time.monotonic() + WAIT_S
    while not steps_recorded(tmp):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the app's run did not start (exit {proc.returncode}):\n{out}\n{err}")
        time.sleep(0.2)
    return proc


def check_kept(tmp: Path, err: str) -> Path:
    (kept,) = list(kept_runs_dir().iterdir())
    assert f"its records are kept in {kept}" in err
    run = read_run(kept)
    assert len(run.steps) >= 3 and run.run_id == kept.name
    assert 0 < len(run.requests) < 100_000   # stopped part way, the requests that had arrived kept
    assert not list(tmp.glob("phasescope-run-*"))   # moved, not copied and left behind
    assert recent_runs()[0] == str(kept)           # listed under File > Recent runs next time
    return kept


def test_sigterm_mid_run_keeps_the_records_and_leaves_no_process(app_env):
    env, tmp = app_env
    proc = start_app(["main.py", "--autostart"], env, tmp)
    engines = children(proc.pid)
    assert engines   # the engine's own process
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 143, err   # 128 + SIGTERM, after the window's own shutdown
    assert "SIGTERM: stopping" in err
    assert "Destroyed while thread" not in err and "core dumped" not in err
    check_kept(tmp, err)
    assert not [pid for pid in engines if alive(pid)]


@pytest.mark.parametrize("call", ["quit()", "exit(0)"])
def test_quit_mid_run_joins_the_thread_instead_of_aborting(app_env, call):
    env, tmp = app_env
    # the script quits by itself once its run has steps; its engine process is seen while it runs
    proc = start_app(["-c", QUIT_SCRIPT.replace("{call}", call)], env, tmp, wait=False)
    engines: set[int] = set()
    deadline = time.monotonic() + WAIT_S
    while proc.poll() is None and time.monotonic() < deadline:
        engines.update(children(proc.pid))
        time.sleep(0.1)
    out, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, err
    assert "QThread: Destroyed while thread" not in err
    check_kept(tmp, err)
    assert engines and not [pid for pid in engines if alive(pid)]


def test_closing_the_window_mid_run_keeps_the_run(qtbot, window):
    long_run_settings(window)
    window.start_run()
    qtbot.waitUntil(lambda: len(window.store.steps) >= 3, timeout=RUN_TIMEOUT_MS)
    window.close()
    assert not window.worker_thread.thread.isRunning() and not live_engines()
    (kept,) = list(kept_runs_dir().iterdir())
    assert read_run(kept).steps and recent_runs()[0] == str(kept)


def test_closing_an_idle_window_keeps_nothing(qtbot, window):
    window.close()
    assert not kept_runs_dir().exists()


def test_a_signal_wakes_the_qt_loop(qtbot):
    waker = SignalWaker(signals=(signal.SIGUSR1,))
    try:
        with qtbot.waitSignal(waker.signalled, timeout=5_000) as got:
            os.kill(os.getpid(), signal.SIGUSR1)
        assert got.args == [signal.SIGUSR1]
    finally:
        waker.close()
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL   # the handler found is put back
