"""Faults the tests inject: a disk that fills up, and a long `load` run to stop or kill mid-way."""
import errno
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fill_disk(monkeypatch, files_that_fit: int = 0) -> None:
    """From now on, after `files_that_fit` more files, every file opened through os.fdopen
    fails its writes with ENOSPC."""
    real_fdopen = os.fdopen
    opened = []

    def full_disk(fd, *args, **kwargs):
        f = real_fdopen(fd, *args, **kwargs)
        opened.append(fd)
        if len(opened) > files_that_fit:
            def write(_text):
                raise OSError(errno.ENOSPC, "No space left on device")
            f.write = write
        return f
    monkeypatch.setattr(os, "fdopen", full_disk)


def start_load_run(out_dir, stdout=subprocess.PIPE) -> subprocess.Popen:
    """A `main.py load` of 400 requests on `tiny`, returned once its first progress line is out.

    That line comes a second after the model loaded, so the run is under way and its record
    writer (made before the model loaded) has flushed at least once. Each request decodes 600
    tokens (about a second on tiny) while new ones arrive 20 a second, so several are always
    running: a stop always finds some unfinished (with 40 tokens, none were, one time in ten).
    """
    proc = subprocess.Popen([sys.executable, "main.py", "load", "--model", "tiny", "--requests", "400",
                             "--arrival", "constant", "--rate", "20", "--output-len", "600", "--ignore-eos",
                             "--out", str(out_dir)], cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if line.startswith("  arrived"):
            break
    return proc
