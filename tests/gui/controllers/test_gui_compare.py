"""The window's --repeats (one repeat on screen at a time, the mean ± CI at the end) and Compare
policies (the same workload under each policy, each saved and added as a reference)."""
from tests.fakes.gui_fixtures import RUN_TIMEOUT_MS, use_tiny

import pytest
from PySide6 import QtCore

from backend.events import RepeatStarted
from backend.results.export import read_run
from gui.state.references import run_policy
from tests.fakes.cache_home import private_cache_home


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """Compare policies saves its runs here, never into the user's cache."""
    return private_cache_home(monkeypatch, tmp_path / "cache")


@pytest.fixture
def window(inprocess_window):
    """The window with its runs in this process: the series, its references and its Stop are the
    window's (tests/gui/test_gui_engine_process.py checks runs through the engine process), and each
    test is spared that process's start (a Python start and torch's import)."""
    return inprocess_window


def use_burst(w, requests="4", prompt_len="8", output_len="4") -> None:
    use_tiny(w)
    form = w.controls.form
    form.set_kind("load")
    form.preset_combo.setCurrentText("custom")
    form.arrival_combo.setCurrentText("burst")
    f = form.fields["load"]
    f["requests"].setText(requests)
    f["prompt_len"].setText(prompt_len)
    f["output_len"].setText(output_len)
    form.ignore_eos.setChecked(True)


# ---- repeats ---------------------------------------------------------------------------------

def test_repeats_is_a_whole_number_of_at_least_one(window):
    field = window.controls.form.fields["shared"]["repeats"]
    assert window.controls.build_config().repeats == 1
    for text, message in (("0", "repeats must be at least 1, got 0"), ("two", "repeats must be a whole number")):
        field.setText(text)
        assert window.controls.errors()[0].startswith(message)
        assert not window.controls.run_button.isEnabled()
    field.setText("3")
    assert window.controls.run_button.isEnabled() and window.controls.build_config().repeats == 3


class Seen(QtCore.QObject):
    """What the window's store held as each batch of records and each repeat came (in the window's thread)."""

    def __init__(self, window):
        super().__init__()
        self.window, self.log = window, []

    @QtCore.Slot(object)
    def on_records(self, _batch) -> None:
        self.log.append(("steps", self.window.store.num_steps))

    @QtCore.Slot(object)
    def on_event(self, event) -> None:
        if isinstance(event, RepeatStarted):
            self.log.append(("repeat", (event.index, event.count)))


def test_repeats_show_one_repeat_at_a_time_and_the_mean_and_interval_at_the_end(qtbot, window):
    use_tiny(window, prompt_len="8", output_len="4", batch="1")
    window.controls.form.fields["shared"]["repeats"].setText("3")
    window.controls.form.ignore_eos.setChecked(True)   # every repeat the same length
    seen = Seen(window)
    window.worker.records.connect(seen.on_records)
    window.worker.event.connect(seen.on_event)
    with qtbot.waitSignal(window.runFinished, timeout=RUN_TIMEOUT_MS) as done:
        qtbot.mouseClick(window.controls.run_button, QtCore.Qt.MouseButton.LeftButton)
    result = done.args[0]
    starts = [i for i, (kind, _) in enumerate(seen.log) if kind == "repeat"]
    assert [seen.log[i][1] for i in starts] == [(1, 3), (2, 3), (3, 3)]
    assert result.repeats is not None and result.repeats.num_done == 3
    # the store (and the worker's record, which Export copies) hold the last repeat only
    last = read_run(window.store.source).steps   # the last repeat's steps (the engine process keeps none)
    assert len(set(result.repeats.run_ids)) == 3 and result.run_id == result.repeats.run_ids[-1]
    assert {s.run_id for s in last} == {result.run_id}
    assert window.store.num_steps == len(last) > 0 and window.store.run_id == result.run_id
    for i in starts[1:]:   # the earlier repeat stayed on screen until the next began, which started afresh
        before = [n for kind, n in seen.log[:i] if kind == "steps"][-1]
        after = [n for kind, n in seen.log[i:] if kind == "steps"][0]
        assert before > 0 and 0 < after <= len(last)
    assert window.store.steps.column("start_ms").min() == pytest.approx(min(s.start_ms for s in last))
    message = window.statusBar().currentMessage()
    assert message.startswith("Finished: 3 of 3 repeats") and "TTFT mean" in message and "±" in message
    iv = result.repeats.metrics["output_tokens_per_s"]
    assert f"output tokens/s {iv.mean:,.1f} ± {iv.half_width:,.1f}" in message
    window.repaint_views()
    label = window.metrics.repeats_label
    assert label.isVisible() and "Over 3 of 3 repeats" in label.text() and "TPOT mean" in label.text()


