"""The plan view: a tiny search runs in its worker thread and fills the table and the plot."""
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from tests.fakes.gui_fixtures import config_dir, no_thread_left  # noqa: F401,E402

from backend.planner.candidates import SearchSpace  # noqa: E402
from gui.views.plan import PlanView  # noqa: E402

TINY = SearchSpace(gpus=("h100-sxm",), max_gpus=2, precisions=("bfloat16",), policies=("continuous",),
                   tps=(1, 2), pps=(1,), dps=(1,), max_batches=(8, 64), kv_dtypes=("auto",))   # 4 candidates


def test_a_tiny_plan_fills_the_table_and_the_plot(qtbot, no_thread_left):  # noqa: F811
    view = PlanView()
    qtbot.addWidget(view)
    view.model_edit.setText("llama-8b")
    view.ttft_spin.setValue(300)
    view.tpot_spin.setValue(30)
    view.rate_spin.setValue(8)
    view.prompt_edit.setText("256")
    view.output_edit.setText("32")
    view.requests_spin.setValue(40)
    view.workers_spin.setValue(1)   # in the worker thread itself: no processes in a GUI test
    with qtbot.waitSignal(view.finished, timeout=60_000) as blocker:
        view.start(TINY)
    result = blocker.args[0]
    assert len(result.outcomes) == 4
    assert view.table.rowCount() == len(result.best) + len(result.front) > 0
    assert view.table.item(0, 1).text().endswith("h100-sxm bfloat16")
    assert "4 simulated of 4 candidates" in view.status.text()
    assert view.plot.getPlotItem().listDataItems()   # points drawn
    assert view.plan_button.isEnabled() and view.thread is None


def test_bad_input_is_one_line_in_the_status(qtbot, no_thread_left):  # noqa: F811
    view = PlanView()
    qtbot.addWidget(view)
    view.prompt_edit.setText("many")
    view.start(TINY)
    assert view.status.text().startswith("error: Prompt tokens") and view.thread is None
