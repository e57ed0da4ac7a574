"""The app's start: the engine process is started, with the model to preload, before anything of the
window's is imported, and the window's first run finds that model loaded."""
import subprocess
import sys
from pathlib import Path

from PySide6 import QtWidgets

import gui.app
import gui.main_window
from backend.config import ModelChoice, RunConfig
from backend.engine import preload
from backend.events import ModelLoaded
from gui.main_window import MainWindow, run_app
from tests.fakes.gui_fixtures import RUN_TIMEOUT_MS

ROOT = str(Path(gui.app.__file__).resolve().parents[1])


def test_starting_the_engine_imports_neither_qt_nor_torch_here(tmp_path):
    code = ("import sys, gui.app; engine = gui.app.start_engine(); "
            "print('PySide6' in sys.modules, 'torch' in sys.modules, 'pyqtgraph' in sys.modules, engine.is_alive()); "
            "engine.close()")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "PHASESCOPE_CONFIG_DIR": str(tmp_path), "PYTHONPATH": ROOT})
    assert out.stdout.split() == ["False", "False", "False", "True"], out.stderr


class FakeEngine:
    def __init__(self):
        self.asked = []

    def start(self):
        self.asked.append("start")

    def warm(self, config):
        self.asked.append(("warm", config.model.name, config.model.device))


def test_the_window_opens_on_the_engine_started_for_it_with_the_model_kept(monkeypatch):
    made = []
    monkeypatch.setattr("backend.engine.process.EngineProcess", lambda: made.append(FakeEngine()) or made[-1])
    opened = {}
    monkeypatch.setattr(gui.main_window, "run_app", lambda **kw: opened.update(kw) or 0)
    preload.remember(RunConfig(model=ModelChoice("tiny", "cpu")))
    assert gui.app.open_window(model="gpt2-124m", autostart=True) == 0
    assert made[0].asked == [("warm", "gpt2-124m", "cpu")] and opened["engine"] is made[0]
    preload.remember(None)   # the last run was a simulation: the process starts, nothing loads
    assert gui.app.open_window() == 0
    assert made[1].asked == ["start"] and opened["engine"] is made[1]


def test_the_autostarted_run_finds_the_preloaded_model(qtbot, monkeypatch):
    seen = {}

    def fake_exec(app):
        w = next(x for x in QtWidgets.QApplication.topLevelWidgets() if isinstance(x, MainWindow) and x.isVisible())
        seen["engine"] = w.worker.engine
        loaded = []
        w.worker.event.connect(lambda e: loaded.append(e.reused) if isinstance(e, ModelLoaded) else None)
        qtbot.waitUntil(lambda: w.running, timeout=5_000)
        qtbot.waitUntil(lambda: not w.running, timeout=RUN_TIMEOUT_MS)
        seen["reused"] = loaded
        w.close()
        return 0

    monkeypatch.setattr(QtWidgets.QApplication, "exec", fake_exec)
    engine = gui.app.start_engine("tiny")
    assert run_app(model="tiny", autostart=True, engine=engine) == 0
    assert seen["engine"] is engine and seen["reused"] == [True]
    assert not engine.is_alive()   # closed with the window
