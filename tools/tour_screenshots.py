"""Run every step of Learn › The tour in the app's real window and save the screen after each, as docs/window.md shows it.

    Xvfb :7 -screen 0 1600x1000x24 -nolisten tcp &
    DISPLAY=:7 python tools/tour_screenshots.py [--steps=1,2,...] [FOLDER]   (default FOLDER: docs)

A first start of the app's own window (a fresh configuration folder: no saved geometry, no
calibrated profile, every setting at its default), its first geometry taken from the screen; the
tour opened from its menu and each step run as a user's would: the window's own runs, under
`app.exec()` driven by the panel's signals (a test helper's waits would slow the engine several
times). The batch step measures this machine first, as the tour does for anyone who never
calibrated, so its roofline is this machine's. Once a step's figure is in front, the whole screen is
saved with `import -window root` (ImageMagick) as FOLDER/tour-<n>-<key>.png, cut to the window and
reduced to 64 colours, with the step's CSV beside it in a temporary folder, and the time each step took, from Run
to its finding, is printed (the table in docs/window.md). Without a display (QT_QPA_PLATFORM=offscreen)
the window's own grab is saved instead.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from a checkout: its backend and gui

from PySide6 import QtCore, QtWidgets  # noqa: E402

SETTLE_MS = 1500   # after a step's finding: the figure drawn, the last repaints and the status line


def shoot(window, path: Path) -> None:
    """The screen as it is (window placement included), or the window's own grab without a display."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if os.environ.get("QT_QPA_PLATFORM") == "offscreen" or not os.environ.get("DISPLAY"):
        window.grab().save(str(path))
    else:
        subprocess.run(["import", "-window", "root", str(path)], check=True)
    # the window without the screen's black border around it; flat widget colours lose nothing a reader
    # sees at 64 colours undithered, and two thirds of their bytes
    subprocess.run(["convert", str(path), "-trim", "+repage", "+dither", "-colors", "64",
                    "-define", "png:compression-level=9", f"PNG8:{path}"], check=True)


def main(argv: list[str]) -> int:
    steps_arg = next((a.split("=", 1)[1] for a in argv if a.startswith("--steps=")), None)
    folder = Path(next((a for a in argv if not a.startswith("--")), "docs"))
    os.environ["PHASESCOPE_CONFIG_DIR"] = tempfile.mkdtemp(prefix="phasescope-tour-")   # a first start
    from gui.main_window import MainWindow
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    app.setApplicationName("phasescope")
    window = MainWindow(remember=True)
    window.showMaximized() if window.maximise_at_start else window.show()
    window.tools.open_tour()
    tour = window.tools.tour
    wanted = [int(s) - 1 for s in steps_arg.split(",")] if steps_arg else list(range(len(tour.steps)))
    csv_folder = Path(tempfile.mkdtemp(prefix="phasescope-tour-csv-"))
    failures: list[str] = []

    def start(position: int) -> None:
        if position >= len(wanted):
            window.close()
            app.quit()
            return
        tour.show_step(wanted[position])
        tour.run_step()

    def finished(index: int, finding) -> None:
        table, _ = tour.export_step(csv_folder, index)
        QtCore.QTimer.singleShot(SETTLE_MS, lambda: after(index, finding, table))

    def after(index: int, finding, table: Path) -> None:
        target = folder / f"{tour.file_stem(index)}.png"
        shoot(window, target)
        print(f"step {index + 1} ({tour.steps[index].key}): {tour.took_s[index]:.1f} s; {target}; {table}",
              flush=True)
        print(f"  {finding.sentence}", flush=True)
        start(wanted.index(index) + 1)

    def failed(index: int, why: str) -> None:
        failures.append(f"step {index + 1}: {why}")
        print(f"step {index + 1} failed: {why}", file=sys.stderr, flush=True)
        QtCore.QTimer.singleShot(0, lambda: start(wanted.index(index) + 1))

    tour.stepFinished.connect(finished)
    tour.stepFailed.connect(failed)
    QtCore.QTimer.singleShot(1000, lambda: start(0))   # the first geometry settled on the screen
    app.exec()
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
