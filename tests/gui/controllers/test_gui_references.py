"""Reference runs in the window: saved runs of the CLI drawn beside the current run in every view."""
import contextlib
import io
import json
import math
import shutil
from pathlib import Path

from tests.fakes.gui_fixtures import RUN_TIMEOUT_MS, two_request_run, use_tiny

import numpy as np
import pytest
from PySide6 import QtCore, QtGui, QtWidgets

from backend.sweeps.points import read_points
from backend.errors import InputError
from backend.run_info import RunInfo
from backend.results.export import read_run
from backend.records import Phase
from gui.views.distributions import cdf, metric_values
from gui.views.metrics import figure_text
from gui.state.references import PALETTE, ReferenceSet, run_label
from gui.state.run_store import RunStore

LOAD = ["load", "--model", "tiny", "--arrival", "burst", "--requests", "6", "--prompt-len", "16",
        "--output-len", "8"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Three folders written by the CLI: a static and a continuous load run, and a batch sweep."""
    from backend.cli.main import main
    base = tmp_path_factory.mktemp("saved")
    runs = {"static": LOAD + ["--policy", "static"], "continuous": LOAD + ["--policy", "continuous"],
            "sweep": ["sweep", "batch", "--model", "tiny", "--batches", "1,2,4", "--context", "32", "--steps", "2"]}
    # in this process (the CLI's own entry point, without a Python start and imports per folder): these
    # tests are about the folders the CLI writes, not its process, which tests/cli checks
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(io.StringIO()):
        patch.setenv("PHASESCOPE_CONFIG_DIR", str(base / "config"))
        for name, args in runs.items():
            assert main([*args, "--out", str(base / name)]) == 0, name
    return {name: base / name for name in runs}


def curve_data(item):
    return ([] if item.xData is None else item.xData.tolist()), ([] if item.yData is None else item.yData.tolist())


def decode_medians(folder: Path) -> tuple[list, list]:
    """Each decode batch size's median step as tokens/s, from steps.csv read on its own."""
    steps = [s for s in read_run(folder).steps if s.phase is Phase.DECODE and s.duration_ms > 0]
    sizes = sorted({s.num_decode_requests for s in steps})
    rates = [float(np.median([s.num_decode_tokens / (s.duration_ms / 1000.0) for s in steps
                              if s.num_decode_requests == b])) for b in sizes]
    return [math.log2(b) for b in sizes], rates


def add_all(w, saved):
    refs = [w.reference_runs.add(str(saved[name])) for name in ("static", "continuous", "sweep")]
    assert all(refs), w.last_error
    w.view_tabs.show_view(w.throughput)   # the views repaint when on screen: the throughput plot's tab
    w.repaint_views()
    return refs


# ---- without a window ------------------------------------------------------------------------

def test_a_cdf_is_a_staircase_to_one_and_itl_is_the_gaps_within_each_request():
    x, y = cdf(np.array([3.0, 1.0, 2.0]))
    assert x.tolist() == [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]
    assert y.tolist() == pytest.approx([0.0, 1 / 3, 1 / 3, 2 / 3, 2 / 3, 1.0])
    x, y = cdf(np.arange(10_000.0), max_points=100)
    assert len(x) == 100 and y[-1] == 1.0 and x[-1] == 9999.0
    store = RunStore()
    for event in two_request_run():
        store.add_event(event)
    assert sorted(metric_values(store, "itl").tolist()) == [2.0, 2.0, 2.0, 2.0, 7.0]   # 10, 17, 19, 21 and 15, 17, 19
    assert sorted(metric_values(store, "ttft").tolist()) == [10.0, 10.0]
    assert sorted(metric_values(store, "tpot").tolist()) == pytest.approx([2.0, 11.0 / 3])


def test_colours_are_assigned_in_order_and_never_shared_while_a_reference_lives(saved):
    refs = ReferenceSet()
    a, b = refs.add(saved["static"]), refs.add(saved["continuous"])
    assert (a.color, b.color) == PALETTE[:2] and (a.key, b.key) == (1, 2)
    refs.remove(a.key)
    c = refs.add(saved["sweep"])
    assert c.color != b.color and c.key == 3          # the freed colour, not the living one's; keys never reused
    with pytest.raises(InputError, match="already a reference"):
        refs.add(saved["continuous"])
    info = json.loads((saved["static"] / "run.json").read_text())
    assert run_label(info["config"], RunInfo.from_json(info["info"])) == \
        f"tiny · cpu · float32 · static · {info['info']['created'][:16].replace('T', ' ')}"
    assert c.name == "R3 sweep-batch"


# ---- in the window ---------------------------------------------------------------------------

def test_references_draw_a_curve_each_on_the_throughput_plot_and_a_column_each_in_the_metrics(window, saved):
    static, continuous, sweep = add_all(window, saved)
    curves = window.throughput.reference_curves
    assert set(curves) == {static.key, continuous.key, sweep.key}
    # the sweep's own points; the load runs' decode steps, each batch size's median
    points = read_points(saved["sweep"])[1]
    x, y = curve_data(curves[sweep.key])
    assert x == pytest.approx([0.0, 1.0, 2.0]) and y == pytest.approx([p.tokens_per_s for p in points])
    for ref, name in ((static, "static"), (continuous, "continuous")):
        x, y = curve_data(curves[ref.key])
        expected_x, expected_y = decode_medians(saved[name])
        assert x == pytest.approx(expected_x) and y == pytest.approx(expected_y) and y
    assert len({c.opts["pen"].color().name() for c in curves.values()}) == 3
    assert all(c in window.throughput.getPlotItem().listDataItems() for c in curves.values())
    assert "R1 static" in window.throughput.getPlotItem().titleLabel.text   # its legend entry
    # the metrics panel: this run's column, then one per reference with its value
    panel = window.metrics
    assert panel.compare_box.isVisible()
    assert panel.compare_columns == [static.key, continuous.key, sweep.key]
    ttft = [r.ttft_ms for r in read_run(saved["static"]).requests]
    assert panel.comparison_text(static.key, "ttft_mean") == figure_text(float(np.mean(ttft)))
    assert panel.comparison_text(None, "ttft_mean") == "—"          # no current run yet: no delta
    assert window.references_dock.isVisible() and window.reference_panel.list.count() == 3


def test_the_distributions_view_holds_a_cdf_per_run(qtbot, window, saved):
    static, continuous, _sweep = add_all(window, saved)
    window.view_tabs.show_view(window.distributions)
    view = window.distributions
    qtbot.waitUntil(lambda: view.counts.get(continuous.key) == 6)
    assert view.counts[None] == 0 and view.counts[static.key] == 6
    for ref in (static, continuous):
        x, y = curve_data(view.curves[ref.key])
        assert y[-1] == 1.0 and min(x) > 0
    view.set_metric("itl")
    assert view.counts[static.key] == 6 * 7 == view.counts[continuous.key]   # 8 tokens: 7 gaps each
    # the current run's curve fills once there is a current run
    assert window.files.open_run(str(saved["static"]))
    window.repaint_views()
    assert view.counts[None] == 42
    x, y = curve_data(view.current)
    assert x == pytest.approx(curve_data(view.curves[static.key])[0])


def test_a_corrupt_reference_is_refused_with_one_line_and_the_others_stay(window, saved, tmp_path):
    static, continuous, _sweep = add_all(window, saved)
    bad = tmp_path / "bad"
    shutil.copytree(saved["static"], bad)
    lines = (bad / "steps.csv").read_text().splitlines()
    (bad / "steps.csv").write_text("\n".join(line.split(",", 1)[1] for line in lines) + "\n")   # no run_id column
    assert window.reference_runs.add(str(bad)) is None
    assert "not added as a reference" in window.last_error and "missing column(s)" in window.last_error
    assert "\n" not in window.last_error
    assert window.statusBar().currentMessage() == "Error: " + window.last_error
    assert window.error_box is not None and not window.error_box.isModal()
    (bad / "run.json").write_text("{not json")
    assert window.reference_runs.add(str(bad)) is None and "not valid JSON" in window.last_error
    assert window.reference_runs.add(str(tmp_path)) is None and "missing run.json" in window.last_error
    assert len(window.references) == 3 and len(window.throughput.reference_curves) == 3
    assert curve_data(window.throughput.reference_curves[static.key])[1]
    # a drop of several folders: the bad one refused, the good one added
    window.reference_runs.remove(continuous.key)
    mime = QtCore.QMimeData()
    mime.setUrls([QtCore.QUrl.fromLocalFile(str(bad)), QtCore.QUrl.fromLocalFile(str(saved["continuous"] / "run.json"))])
    event = QtGui.QDropEvent(QtCore.QPointF(10, 10), QtCore.Qt.DropAction.CopyAction, mime,
                             QtCore.Qt.MouseButton.LeftButton, QtCore.Qt.KeyboardModifier.NoModifier)
    window.dropEvent(event)
    assert [r.name for r in window.references] == ["R1 static", "R3 sweep-batch", "R4 continuous"]
    assert "not valid JSON" in window.last_error


def test_hiding_and_removing_a_reference_take_its_curves_and_column_away(qtbot, window, saved):
    static, continuous, sweep = add_all(window, saved)
    window.view_tabs.show_view(window.distributions)
    window.repaint_views()
    # the first reference with steps is drawn under the current run's strip and lanes, on its time axis
    assert window.references.aligned == static.key
    live = window.live_page   # (on the live view's tab, behind the CDF's now)
    assert window.reference_runs.timeline_view.isVisibleTo(live) and window.reference_runs.lanes_view.isVisibleTo(live)
    assert window.reference_runs.timeline_view.getPlotItem().getViewBox().linkedView(0) is window.timeline.getPlotItem().getViewBox()
    assert len(window.reference_runs.timeline_view.bars[Phase.DECODE].start) == 7
    # hidden with its checkbox: drawn nowhere, kept in the list
    item = window.reference_panel.row_of(continuous.key)
    item.setCheckState(QtCore.Qt.CheckState.Unchecked)
    window.repaint_views()
    assert not window.references.get(continuous.key).visible
    assert not window.distributions.curves[continuous.key].isVisible()
    window.view_tabs.show_view(window.throughput)   # the throughput plot repaints when it is on screen
    window.repaint_views()
    assert not window.throughput.reference_curves[continuous.key].isVisible()
    assert window.throughput.reference_curves[static.key].isVisible()
    assert window.metrics.compare_columns == [static.key, sweep.key]
    item.setCheckState(QtCore.Qt.CheckState.Checked)
    window.repaint_views()
    assert window.metrics.compare_columns == [static.key, continuous.key, sweep.key]
    # removed with the Remove button: its curves, column and aligned views go
    removed = (window.throughput.reference_curves[static.key], window.distributions.curves[static.key])
    window.reference_panel.list.setCurrentItem(window.reference_panel.row_of(static.key))
    qtbot.mouseClick(window.reference_panel.remove_button, QtCore.Qt.MouseButton.LeftButton)
    window.repaint_views()
    assert window.references.get(static.key) is None
    assert static.key not in window.throughput.reference_curves
    assert removed[0] not in window.throughput.getPlotItem().listDataItems()
    assert all(c in window.throughput.getPlotItem().listDataItems()
               for c in window.throughput.reference_curves.values())
    window.view_tabs.show_view(window.distributions)   # brought forward, it repaints at once
    assert static.key not in window.distributions.curves
    assert removed[1] not in window.distributions.plot.getPlotItem().listDataItems()
    assert window.metrics.compare_columns == [continuous.key, sweep.key]
    assert (static.key, "ttft_mean") not in window.metrics.compare_cells
    assert window.reference_runs.timeline_view is None and window.references.aligned is None
    assert window.reference_panel.align_combo.currentData() is None
    # another one chosen for the strip; then none
    window.reference_runs.align(continuous.key)
    assert window.reference_runs.timeline_view.store is continuous.store
    assert window.reference_runs.timeline_view.isVisibleTo(window.live_page)
    window.reference_runs.align(None)
    assert window.reference_runs.timeline_view is None


def test_references_stay_drawn_through_a_new_run(qtbot, window, saved):
    static, continuous, sweep = add_all(window, saved)
    before = {key: curve_data(c) for key, c in window.throughput.reference_curves.items()}
    use_tiny(window)
    with qtbot.waitSignal(window.runFinished, timeout=RUN_TIMEOUT_MS):
        qtbot.mouseClick(window.controls.run_button, QtCore.Qt.MouseButton.LeftButton)
        assert window.running and window.store.num_requests == 0   # the store was reset, the references not
        window.repaint_views()
        assert {key: curve_data(c) for key, c in window.throughput.reference_curves.items()} == before
        assert window.reference_runs.timeline_view is not None and len(window.reference_runs.timeline_view.bars[Phase.DECODE].start) == 7
    window.repaint_views()
    assert len(window.references) == 3
    assert {key: curve_data(c) for key, c in window.throughput.reference_curves.items()} == before
    assert window.metrics.compare_columns == [static.key, continuous.key, sweep.key]
    assert window.metrics.comparison_text(None, "ttft_mean") != "—"       # the new run's own figure
    assert "%" in window.metrics.comparison_text(static.key, "ttft_mean")   # and the delta against R1
    window.view_tabs.show_view(window.distributions)
    assert window.distributions.counts[None] == 2 and window.distributions.counts[static.key] == 6
