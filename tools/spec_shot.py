"""A picture of the window's Speculation tab after a real speculating run (docs/speculative.png).

    Xvfb :7 -screen 0 1600x1000x24 -nolisten tcp &
    DISPLAY=:7 python tools/spec_shot.py docs/speculative.png [--output-len 64] [--spec-tokens 4]

The app's own window (its engine in its own process, as a user runs it) runs the bundled model on this
machine's CPU: one request asking the model to repeat a sentence (the tour's input-grounded prompt, with the
chat template), greedy, n-gram guesses (K=4). When it has finished, the Speculation tab is brought forward and
the window saved (its own grab, 128 colours: a small file for the repository); with --strip, the live tab's
step strip as well, beside it (PATH-strip.png). Under `app.exec()`: a test helper's waits would slow the engine.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from a checkout: its backend and gui

from PySide6 import QtCore, QtWidgets  # noqa: E402

MODEL = "smollm2-135m"   # the bundled model
SETTLE_MS = 1000         # after the run ends: the last repaints


def option(argv: list[str], name: str, default: str) -> str:
    return argv[argv.index(name) + 1] if name in argv[:-1] else default


def save(window, path: str) -> None:
    window.repaint_views()
    QtWidgets.QApplication.processEvents()
    window.grab().save(path)
    subprocess.run(["convert", path, "-colors", "128", path], check=True)
    print(f"wrote {path}", flush=True)


def main(argv: list[str]) -> int:
    path = next((a for a in argv if a.endswith(".png")), "speculative.png")
    os.environ["PHASESCOPE_CONFIG_DIR"] = tempfile.mkdtemp(prefix="phasescope-shots-")   # a first start
    from gui.main_window import MainWindow
    from gui.tour.steps import SPEC_PROMPT
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    app.setApplicationName("phasescope")
    window = MainWindow()
    window.resize(1600, 1000)
    window.show()
    window.controls.select_model(MODEL)
    form = window.controls.form
    form.set_kind("batch")
    form.prompt_edit.setPlainText(SPEC_PROMPT)
    form.chat_check.setChecked(True)
    form.ignore_eos.setChecked(True)   # a fixed length: past the copy, the guesses hold less often
    form.fields["batch"]["output_len"].setText(option(argv, "--output-len", "64"))
    form.spec_combo.setCurrentText("ngram")
    form.fields["spec"]["num_tokens"].edit.setText(option(argv, "--spec-tokens", "4"))

    def after() -> None:
        window.view_tabs.show_view(window.speculation)
        save(window, path)
        print(window.speculation.note.text(), flush=True)
        if "--strip" in argv:
            window.view_tabs.show_view(window.live_page)
            save(window, path.removesuffix(".png") + "-strip.png")
        window.close()
        app.quit()

    def finished(result) -> None:
        s = result.summary
        print(f"run: spec {s.spec_verifications} verifications, {s.spec_mean_acceptance_length:.2f} tokens each, "
              f"TPOT {s.tpot_p50_ms:.2f} ms", flush=True)
        QtCore.QTimer.singleShot(SETTLE_MS, after)

    window.runFinished.connect(finished)
    window.runFailed.connect(lambda message: (print(f"error: {message}", file=sys.stderr), app.exit(1)))
    QtCore.QTimer.singleShot(0, window.start_run)
    return app.exec()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
