"""A picture of the window's KV cache tab in the middle of a real multi-turn chat (docs/kv-map.png).

    Xvfb :7 -screen 0 1400x900x24 -nolisten tcp &
    DISPLAY=:7 python tools/kv_map_shot.py docs/kv-map.png [--preset agentic-loop] [--kv-tokens 4096]

The app's own window (its engine in its own process, as a user runs it) runs the bundled model on this
machine's CPU: the `multi-turn-chat` preset (8 users x 6 turns, a 64-token system prompt shared by all),
paged with prefix caching (the defaults), in a KV cache of KV_TOKENS tokens, small enough for the
conversations to fill a visible share of it. The window is saved (its own grab, 128 colours: a small
file for the repository) the first time the map shows requests holding blocks, cached prefixes and
blocks just found cached, all at once; at the end of the run if that moment never came. Under
`app.exec()`, driven by timers: a test helper's waits would slow the engine several times.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # run from a checkout: its backend and gui

import numpy as np  # noqa: E402
from PySide6 import QtCore, QtWidgets  # noqa: E402

MODEL = "smollm2-135m"   # the bundled model
PRESET = "multi-turn-chat"
KV_TOKENS = "4096"       # 256 blocks of 16 tokens: the conversations fill a third of it at their busiest
POLL_MS = 40


def option(argv: list[str], name: str, default: str) -> str:
    return argv[argv.index(name) + 1] if name in argv[:-1] else default


def busy_with_reuse(kv) -> bool:
    """Requests hold a sixth of the cache, cached prefixes a tenth, and a request has just found its own."""
    from backend.events import KV_CACHED_FREE
    held, cached = np.count_nonzero(kv.owners >= 0), np.count_nonzero(kv.owners == KV_CACHED_FREE)
    fresh = time.monotonic() - kv.reused_at < 1.0 and len(kv.reused) > 0
    return held > 0.15 * kv.num_cells and cached > 0.1 * kv.num_cells and fresh


def main(argv: list[str]) -> int:
    path = next((a for a in argv if a.endswith(".png")), "kv-map.png")
    os.environ["PHASESCOPE_CONFIG_DIR"] = tempfile.mkdtemp(prefix="phasescope-shots-")   # a first start
    from gui.main_window import MainWindow
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    app.setApplicationName("phasescope")
    window = MainWindow()
    window.resize(1400, 900)
    window.show()
    form = window.controls.form
    window.controls.select_model(MODEL)
    form.set_kind("load")
    form.preset_combo.setCurrentText(option(argv, "--preset", PRESET))
    form.fields["load"]["kv_tokens"].setText(option(argv, "--kv-tokens", KV_TOKENS))
    done = {"shot": False}

    def shoot() -> None:
        window.view_tabs.show_view(window.kv_view)
        window.repaint_views()
        window.grab().save(path)
        subprocess.run(["convert", path, "-colors", "128", path], check=True)
        done["shot"] = True
        print(f"wrote {path}: {window.kv_view.summary.text()}", flush=True)

    def poll() -> None:
        kv = window.store.kv
        if not done["shot"] and kv.latest is not None and not kv.latest.final and busy_with_reuse(kv):
            shoot()

    def finished(result) -> None:
        if not done["shot"]:
            shoot()
        s = result.summary
        print(f"run: {len(result.data.requests)} requests, prefix hit {100 * (s.prefix_hit_rate or 0):.1f}% "
              f"of prompt tokens", flush=True)
        window.close()
        app.quit()

    window.runFinished.connect(finished)
    window.runFailed.connect(lambda message: (print(f"error: {message}", file=sys.stderr), app.exit(1)))
    timer = QtCore.QTimer()
    timer.timeout.connect(poll)
    timer.start(POLL_MS)
    QtCore.QTimer.singleShot(0, window.start_run)
    return app.exec()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
