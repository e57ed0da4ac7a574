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

    Xvfb :7 -screen 0 2560x1440x24 -nolisten tcp &
    DISPLAY=:7 python tools/window_shots.py docs/window-2560x1440-200pct --scale 2 --resize 50

--scale F runs the window at F times its size (QT_SCALE_FACTOR, as a desktop set to 200% does);
--resize P saves the shot at P percent of the screen's pixels (ImageMagick's -resize), so a
large screen's picture stays small in the repository.
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


def shoot(path: str, resize: str | None = None) -> None:
    subprocess.run(["import", "-window", "root", path], check=True)
    if resize:
        subprocess.run(["convert", path, "-resize", f"{resize}%", path], check=True)
    print(f"wrote {path}", flush=True)


def option(argv: list[str], name: str) -> str | None:
    """The value after `name` (e.g. --scale 2), or None."""
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


def main(argv: list[str]) -> int:
    scale, resize = option(argv, "--scale"), option(argv, "--resize")
    values = {scale, resize} - {None}
    prefix = next((a for a in argv if not a.startswith("--") and a not in values), "window")
    sweep = "--sweep" in argv
    if scale:
        os.environ["QT_SCALE_FACTOR"] = scale   # read when the QApplication is made
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
        shoot(shots.pop(0), resize)
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
