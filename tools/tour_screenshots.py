"""Run every step of Learn › The tour in the real window, offscreen, and save each as docs/window.md shows it.

    python tools/tour_screenshots.py [--steps=1,2,...] [--calibrate] [FOLDER]   (default FOLDER: docs)

Each step runs as a user's would: the window's own runs, under `app.exec()` driven by the
panel's signals (a test helper's waits would slow the engine several times). Each step's panel
is saved as FOLDER/tour-<n>-<key>.png with its CSV beside it in a temporary folder, and the
time each step took, from Run to its finding, is printed (the table in docs/window.md). With
--calibrate this machine is measured first (quickly, into a temporary configuration folder:
the user's own profile is left alone), so step 4's roofline is this machine's, not a generic CPU's.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from a checkout: its backend and gui

from PySide6 import QtCore, QtWidgets  # noqa: E402

from gui.main_window import MainWindow  # noqa: E402


def main(argv: list[str]) -> int:
    steps_arg = next((a.split("=", 1)[1] for a in argv if a.startswith("--steps=")), None)
    folder = Path(next((a for a in argv if not a.startswith("--")), "docs"))
    config_dir = tempfile.mkdtemp(prefix="phasescope-tour-")
    if "--calibrate" in argv:
        os.environ["PHASESCOPE_CONFIG_DIR"] = config_dir
        from gui.screenshot import measure_this_machine
        measure_this_machine(config_dir)
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    window = MainWindow()
    window.show()
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
        table, picture = tour.export_step(csv_folder, index)
        target = folder / picture.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(picture.read_bytes())
        print(f"step {index + 1} ({tour.steps[index].key}): {tour.took_s[index]:.1f} s; {target}; {table}")
        print(f"  {finding.sentence}")
        QtCore.QTimer.singleShot(0, lambda: start(wanted.index(index) + 1))

    def failed(index: int, why: str) -> None:
        failures.append(f"step {index + 1}: {why}")
        print(f"step {index + 1} failed: {why}", file=sys.stderr)
        QtCore.QTimer.singleShot(0, lambda: start(wanted.index(index) + 1))

    tour.stepFinished.connect(finished)
    tour.stepFailed.connect(failed)
    QtCore.QTimer.singleShot(0, lambda: start(0))
    app.exec()
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
