"""How soon the app shows its first decode step: the first start on a machine against the later ones.

    python -m bench.second_start [--starts 6] [--readme]

Each start is a fresh process doing what `main.py --autostart` does (the window with the user's
remembered settings, the default run started as soon as it opens) under `app.exec()`, driven by
Qt's own signals only, and quits at the first decode step the window receives. The clock runs from
just before the process is started to that step (CLOCK_MONOTONIC is one clock for every process on
Linux); each stage the status bar shows (engine, compiling, loading, probing, warming up, running)
is timed the same way. The first start runs with an empty kernels and fidelity cache of its own
(XDG_CACHE_HOME: the one-time costs a new machine pays); the later ones reuse that cache, as a
user's second start does. Prints one row per start and the median of the later ones, as Markdown
(--readme: into bench/README.md too). Under Xvfb for a real window (DISPLAY set), else offscreen.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, add_readme_flag, log, measured_line, publish


def one_start(result_path: str) -> int:
    """In its own process: main.py --autostart's window, quitting at the first decode step."""
    os.environ.setdefault("QT_QPA_PLATFORM", "xcb" if os.environ.get("DISPLAY") else "offscreen")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # as main.py sets it
    from gui.app import start_engine
    engine = start_engine()   # as gui/app.py's open_window does, before the window's imports
    from PySide6 import QtCore, QtWidgets
    from backend.events import Progress
    from backend.records import Phase
    from gui.main_window import app_window

    app = QtWidgets.QApplication(sys.argv[:1])
    window = app_window(engine)

    class Probe(QtCore.QObject):
        """Lives in the window's thread, so its slots run there."""

        def __init__(self):
            super().__init__()
            self.stages: list[tuple[str, float]] = [("window shown", time.monotonic())]

        @QtCore.Slot(object)
        def on_event(self, event) -> None:
            if isinstance(event, Progress):
                self.stages.append((event.message, time.monotonic()))

        @QtCore.Slot(object)
        def on_records(self, batch) -> None:
            if self.stages[-1][0] != "first decode step" and any(step.phase is Phase.DECODE for step in batch.steps):
                self.stages.append(("first decode step", time.monotonic()))
                Path(result_path).write_text(json.dumps(self.stages))
                QtCore.QTimer.singleShot(0, window.close)
                QtCore.QTimer.singleShot(0, app.quit)

    probe = Probe()
    window.worker.event.connect(probe.on_event)
    window.worker.records.connect(probe.on_records)
    window.showMaximized() if window.maximise_at_start else window.show()
    QtCore.QTimer.singleShot(0, window.start_run)    # as --autostart does
    QtCore.QTimer.singleShot(120_000, app.quit)       # a start that never decodes ends the process, not the bench
    return app.exec()


def timed_start(cache_home: str) -> list[tuple[str, float]]:
    """(stage, seconds since the process was started) of one start."""
    with tempfile.TemporaryDirectory(prefix="phasescope-bench-") as out:
        result = Path(out) / "stages.json"
        env = {**os.environ, "XDG_CACHE_HOME": cache_home}
        began = time.monotonic()
        subprocess.run([sys.executable, "-m", "bench.second_start", "--one", str(result)], check=True, cwd=ROOT,
                       env=env, stdout=subprocess.DEVNULL)
        if not result.exists():
            raise SystemExit("a start reached no decode step within 120 s")
        return [(stage, at - began) for stage, at in json.loads(result.read_text())]


def _seconds(at: dict[str, float], stage: str) -> str:
    """A stage's start, or a dash where the window never saw it (a model loaded before the run asked)."""
    return f"{at[stage]:.1f} s" if stage in at else "—"


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        return one_start(sys.argv[2])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=6, help="the first start and this many minus one later ones")
    add_readme_flag(parser)
    args = parser.parse_args()
    display = "Xvfb/X11 (DISPLAY=" + os.environ["DISPLAY"] + ")" if os.environ.get("DISPLAY") else "offscreen"
    lines = [measured_line(f"window on {display}"), "",
             "The default run (`main.py --autostart`: the bundled model, its chat prompt), seconds from the "
             "process's start; the first start with an empty cache.", "",
             "| start | window shown | loading | warming up | first decode step | stages |", "|---|---:|---:|---:|---:|---|"]
    later = []
    with tempfile.TemporaryDirectory(prefix="phasescope-cache-") as cache_home:
        for i in range(args.starts):
            stages = timed_start(cache_home)
            at = {}
            for stage, s in stages:
                at.setdefault(stage.split(" ")[0] if stage.startswith(("loading", "warming")) else stage, s)
            first = at["first decode step"]
            if i:
                later.append(first)
            said = "; ".join(f"{stage} {s:.1f}" for stage, s in stages[1:-1])
            lines.append(f"| {'first' if i == 0 else i + 1} | {at['window shown']:.1f} s | {_seconds(at, 'loading')} | "
                         f"{_seconds(at, 'warming')} | **{first:.1f} s** | {said} |")
            log(lines[-1])
    if later:
        lines += ["", f"Later starts: median {statistics.median(later):.1f} s to the first decode step "
                      f"(over {len(later)}; target: 3 s)."]
    return publish("second_start", lines, args.readme)


if __name__ == "__main__":
    raise SystemExit(main())