# ---- Compare policies ------------------------------------------------------------------------

def test_compare_policies_adds_a_reference_per_policy(qtbot, window, cache_dir):
    use_burst(window)
    window.controls.form.compare_check.setChecked(True)
    with qtbot.waitSignal(window.comparisonFinished, timeout=3 * RUN_TIMEOUT_MS) as done:
        qtbot.mouseClick(window.controls.run_button, QtCore.Qt.MouseButton.LeftButton)
    series = done.args[0]
    refs = list(window.references)
    assert [run_policy(r.run.config, r.run.info) for r in refs] == ["static", "continuous", "chunked",
                                                                      "disaggregated"]
    assert [r.name for r in refs] == ["R1 static", "R2 continuous", "R3 chunked", "R4 disaggregated"]
    assert all(len(r.run.requests) == 4 and r.run.steps for r in refs)
    assert all(r.folder.parent == series.folder.resolve() for r in refs)
    assert series.folder.is_relative_to(cache_dir)
    assert not window.running and window.compare.series is None
    # one curve per run on the throughput plot and on the latency CDF
    window.view_tabs.show_view(window.throughput)
    window.repaint_views()
    assert set(window.throughput.reference_curves) == {r.key for r in refs}
    window.view_tabs.show_view(window.distributions)
    window.distributions.refresh()
    assert set(window.distributions.curves) == {r.key for r in refs}
    assert all(window.distributions.counts[r.key] == 4 for r in refs)
    assert "Compared 4 of 4 runs" in window.statusBar().currentMessage()
    # the last run is still the current one: the disaggregated one, its steps in one row per worker
    assert window.store.config["engine"]["policy"] == "disaggregated" and window.store.num_requests == 4
    assert window.store.workers.names == ["prefill-0", "decode-0"] and window.worker_strip.isVisibleTo(window.live_page)


def test_compare_policies_adds_the_second_dtype_and_chunk_size_when_given(window):
    use_burst(window)
    form = window.controls.form
    form.compare_check.setChecked(True)
    f = form.fields["load"]
    assert f["compare_dtype"].isEnabled() and f["chunk_tokens"].isEnabled()
    f["compare_dtype"].setText("q8_0,q4_1")
    assert "one precision" in window.controls.errors()[0]
    f["compare_dtype"].setText("q8_0")
    f["compare_chunk"].setText("4")
    runs = form.compare_engines(window.controls.build_config().engine)
    assert [(name, e.policy, e.chunk_tokens, dtype) for name, e, dtype in runs] == [
        ("static", "static", 512, None), ("continuous", "continuous", 512, None), ("chunked", "chunked", 512, None),
        ("disaggregated", "disaggregated", 512, None), ("continuous q8_0", "continuous", 512, "q8_0"),
        ("chunked 4", "chunked", 4, None)]
    form.compare_check.setChecked(False)
    assert not f["compare_dtype"].isEnabled() and not form.compare_policies()


class StopInTheSecondRun(QtCore.QObject):
    def __init__(self, window):
        super().__init__()
        self.window = window

    @QtCore.Slot(object)
    def on_records(self, _batch) -> None:
        s = self.window.compare.series
        if s is not None and len(s.references) == 1 and not s.cancelled and self.window.running:
            self.window.controls.stop_button.click()


def test_stop_during_compare_policies_ends_the_series(qtbot, window):
    use_burst(window, requests="16", prompt_len="16", output_len="16")
    window.controls.form.compare_check.setChecked(True)

    stopper = StopInTheSecondRun(window)   # in the window's thread: records are queued to it
    window.worker.records.connect(stopper.on_records)
    with qtbot.waitSignal(window.comparisonFinished, timeout=3 * RUN_TIMEOUT_MS) as done:
        qtbot.mouseClick(window.controls.run_button, QtCore.Qt.MouseButton.LeftButton)
    series = done.args[0]
    assert series.cancelled and 1 <= len(series.references) <= 2
    assert not window.running and window.compare.series is None
    assert "not run" in window.statusBar().currentMessage()
    assert [r.name for r in window.references][0] == "R1 static"
    assert not window.controls.stop_button.isEnabled() and window.controls.run_button.isEnabled()
