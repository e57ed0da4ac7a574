"""The window's layout: every plot of the view on screen keeps a readable height, the first window
fits the screen it opens on, and a finished sweep brings its plot forward with a status that says
what it found."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from tests.fakes.gui_fixtures import run_to_end

from backend.config import SweepKind
from backend.events import RunFinished, SweepPoint
from backend.summary import Crossovers, Summary
from gui.layout import MIN_PLOT_AREA
from gui.main_window import MainWindow
from gui.window_geometry import first_geometry, fits
from gui.worker import RunWorker

ROOT = Path(__file__).resolve().parents[2]
SCREENS = [(1366, 768), (1920, 1080), (2560, 1440)]


def shown_plots(window):
    page = window.view_tabs.currentWidget()
    return [p for p in page.findChildren(pg.PlotWidget) if p.isVisible()]


@pytest.mark.parametrize("size", [(1366, 768), (1920, 1080)])
def test_no_plot_of_the_shown_view_is_shorter_than_its_minimum(window, size):
    window.resize(*size)
    for i in range(window.view_tabs.count()):
        window.view_tabs.setCurrentIndex(i)
        window.repaint_views()
        QtWidgets.QApplication.processEvents()
        assert window.size() == QtCore.QSize(*size)   # the minimum heights did not push the window past it
        plots = shown_plots(window)
        assert plots, window.view_tabs.tabText(i)
        for plot in plots:
            name = f"{window.view_tabs.tabText(i)}: {plot.objectName()}"
            assert plot.height() >= plot.minimumHeight() > 0, name
            # the data area under the title, its legend lines and the axes: where the curves are read
            area = plot.getPlotItem().getViewBox().sceneBoundingRect().height()
            assert area >= MIN_PLOT_AREA, (name, area)
    # the throughput plot, when shown, fills at least a third of the window
    window.view_tabs.show_view(window.throughput)
    QtWidgets.QApplication.processEvents()
    share = window.throughput.width() * window.throughput.height() / (size[0] * size[1])
    assert share >= 1 / 3, share


@pytest.mark.parametrize("width, height", SCREENS)
def test_the_first_geometry_is_most_of_the_available_screen_and_fits_it(width, height):
    available = QtCore.QRect(0, 24, width, height - 24)   # a panel along the top
    rect = first_geometry(available)
    assert fits(rect, available)
    assert rect.width() >= 0.9 * available.width() and rect.height() >= 0.9 * available.height() - 40
    assert abs((rect.center().x() - available.center().x())) <= 1
    assert not fits(QtCore.QRect(0, 0, 1400, 900), QtCore.QRect(0, 0, 1366, 768))   # the old fixed size


FIRST_START = """
import json, sys
from PySide6 import QtWidgets
app = QtWidgets.QApplication([])
from gui.main_window import MainWindow
w = MainWindow(remember=True)
w.show()
app.processEvents()
available = app.primaryScreen().availableGeometry()
g = w.geometry()
areas = {}   # each view's smallest plot data area, in this screen's own arrangement of the docks
import pyqtgraph as pg
for i in range(w.view_tabs.count()):
    w.view_tabs.setCurrentIndex(i)
    app.processEvents()
    plots = [p for p in w.view_tabs.currentWidget().findChildren(pg.PlotWidget) if p.isVisible()]
    areas[w.view_tabs.tabText(i)] = min(p.getPlotItem().getViewBox().sceneBoundingRect().height() for p in plots)
share = w.throughput.width() * w.throughput.height() / (g.width() * g.height())
print(json.dumps({"available": [available.x(), available.y(), available.width(), available.height()],
                  "geometry": [g.x(), g.y(), g.width(), g.height()], "fits": available.contains(g),
                  "maximise": w.maximise_at_start, "areas": areas, "share": share}))
if len(sys.argv) > 1:   # left larger than the next screen will be
    w.resize(2400, 1300)
    app.processEvents()
w.close()
"""


def start_app(tmp_path, width: int, height: int, *args: str) -> dict:
    """A first (or later) start of the app's window in its own process, on an offscreen screen of this size."""
    screen = tmp_path / f"screen-{width}x{height}.json"
    screen.write_text(json.dumps({"screens": [{"name": "s", "x": 0, "y": 0, "width": width, "height": height,
                                               "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]}))
    env = dict(os.environ, QT_QPA_PLATFORM=f"offscreen:configfile={screen}", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", FIRST_START, *args], env=env, capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_apps_first_window_fits_the_screen_and_a_saved_one_too_large_gives_way(tmp_path):
    # the config_dir fixture's folder is in the environment the child inherits: a fresh one, no settings
    big = start_app(tmp_path, 2560, 1440, "leave-it-large")
    assert big["fits"] and big["geometry"][2] >= 0.9 * 2560 and not big["maximise"]
    # a tall screen's arrangement (the text and notes beside the metrics) leaves every plot readable too
    assert min(big["areas"].values()) >= MIN_PLOT_AREA and big["share"] >= 1 / 3, big
    small = start_app(tmp_path, 1366, 768)   # the saved 2,400 x 1,300 no longer fits this screen
    assert small["fits"], small
    assert small["geometry"][2] >= 0.9 * 1366 and small["maximise"]
    assert min(small["areas"].values()) >= MIN_PLOT_AREA and small["share"] >= 1 / 3, small


def fake_batch_sweep(config, emit, should_stop):
    """A run function for RunWorker: a batch sweep's points and summary, without an engine."""
    for b in (1, 2, 4):
        step_ms = 20.0 + b
        emit(SweepPoint(SweepKind.BATCH, b, step_ms, 1000.0 * b / step_ms, 1e9 * b, 5e8, None, None, None, None,
                        "memory"))
    return RunFinished("fake", Summary(kind="batch", num_points=3, crossover=Crossovers(measured=2, predicted=33),
                                       best_tokens_per_s=166.7, best_at=4, largest_fit=4))


def test_a_finished_sweep_brings_its_plot_into_view_and_says_what_it_found(qtbot):
    w = MainWindow(worker=RunWorker(run=fake_batch_sweep))
    qtbot.addWidget(w)
    w.show()
    w.controls.select_model("tiny")
    w.controls.form.set_kind("sweep-batch")
    w.view_tabs.show_view(w.distributions)
    starts = []
    w.runs.launched.connect(lambda *_: starts.append(w.view_tabs.currentWidget()))
    run_to_end(qtbot, w)
    assert starts == [w.live_page]   # a run starts on the live view...
    assert w.view_tabs.currentWidget() is w.throughput.parentWidget() and w.throughput.isVisible()   # ...its plot
    assert w.throughput.measured.xData.tolist() == [0.0, 1.0, 2.0]
    message = w.statusBar().currentMessage()
    assert message.startswith("Batch sweep finished: 3 points, crossover near batch 2"), message
    assert "requests" not in message
