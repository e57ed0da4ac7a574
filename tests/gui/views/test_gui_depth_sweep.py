"""The window's depth sweep: its page builds the SweepSpec `sweep depth` builds, a small sweep run from
the window draws both phases against the depth, and Export CSV writes it as `--out` does."""
from tests.fakes.gui_fixtures import run_to_end

from backend.config import RunKind, SweepKind
from backend.sweeps.points import read_points


def test_a_depth_sweep_from_the_window_draws_prefill_and_decode_against_depth(qtbot, window, tmp_path):
    window.controls.select_model("tiny")
    window.controls.device_combo.setCurrentText("cpu")
    form = window.controls.form
    form.set_kind(RunKind.SWEEP_DEPTH)
    f = form.fields[RunKind.SWEEP_DEPTH]
    for key, value in (("depths", "48,0,16"), ("prompt_len", "8"), ("output_len", "4"), ("steps", "1")):
        f[key].setText(value)
    spec = window.controls.build_config().sweep
    assert spec.kind is SweepKind.DEPTH and spec.depths == [0, 16, 48] and (spec.prompt_len, spec.output_len) == (8, 4)
    result = run_to_end(qtbot, window)
    assert not result.error and result.summary.kind == "depth" and result.summary.num_points == 3
    assert [p.depth for p in window.store.depth_points] == [0, 16, 48]
    assert window.view_tabs.currentWidget() is window.depth_sweep.parentWidget()
    view = window.depth_sweep
    assert list(view.decode.xData) == [0.0, 16.0, 48.0]   # decode is always measured: a point at each depth
    # prefill is a difference of two TTFTs: on a shared machine noise can leave a depth out, never add one
    # (pyqtgraph keeps None, not an empty array, for a curve left with no points)
    xs, ys = (view.prefill.xData, view.prefill.yData) if view.prefill.xData is not None else ([], [])
    assert set(xs) <= {0.0, 16.0, 48.0} and all(y > 0 for y in ys)
    note = view.note.text()
    assert "prefix cache: no hits" in note and "engine records: 0 cached prompt tokens" in note
    assert window.statusBar().currentMessage().startswith("Depth sweep finished: 3 points, no prefix-cache hits")
    assert window.files.export_csv(str(tmp_path / "depth"))
    kind, saved = read_points(tmp_path / "depth")
    assert kind is SweepKind.DEPTH and [p.depth for p in saved] == [0, 16, 48]
    # Open run draws a depth sweep's folder again, on its own tab
    window.view_tabs.setCurrentIndex(0)
    window.store.reset()
    assert window.files.open_run(str(tmp_path / "depth"))
    window.repaint_views()
    assert [p.depth for p in window.store.depth_points] == [0, 16, 48]
    assert window.view_tabs.currentWidget() is window.depth_sweep.parentWidget()
    assert list(view.decode.xData) == [0.0, 16.0, 48.0] and "prefix cache: no hits" in view.note.text()


def test_a_bad_depth_is_refused_on_the_page_in_one_line(qtbot, window):
    form = window.controls.form
    form.set_kind(RunKind.SWEEP_DEPTH)
    form.fields[RunKind.SWEEP_DEPTH]["depths"].setText("0,-64")
    problems = window.controls.errors()
    assert problems and "depths" in problems[0] and "\n" not in problems[0]
    assert not window.controls.run_button.isEnabled()
