"""The server's load under the lanes: a live remote run against the fake server with vLLM-style /metrics,
and a run folder with server_metrics.csv opened."""
import os

from tests.fakes.gui_fixtures import run_to_end

import numpy as np

from backend.config import RemoteEndpoint, RunConfig
from backend.targets.remote.target import run_remote
from backend.workload.spec import workload_from_dict
from gui.main_window import AXIS_WIDTH
from tests.fakes.fake_openai import Behaviour, FakeOpenAI

QUEUEING = Behaviour(gap_ms=5.0, ttft_ms=30.0, max_batch=2, metrics="vllm")   # 2 at a time: the rest wait


def use_remote(w, url):
    w.controls.select_remote(url, "fake")
    form = w.controls.form
    form.preset_combo.setCurrentText("custom")
    form.arrival_combo.setCurrentText("constant")
    form.source_combo.setCurrentText("synthetic")
    f = form.fields["load"]
    f["requests"].setText("12")
    f["rate"].setText("40")
    f["prompt_len"].setText("8")
    f["output_len"].setText("40")


def test_a_remote_run_draws_the_servers_load_under_the_lanes(qtbot, window, tmp_path):
    assert not window.server_view.isVisibleTo(window)   # no server yet: no view
    with FakeOpenAI(QUEUEING) as server:
        use_remote(window, server.url)
        result = run_to_end(qtbot, window)
    assert not result.error and result.summary.num_finished == 12
    view = window.server_view
    assert view.isVisibleTo(window)
    running = view.running_curve.getData()[1]
    waiting = view.waiting_curve.getData()[1]
    kv = view.kv_curve.getData()[1]
    assert len(running) >= 3 and running.max() == 2.0 and waiting.max() >= 1.0 and 0.0 < kv.max() <= 1.0
    assert "vllm" in view.getPlotItem().titleLabel.text
    # the lanes' time axis: linked, and the same left axis width, so the readings line up with the lanes
    assert view.getPlotItem().getViewBox().linkedView(0) is window.timeline.getPlotItem().getViewBox()
    assert view.getPlotItem().getAxis("left").width() == AXIS_WIDTH
    assert "running 2" in view.hover_text(float(view.running_curve.getData()[0][int(np.argmax(running))]))
    shot = os.environ.get("PHASESCOPE_SCREENSHOT_DIR", str(tmp_path))
    assert window.grab().save(os.path.join(shot, "server_metrics_live.png"))


def test_an_opened_run_folder_shows_its_server_metrics(qtbot, window, tmp_path):
    spec = workload_from_dict({"arrival": "burst", "num_requests": 8, "prompt_len": 16, "output_len": 30,
                               "prompt_source": "synthetic", "seed": 0}, "test")
    with FakeOpenAI(QUEUEING) as server:
        for folder, metrics in (("with", True), ("without", False)):
            config = RunConfig(mode="load", workload=spec, out_dir=str(tmp_path / folder),
                               endpoint=RemoteEndpoint(server.url, "fake", None, "completions", 30.0, metrics, None, 1))
            assert run_remote(config, lambda e: None, lambda: False).error is None
    assert window.files.open_run(str(tmp_path / "with"))
    window.repaint_views()
    view = window.server_view
    assert view.isVisibleTo(window) and view.waiting_curve.getData()[1].max() >= 1.0
    assert window.files.open_run(str(tmp_path / "without"))
    window.repaint_views()
    assert not view.isVisibleTo(window)
