"""The plan view: a tiny search runs in its worker thread and fills the table and the plot."""
from pathlib import Path

from backend.planner.candidates import SearchSpace
from gui.views.plan import PlanView

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
    assert view.status.text().startswith("error: --prompt-len") and view.thread is None
    view.prompt_edit.setText("256")
    view.kv_dtypes_edit.setText("auto,fp6")
    view.start(TINY)
    assert view.status.text() == "error: --kv-dtypes: unknown 'fp6' (known: auto, fp8)" and view.thread is None


def test_the_form_is_plans_flags(qtbot):
    """Each field the Plan dialog shows becomes the Problem and SearchSpace `plan` builds from its flag."""
    view = PlanView()
    qtbot.addWidget(view)
    view.attainment_spin.setValue(95)
    view.seed_spin.setValue(7)
    view.precisions_edit.setText("fp8")
    view.policies_edit.setText("chunked")
    view.max_batches_edit.setText("16,48")
    view.kv_dtypes_edit.setText("fp8")
    problem, space = view.problem_and_space()
    assert (problem.attainment, problem.seed, problem.trace) == (0.95, 7, None)
    assert (space.precisions, space.policies, space.max_batches, space.kv_dtypes) == (("fp8",), ("chunked",),
                                                                                     (16, 48), ("fp8",))
    trace = Path(__file__).resolve().parents[3] / "tests" / "data" / "traces"
    view.trace_edit.setText(str(next(trace.glob("*.csv"))))
    problem, _ = view.problem_and_space()
    assert problem.trace and problem.trace.endswith(".csv")
    assert problem.confidence is None   # off by default: ranked by the centre
    view.confidence_spin.setValue(80)
    problem, _ = view.problem_and_space()
    assert problem.confidence == 0.8 and problem.band_level == 0.8


def test_the_table_shows_each_latencys_band_edge_and_the_slo_at_the_edge(qtbot, no_thread_left):  # noqa: F811
    view = PlanView()
    qtbot.addWidget(view)
    view.model_edit.setText("llama-8b")
    for spin, value in ((view.ttft_spin, 300), (view.tpot_spin, 30), (view.rate_spin, 8), (view.requests_spin, 40),
                        (view.workers_spin, 1), (view.confidence_spin, 80)):
        spin.setValue(value)
    view.prompt_edit.setText("256")
    view.output_edit.setText("32")
    with qtbot.waitSignal(view.finished, timeout=60_000) as blocker:
        view.start(TINY)
    result = blocker.args[0]
    assert result.problem.confidence == 0.8 and all(o.meets_at_edge for o in result.best)
    header = [view.table.horizontalHeaderItem(c).text() for c in range(view.table.columnCount())]
    ttft = view.table.item(0, header.index("TTFT p90 ms")).text()
    assert "(≤ " in ttft   # the centre and its pessimistic edge
    assert view.table.item(0, header.index("SLO met at edge")).text().endswith("%")
    assert "at the 80% band's pessimistic edge (ranked by it)" in view.status.text()


def test_top_limits_the_cheapest_rows_and_export_writes_what_plan_out_writes(qtbot, tmp_path, no_thread_left):  # noqa: F811
    view = PlanView()
    qtbot.addWidget(view)
    view.model_edit.setText("llama-8b")
    view.ttft_spin.setValue(2000)
    view.tpot_spin.setValue(100)
    view.rate_spin.setValue(2)
    view.prompt_edit.setText("256")
    view.output_edit.setText("32")
    view.requests_spin.setValue(30)
    view.workers_spin.setValue(1)
    view.top_spin.setValue(1)
    assert not view.export_button.isEnabled()   # nothing to write before a search
    with qtbot.waitSignal(view.finished, timeout=60_000) as blocker:
        view.start(TINY)
    result = blocker.args[0]
    assert len(result.best) > 1   # the lenient SLOs: several meet them, one row is shown
    assert view.table.rowCount() == 1 + len(result.front)
    paths = view.export(str(tmp_path / "plan"))
    assert {p.name for p in paths} == {"plan.csv", "pareto.csv", "plan.png"}
    assert all(p.stat().st_size > 0 for p in paths)


def test_the_plots_chosen_label_names_the_layout_as_the_table_does(tmp_path):
    """plan.csv's row read back gives the chosen point's label Candidate.layout, K included, on either kind
    of layout (the annotation of `plan --out`'s PNG and of the window's plot)."""
    import csv
    from backend.planner import report
    from backend.planner.candidates import Candidate
    from backend.planner.evaluate import Outcome
    from gui.plan_plot import describe, read_plan_csv
    candidates = [Candidate("h100-sxm", "bfloat16", "continuous", 64, dp=2, spec_tokens=4),
                  Candidate("h100-sxm", "fp8", "disaggregated", 64, tp=2, prefill_workers=1, decode_workers=3,
                            decode_tp=1, spec_tokens=2),
                  Candidate("h100-sxm", "bfloat16", "chunked", 64, tp=2)]
    path = tmp_path / "plan.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=report.COLUMNS)
        writer.writeheader()
        writer.writerows(report.row(Outcome(c), False) for c in candidates)
    for c, row in zip(candidates, read_plan_csv(path)):
        assert f", {c.layout}, " in describe(row)
    assert candidates[1].layout == "P1xtp2:D3xtp1 K2"
