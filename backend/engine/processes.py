"""Child engine processes: a fresh interpreter on one socket, and how one ended, in words.

Both the window's engine process (backend/engine_process.py) and the disaggregated policy's
workers (backend/engine/pd_worker.py) start this way: a plain subprocess of `sys.executable`
with one end of a socketpair passed as a file descriptor (never a fork: torch and Qt do not
survive one; never multiprocessing's spawn, which re-runs the caller's main module in the child).
"""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
from multiprocessing.connection import Connection

# The child's first line: the parent's import path, then the entry point with its socket's fd.
_BOOT = "import sys; sys.path[:0] = sys.argv[3:]; from {module} import {function}; {function}(int(sys.argv[1]))"


def start_child(module: str, function: str, extra_fds: tuple[int, ...] = ()) -> tuple[subprocess.Popen, Connection]:
    """A child running module.function(fd) with its end of a new socketpair; (the process, our end).

    `extra_fds` are handed on as well (the same numbers in the child)."""
    ours, theirs = socket.socketpair()
    with theirs:   # after the start only the child holds its end: when it dies, ours reads EOF
        fd = theirs.fileno()
        boot = _BOOT.format(module=module, function=function)
        process = subprocess.Popen([sys.executable, "-c", boot, str(fd), "-", *sys.path],
                                   pass_fds=(fd, *extra_fds), stdin=subprocess.DEVNULL)
    return process, Connection(ours.detach())


def describe_exit(exitcode: int | None) -> str:
    """How a child process ended, for one line: "ended by signal 11 (SIGSEGV)"."""
    if exitcode is None:
        return "stopped answering"
    if exitcode < 0:
        number = -exitcode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "unknown signal"
        hint = "; the system may have run out of memory" if number == signal.SIGKILL else ""
        return f"ended by signal {number} ({name}{hint})"
    return f"exited with status {exitcode}"


def end_process(process: subprocess.Popen, wait_s: float = 1.0) -> None:
    """Terminate, then kill if it does not go; reaped either way."""
    for end in (process.terminate, process.kill):
        if process.poll() is None:
            end()
            try:
                process.wait(wait_s)
            except subprocess.TimeoutExpired:
                pass
