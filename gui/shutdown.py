"""Clean shutdown: SIGTERM, SIGINT and QApplication.quit() take the window's own way out.

The way out (MainWindow.shut_down) stops a run at its next step boundary, joins the worker thread,
ends the engine process, and keeps the stopped run's records: the worker streamed them into a
temporary folder, which is moved to the runs folder (kept_runs_dir) instead of being removed, and
listed under File > Recent runs. Without this, QApplication.exit() (or quit() where the windows are
not closed first) during a run destroyed a running QThread (Qt aborts: "QThread: Destroyed while
thread is still running", a core dump), and SIGTERM
(a session's logout, `kill`) ended the process by Python's default, leaving the engine process and
losing the run.

A Python signal handler runs only when the interpreter gets control, and Qt's event loop, in C++,
may not give it for a long time: Python's C-level handler writes the signal's number to a socket
(signal.set_wakeup_fd), and a QSocketNotifier on the other end wakes the loop.

Exit status: 143 after SIGTERM, 130 after SIGINT (Ctrl+C in the terminal, as the CLI's), 0 after
quit() or the window's close, exit()'s own otherwise.
"""
from __future__ import annotations

import shutil
import signal
import socket
import sys
import time
from pathlib import Path

from PySide6 import QtCore

from backend.files import data_home
from backend.results.export import read_run
from backend.errors import InputError

EXIT_STATUS = {signal.SIGTERM: 128 + signal.SIGTERM, signal.SIGINT: 128 + signal.SIGINT}


def kept_runs_dir() -> Path:
    """Where a run stopped by the window's shutdown is kept: $XDG_DATA_HOME/phasescope/runs."""
    return data_home() / "phasescope" / "runs"


def keep_run(folder: Path) -> Path:
    """Move a stopped run's recording into the runs folder, named by its run id."""
    try:
        run_id = read_run(folder).run_id
    except (InputError, OSError):   # an incomplete record still goes along: it is what was measured
        run_id = ""
    root = kept_runs_dir()
    root.mkdir(parents=True, exist_ok=True)
    name = run_id or time.strftime("%Y%m%d-%H%M%S")   # a run id starts with its date and time
    target = root / name
    n = 1
    while target.exists():
        n += 1
        target = root / f"{name}-{n}"
    return Path(shutil.move(str(folder), str(target)))


def say(message: str) -> None:
    """A line on stderr: after a signal there may be no window left to show it in."""
    print(f"phasescope: {message}", file=sys.stderr, flush=True)


class SignalWaker(QtCore.QObject):
    """Emits `signalled(signum)` inside Qt's event loop for each of `signals` the process receives."""

    signalled = QtCore.Signal(int)

    def __init__(self, signals=(signal.SIGTERM, signal.SIGINT), parent=None):
        super().__init__(parent)
        self._read, self._write = socket.socketpair()
        for end in (self._read, self._write):
            end.setblocking(False)
        self._old_fd = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
        # a Python handler (not SIG_DFL) is what makes Python catch the signal and write its number
        self._old = {signum: signal.signal(signum, _noted) for signum in signals}
        self.notifier = QtCore.QSocketNotifier(self._read.fileno(), QtCore.QSocketNotifier.Type.Read, self)
        self.notifier.activated.connect(self._drain)

    def _drain(self, *_) -> None:
        try:
            data = self._read.recv(64)
        except (BlockingIOError, InterruptedError):
            return
        for signum in data:
            if signum in self._old:
                self.signalled.emit(signum)

    def close(self) -> None:
        """Put back the handlers and wakeup descriptor found (once; again does nothing)."""
        if self._read.fileno() < 0:
            return
        self.notifier.setEnabled(False)
        for signum, handler in self._old.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(self._old_fd)
        self._read.close()
        self._write.close()


def _noted(signum, frame) -> None:
    """The byte on the wakeup socket is what counts: the SignalWaker acts on it."""


def quit_on_signals(app, window) -> SignalWaker:
    """SIGTERM and SIGINT close the window (its shutdown) and end the loop with 128 + the signal;
    QApplication.quit() runs the same shutdown before the loop returns."""
    waker = SignalWaker(parent=app)

    def on_signal(signum: int) -> None:
        say(f"{signal.Signals(signum).name}: stopping")
        window.close()
        app.exit(EXIT_STATUS.get(signum, 1))
    waker.signalled.connect(on_signal)
    app.aboutToQuit.connect(window.shut_down)
    app.aboutToQuit.connect(waker.close)
    return waker


def stop_worker(worker_thread, running: bool) -> Path | None:
    """The worker's part of the window's way out (MainWindow.shut_down): stop a run at its next step,
    join the thread, end the engine process; the recording of a run that was `running` is kept in the
    runs folder. The folder it was kept in, or None."""
    kept: list[Path] = []
    keep = (lambda folder: kept.append(_keep_stopped_run(folder))) if running else None
    worker_thread.stop_and_join(keep)
    if not kept:
        return None
    say(f"the run under way was stopped; its records are kept in {kept[0]}")
    return kept[0]


def _keep_stopped_run(folder: Path) -> Path:
    try:
        return keep_run(folder)
    except OSError as exc:   # the folder stays where the worker wrote it, and is not removed
        say(f"could not move the stopped run's records into {kept_runs_dir()}: {exc}")
        return folder
