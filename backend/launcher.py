"""Every child process backend starts, started one way: the launcher.

The window's engine process (backend/engine/process.py), the disaggregated policy's
prefill and decode workers (backend/targets/disaggregated/worker.py) and the remote target's
client workers (backend/targets/remote/worker.py) are each a fresh interpreter of
`sys.executable` that imports the parent's path and calls one entry point (never a fork: torch
and Qt do not survive one; never multiprocessing's spawn, which re-runs the caller's main module
in the child and starts a resource tracker beside it).

- `start_child`: the child gets one end of a socketpair as a file descriptor (the parent's end is
  a multiprocessing Connection, carrying backend.protocol's frames both ways; when the child dies it reads EOF).
- `start_piped_child`: the child talks over its stdin and stdout (the remote client workers,
  whose parent is an asyncio loop).
- `child_started`: what every child does first: the kernel ends it when its parent ends
  (PR_SET_PDEATHSIG on Linux, however the parent ends) and Ctrl+C is left to the parent;
  `pin_to` puts a child on the cores it was given.
- `describe_exit` says in words how a child ended; `end_process` ends one, terminate then kill.
"""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from multiprocessing.connection import Connection

Child = subprocess.Popen   # a started child, as the callers hold it

# The child's first line: the parent's import path (after "--"), then module.function(*args).
_BOOT = ("import sys; i = sys.argv.index('--'); sys.path[:0] = sys.argv[i + 1:]; import importlib; "
         "getattr(importlib.import_module(sys.argv[1]), sys.argv[2])(*sys.argv[3:i])")


def boot_command(module: str, function: str, *args: str) -> list[str]:
    """The command line of a child that runs module.function(*args) with this process's import path."""
    return [sys.executable, "-c", _BOOT, module, function, *args, "--", *sys.path]


def start_child(module: str, function: str, extra_fds: tuple[int, ...] = ()) -> tuple[Child, Connection]:
    """A child running module.function(fd) with its end of a new socketpair; (the process, our end).

    `extra_fds` are handed on as well (the same numbers in the child)."""
    ours, theirs = socket.socketpair()
    with theirs:   # after the start only the child holds its end: when it dies, ours reads EOF
        fd = theirs.fileno()
        process = subprocess.Popen(boot_command(module, function, str(fd)), pass_fds=(fd, *extra_fds),
                                   stdin=subprocess.DEVNULL)
    return process, Connection(ours.detach())


async def start_piped_child(module: str, function: str, stream_limit: int) -> asyncio.subprocess.Process:
    """A child running module.function() that reads its stdin and writes its stdout and stderr to us."""
    return await asyncio.create_subprocess_exec(
        *boot_command(module, function), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, limit=stream_limit)


def child_started() -> None:
    """A child's first call: die with the parent and leave Ctrl+C to it."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl+C in the terminal is the parent's to handle


def pin_to(cores: list[int]) -> None:
    """This process, and the threads it starts later (torch's pool), on `cores`: call it before torch loads."""
    if cores and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, cores)
        except OSError:
            pass


def _die_with_parent() -> None:
    """On Linux the kernel kills this process when its parent ends, however the parent ends."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


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


def wait_for(process: Child, wait_s: float) -> bool:
    """Whether the child ended (and was reaped) within wait_s seconds."""
    try:
        process.wait(wait_s)
        return True
    except subprocess.TimeoutExpired:
        return False


def end_process(process: Child, wait_s: float = 1.0) -> None:
    """Terminate, then kill if it does not go; reaped either way."""
    for end in (process.terminate, process.kill):
        if process.poll() is None:
            end()
            wait_for(process, wait_s)
