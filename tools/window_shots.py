"""Screenshots of the real window as a new user first sees it, on a screen of a given size.

    Xvfb :7 -screen 0 1366x768x24 -nolisten tcp &
    DISPLAY=:7 python tools/window_shots.py docs/window-1366x768 [--sweep]

A first start (a fresh configuration folder: no saved geometry, every setting at its default) of
the app's own window, its default run pressed as `--autostart` presses it; once it has finished,
the whole screen is saved with `import -window root` (ImageMagick) as PREFIX.png, not the
window's own grab: what the screen shows, window placement included. With --sweep a batch-size
sweep of the bundled model follows, and the screen is saved again as PREFIX-sweep.png, the sweep's
plot in front as the window brings it. Under `app.exec()`: a test helper's waits would slow the
engine several times.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from a checkout: its backend and gui

from PySide6 import QtCore, QtWidgets  # noqa: E402

SETTLE_MS = 1500   # after a run ends: the last repaints and the status line


def shoot(path: str) -> None:
    subprocess.run(["import", "-window", "root", path], check=True)
    print(f"wrote {path}", flush=True)


def main(argv: list[str]) -> int:
    prefix = next((a for a in argv if not a.startswith("--")), "window")
    sweep = "--sweep" in argv
    os.environ["PHASESCOPE_CONFIG_DIR"] = tempfile.mkdtemp(prefix="phasescope-shots-")   # a first start
    from backend.config import RunKind
    from gui.main_window import MainWindow
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    app.setApplicationName("phasescope")
    window = MainWindow(remember=True)
    window.showMaximized() if window.maximise_at_start else window.show()
    shots = [f"{prefix}.png"] + ([f"{prefix}-sweep.png"] if sweep else [])

    def start_sweep() -> None:
        form = window.controls.form
        form.set_kind(RunKind.SWEEP_BATCH)
        fields = form.fields[RunKind.SWEEP_BATCH]
        fields["batches"].setText("1,2,4,8,16,32")
        fields["context"].setText("160")
        fields["steps"].setText("3")
        window.start_run()

    def finished(_result) -> None:
        print(f"status: {window.statusBar().currentMessage()}", flush=True)
        QtCore.QTimer.singleShot(SETTLE_MS, after)

    def after() -> None:
        shoot(shots.pop(0))
        if shots:
            start_sweep()
        else:
            window.close()
            app.quit()

    def failed(message: str) -> None:
        print(f"error: {message}", file=sys.stderr)
        window.close()
        app.exit(1)

    window.runFinished.connect(finished)
    window.runFailed.connect(failed)
    QtCore.QTimer.singleShot(0, window.start_run)
    return app.exec()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
