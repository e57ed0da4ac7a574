"""A picture of the window's KV cache tab in the middle of a simulated multi-turn chat (docs/kv-map.png).

    Xvfb :7 -screen 0 1400x900x24 -nolisten tcp &
    DISPLAY=:7 python tools/kv_map_shot.py docs/kv-map.png

The `multi-turn-chat` preset (8 users x 6 turns) simulated on an H100 profile with the 8B model and a KV
cache of KV_TOKENS tokens (small enough for the conversations to fill a visible share of it), paged with
prefix caching (the simulator's default). The window is saved (its own grab, 8-bit colours) the first
time the map shows requests holding blocks, cached prefixes and blocks just found cached, all at once;
at the end of the run if that moment never came. Under `app.exec()`, as tools/window_shots.py. The run goes
in this process, paced (PACE_S after each KV map sent) so that the window sees the cache while it is busy:
unpaced, a simulated chat of 48 requests ends within a second of wall time.
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

KV_TOKENS = "6144"   # 384 blocks of 16 tokens
POLL_MS = 40
PACE_S = 0.3


def paced(config, emit, should_stop):
    """The run in this process, held PACE_S after each KV map it emits: a simulated run is over in a
    fraction of a second, before the window's timer has seen the cache busy."""
    from backend.events import KvMap
    from backend.session import execute

    def slow_emit(event):
        emit(event)
        if isinstance(event, KvMap):
            time.sleep(PACE_S)
    return execute(config, slow_emit, should_stop, retain_records=False)


def main(argv: list[str]) -> int:
    path = argv[0] if argv else "kv-map.png"
    os.environ["PHASESCOPE_CONFIG_DIR"] = tempfile.mkdtemp(prefix="phasescope-shots-")   # a first start
    from backend.engine.paged_scheduler import CACHED_FREE
    from gui.main_window import MainWindow
    from gui.worker import RunWorker
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    app.setApplicationName("phasescope")
    window = MainWindow(worker=RunWorker(run=paced))
    window.resize(1400, 900)
    window.show()
    c = window.controls
    c.select_model("llama-8b")
    c.select_profile("h100-sxm")
    c.simulate_check.setChecked(True)
    c.form.set_kind("load")
    c.form.preset_combo.setCurrentText("multi-turn-chat")
    c.form.fields["load"]["kv_tokens"].setText(KV_TOKENS)
    done = {"shot": False}

    def shoot() -> None:
        window.repaint_views()
        window.grab().save(path)
        subprocess.run(["convert", path, "-colors", "128", path], check=True)   # a small file for the repository
        done["shot"] = True
        print(f"wrote {path}: {window.kv_view.summary.text()}", flush=True)

    def poll() -> None:
        kv = window.store.kv
        if done["shot"] or kv.latest is None or kv.latest.final:
            return
        if window.view_tabs.currentWidget() is not window.kv_view:
            window.view_tabs.show_view(window.kv_view)
        held, cached = np.count_nonzero(kv.owners >= 0), np.count_nonzero(kv.owners == CACHED_FREE)
        fresh = time.monotonic() - kv.reused_at < 1.0 and len(kv.reused) > 0
        if held > 0.15 * kv.num_cells and cached > 0.1 * kv.num_cells and fresh:
            shoot()

    def finished(_result) -> None:
        window.view_tabs.show_view(window.kv_view)
        if not done["shot"]:
            shoot()
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
