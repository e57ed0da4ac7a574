"""Plan deployment: the planner's form, its search in a worker thread, the cheapest configurations and
the Pareto front as a table, and the cost-against-goodput plot (gui.plan_plot draws it).

The search (backend.planner.search) runs in a QThread; its simulations run in processes started
with the 'spawn' method (never forked from a process that holds Qt's threads). The worker never
touches a widget: it sends progress, the result or one line of failure; Stop sets a flag the
search checks between candidates.
"""
from __future__ import annotations

import math
import threading
from pathlib import Path

import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from backend.errors import InputError, one_line
from gui.plan_plot import draw_plan

COLUMNS = ("", "devices", "layout", "policy", "batch", "goodput req/s", "SLO met", "SLO met at edge", "TTFT p90 ms",
           "TPOT p90 ms", "$/h", "$/1M tokens", "$/1M in", "$/1M out")


class PlanWorker(QtCore.QObject):
    progress = QtCore.Signal(int, int)     # done, total
    finished = QtCore.Signal(object)       # PlanResult
    failed = QtCore.Signal(str)            # one line

    def __init__(self, problem, space, workers: int, budget: int):
        super().__init__()
        self.problem, self.space, self.workers, self.budget = problem, space, workers, budget
        self.stop = threading.Event()

    @QtCore.Slot()
    def run(self) -> None:
        from backend.planner.search import search
        try:
            result = search(self.problem, self.space, workers=self.workers, budget=self.budget,
                            on_outcome=lambda _o, done, total: self.progress.emit(done, total),
                            should_stop=self.stop.is_set, mp_context="spawn")
        except InputError as exc:
            self.failed.emit(str(exc))
        except Exception as exc:   # the window shows it; the thread ends cleanly
            self.failed.emit(one_line(exc, typed=True))
        else:
            self.finished.emit(result)


class PlanView(QtWidgets.QWidget):
    finished = QtCore.Signal(object)   # PlanResult, once the table and the plot show it

    def __init__(self, parent=None):
        super().__init__(parent)
        self.thread: QtCore.QThread | None = None
        self.worker: PlanWorker | None = None
        self.result = None
        self._build()
        app = QtWidgets.QApplication.instance()
        if app is not None:   # a search under way when the program quits is stopped and waited for
            app.aboutToQuit.connect(self.shut_down)

    def shut_down(self) -> None:
        self.stop()
        self._end()

    def _build(self) -> None:
        from backend.planner.inputs import DEFAULT_GPUS
        from backend.planner.candidates import POLICIES, PRECISION_ORDER
        form = QtWidgets.QFormLayout()
        self.model_edit = QtWidgets.QLineEdit("llama-3.1-70b")
        self.ttft_spin = self._spin(1, 1e6, 1000, " ms")
        self.tpot_spin = self._spin(0.1, 1e5, 40, " ms")
        self.attainment_spin = self._spin(1, 100, 90, " % of requests")
        self.rate_spin = self._spin(0.01, 1e4, 4, " req/s")
        self.trace_edit = QtWidgets.QLineEdit()
        self.trace_edit.setPlaceholderText("none: Poisson arrivals at the rate")
        self.trace_edit.setToolTip("a trace's arrivals and lengths instead (Azure CSV, Mooncake JSONL, a requests.csv)")
        trace_button = QtWidgets.QToolButton()
        trace_button.setText("…")
        trace_button.clicked.connect(self._choose_trace)
        trace_row = QtWidgets.QHBoxLayout()
        trace_row.setContentsMargins(0, 0, 0, 0)
        trace_row.addWidget(self.trace_edit, 1)
        trace_row.addWidget(trace_button)
        self.prompt_edit, self.output_edit = QtWidgets.QLineEdit("1024"), QtWidgets.QLineEdit("256")
        self.seed_spin = self._int(0, 2**31 - 1, 0)
        self.gpus_edit = QtWidgets.QLineEdit(DEFAULT_GPUS)
        self.max_gpus_spin = self._int(1, 64, 8)
        self.precisions_edit = QtWidgets.QLineEdit(",".join(PRECISION_ORDER))
        self.kv_dtypes_edit = QtWidgets.QLineEdit("auto,fp8")
        self.policies_edit = QtWidgets.QLineEdit(",".join(POLICIES))
        from gui.panels.sim_choices import engine_choices
        self.engine_combo = QtWidgets.QComboBox()
        for name, tip in engine_choices():   # the default (vllm) first
            self.engine_combo.addItem(name)
        self.engine_combo.setToolTip("--engine: the serving engine whose host costs every candidate's steps pay")
        self.max_batches_edit = QtWidgets.QLineEdit("32,64,128,256")
        self.requests_spin = self._int(1, 100_000, 200)
        self.budget_spin = self._int(1, 10_000, 220)
        self.workers_spin = self._int(1, 256, QtCore.QThread.idealThreadCount() or 1)
        # plan --confidence: 0 is off (rank by the centre; the 80% band's edge shown beside it)
        self.confidence_spin = self._spin(0, 99, 0, " % band")
        self.confidence_spin.setDecimals(0)
        self.confidence_spin.setSpecialValueText("off: rank by the centre")
        self.confidence_spin.setToolTip("rank by the SLOs met at the simulated figures' pessimistic band edge at this "
                                        "level (the simulator's cross-validated errors on published figures)")
        self.top_spin = self._int(1, 1000, 5)
        self.top_spin.setToolTip("the cheapest configurations listed above the Pareto front")
        # speculative decoding searched as K (plan --spec, --spec-tokens; the pricing's flags in the box below)
        self.spec_edit = QtWidgets.QLineEdit()
        self.spec_edit.setPlaceholderText("off: ngram | draft:MODEL")
        self.spec_edit.setToolTip("--spec: the proposer of the candidates that speculate; empty: none speculate")
        self.spec_tokens_edit = QtWidgets.QLineEdit("0,2,4,8")
        self.spec_tokens_edit.setToolTip("--spec-tokens: the guesses K searched, beside the rest (0: off)")
        spec_row = QtWidgets.QHBoxLayout()
        spec_row.setContentsMargins(0, 0, 0, 0)
        spec_row.addWidget(self.spec_edit, 2)
        spec_row.addWidget(QtWidgets.QLabel("K"))
        spec_row.addWidget(self.spec_tokens_edit, 1)
        from gui.panels.sim_spec import SimSpecPricing
        self.spec_pricing = SimSpecPricing("Guesses priced")
        for label, widget in (("Model", self.model_edit), ("TTFT SLO", self.ttft_spin), ("TPOT SLO", self.tpot_spin),
                              ("Met by", self.attainment_spin), ("Rank at band edge", self.confidence_spin),
                              ("Rate", self.rate_spin), ("Trace", trace_row),
                              ("Prompt tokens", self.prompt_edit), ("Output tokens", self.output_edit),
                              ("Seed", self.seed_spin), ("GPUs", self.gpus_edit), ("Max GPUs", self.max_gpus_spin),
                              ("Precisions", self.precisions_edit), ("KV dtypes", self.kv_dtypes_edit),
                              ("Engine", self.engine_combo),
                              ("Policies", self.policies_edit), ("Max batches", self.max_batches_edit),
                              ("Requests / candidate", self.requests_spin), ("Candidates simulated", self.budget_spin),
                              ("Processes", self.workers_spin), ("Cheapest shown", self.top_spin),
                              ("Speculation", spec_row)):
            form.addRow(label, widget)
        form.addRow(self.spec_pricing)
        self.spec_edit.textChanged.connect(self._spec_shown)
        self._spec_shown()
        self.plan_button = QtWidgets.QPushButton("Plan")
        self.stop_button = QtWidgets.QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.plan_button.clicked.connect(self.start)
        self.stop_button.clicked.connect(self.stop)
        buttons = QtWidgets.QHBoxLayout()
        self.export_button = QtWidgets.QPushButton("Export…")
        self.export_button.setToolTip("plan.csv, pareto.csv and plan.png into a folder, as plan --out writes them")
        self.export_button.setEnabled(False)
        self.export_button.clicked.connect(self._choose_export)
        buttons.addWidget(self.plan_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.export_button)
        self.status = QtWidgets.QLabel("")
        self.status.setWordWrap(True)
        left = QtWidgets.QVBoxLayout()
        left.addLayout(form)
        left.addLayout(buttons)
        left.addWidget(self.status)
        left.addStretch(1)
        self.table = QtWidgets.QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.plot = pg.PlotWidget(background="w")
        self.plot.setMinimumHeight(260)
        right = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        right.addWidget(self.table)
        right.addWidget(self.plot)
        layout = QtWidgets.QHBoxLayout(self)
        side = QtWidgets.QWidget()
        side.setLayout(left)
        side.setMaximumWidth(330)
        layout.addWidget(side)
        layout.addWidget(right, 1)

    @staticmethod
    def _spin(low: float, high: float, value: float, suffix: str) -> QtWidgets.QDoubleSpinBox:
        spin = QtWidgets.QDoubleSpinBox()
        spin.setRange(low, high)
        spin.setDecimals(2)
        spin.setValue(value)
        spin.setSuffix(suffix)
        return spin

    @staticmethod
    def _int(low: int, high: int, value: int) -> QtWidgets.QSpinBox:
        spin = QtWidgets.QSpinBox()
        spin.setRange(low, high)
        spin.setValue(value)
        return spin

    # ---- the search -------------------------------------------------------------------------

    def problem_and_space(self):
        """The form as `plan`'s flags, checked by the CLI's own code (the same one-line refusals)."""
        from argparse import Namespace
        from backend.planner.inputs import problem_and_space
        trace = self.trace_edit.text().strip() or None
        args = Namespace(model=self.model_edit.text().strip(), slo_ttft_ms=self.ttft_spin.value(),
                         slo_tpot_ms=self.tpot_spin.value(), attainment=self.attainment_spin.value() / 100,
                         rate=None if trace else self.rate_spin.value(), trace=trace,
                         prompt_len=self.prompt_edit.text(), output_len=self.output_edit.text(),
                         requests=self.requests_spin.value(), seed=self.seed_spin.value(),
                         gpus=self.gpus_edit.text(), max_gpus=self.max_gpus_spin.value(),
                         precisions=self.precisions_edit.text(), kv_dtypes=self.kv_dtypes_edit.text(),
                         policies=self.policies_edit.text(), max_batches=self.max_batches_edit.text(),
                         confidence=self.confidence_spin.value() / 100 or None,
                         engine=self.engine_combo.currentText(), spec=self.spec_edit.text().strip() or None,
                         spec_tokens=self.spec_tokens_edit.text().strip() or "4",
                         spec_acceptance=self.spec_pricing.acceptance(), spec_draft_cost=self.spec_pricing.draft_cost(),
                         spec_from=self.spec_pricing.spec_from())
        return problem_and_space(args)

    def _spec_shown(self) -> None:
        """K and the guesses' pricing take part once a proposer is named."""
        on = bool(self.spec_edit.text().strip())
        self.spec_tokens_edit.setEnabled(on)
        self.spec_pricing.setVisible(on)

    def _choose_trace(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Trace to plan for", "",
                                                        "Traces (*.csv *.jsonl *.json);;All files (*)")
        if path:
            self.trace_edit.setText(path)

    def _choose_export(self) -> None:
        folder = QtWidgets.QFileDialog.getExistingDirectory(self, "Write plan.csv, pareto.csv and plan.png into")
        if folder:
            self.export(folder)

    def export(self, folder: str) -> list:
        """Write the shown result as `plan --out FOLDER` does; the paths written (the status line says which)."""
        from backend.planner.report import render_png
        from backend.planner import report
        try:
            paths = list(report.write_csvs(self.result, folder))
        except OSError as exc:
            self.status.setText(f"error: could not write into {folder}: {exc.strerror or exc}")
            return []
        png = Path(folder) / "plan.png"
        line = render_png(paths[0], png, self.model_edit.text().strip())   # drawn in a child, as the CLI's
        if line is None:
            paths.append(png)
        self.status.setText("wrote " + ", ".join(str(p) for p in paths) + (f"; {line}" if line else ""))
        return paths

    def start(self, space=None) -> None:
        """Start a search (`space` replaces the form's search space: tests use a tiny one)."""
        if self.thread is not None:
            return
        try:
            problem, form_space = self.problem_and_space()
        except InputError as exc:
            self.status.setText(f"error: {exc}")
            return
        self.worker = PlanWorker(problem, space or form_space, self.workers_spin.value(), self.budget_spin.value())
        self.thread = QtCore.QThread(self)
        from gui.worker import _threads   # the tests' fixture fails a run that leaves one running
        _threads.add(self.thread)
        self.worker.moveToThread(self.thread)
        self.thread.started.connect(self.worker.run)
        self.worker.progress.connect(self._progress)
        self.worker.finished.connect(self._finished)
        self.worker.failed.connect(self._failed)
        self.plan_button.setEnabled(False)
        self.stop_button.setEnabled(True)
        self.status.setText("choosing candidates...")
        self.thread.start()

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop.set()
            self.status.setText("stopping after the candidates under way...")

    def _progress(self, done: int, total: int) -> None:
        self.status.setText(f"simulated {done} of {total} candidates")

    def _failed(self, message: str) -> None:
        self._end()
        self.status.setText(f"error: {message}")

    def _finished(self, result) -> None:
        self._end()
        self.show_result(result)
        self.finished.emit(result)

    def _end(self) -> None:
        if self.thread is not None:
            self.thread.quit()
            self.thread.wait()
            self.thread = None
            self.worker = None
        self.plan_button.setEnabled(True)
        self.stop_button.setEnabled(False)

    # ---- showing a result -------------------------------------------------------------------

    def show_result(self, result) -> None:
        from backend.planner.report import row
        self.result = result
        meets = sum(1 for o in result.outcomes if o.meets)
        self.status.setText(f"{len(result.outcomes)} simulated of {result.num_enumerated} candidates "
                            f"({sum(result.pruned.values())} pruned, {result.num_screened_out} screened out) in "
                            f"{result.wall_s:.1f} s; {meets} meet the SLOs, "
                            f"{sum(1 for o in result.outcomes if o.meets_at_edge)} at the "
                            f"{result.problem.band_level:.0%} band's pessimistic edge"
                            + (" (ranked by it)" if result.problem.confidence else "")
                            + (" (stopped)" if result.stopped else ""))
        self.export_button.setEnabled(True)
        shown = [("cheapest", o) for o in result.best[:self.top_spin.value()]] + [("front", result.outcomes[i]) for i in result.front]
        self.table.setRowCount(len(shown))
        for r, (kind, o) in enumerate(shown):
            c = o.candidate
            cells = (kind, f"{c.devices} x {c.gpu} {c.numbers}", c.layout, c.policy, str(c.max_batch),
                     _num(o.goodput, 2), _num(100 * o.attainment, 0) + "%", _num(100 * o.attainment_low, 0) + "%",
                     _span(o.ttft_p90_ms, o.ttft_p90_high_ms, 0), _span(o.tpot_p90_ms, o.tpot_p90_high_ms, 1), _num(o.usd_per_hour, 2), _num(o.usd_per_m_tokens, 3),
                     _num(o.usd_per_m_input, 3), _num(o.usd_per_m_output, 3))
            for col, text in enumerate(cells):
                self.table.setItem(r, col, QtWidgets.QTableWidgetItem(text))
        self.table.resizeColumnsToContents()
        front = set(result.front)
        draw_plan(self.plot.getPlotItem(), [row(o, i in front) for i, o in enumerate(result.outcomes)])

    def closeEvent(self, event) -> None:   # noqa: N802 (Qt's name)
        self.shut_down()
        super().closeEvent(event)


def _num(value: float, digits: int) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:,.{digits}f}"


def _span(value: float, high: float, digits: int) -> str:
    """'14 (≤ 20)': a latency and its band's pessimistic edge."""
    text = _num(value, digits)
    return text if high is None or not math.isfinite(high) else f"{text} (≤ {_num(high, digits)})"


class PlanDialog(QtWidgets.QDialog):
    """The plan view in a window of its own (Run > Plan deployment...)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Plan deployment")
        self.resize(1250, 760)
        self.view = PlanView(self)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.view)

    def closeEvent(self, event) -> None:   # noqa: N802
        self.view.shut_down()
        super().closeEvent(event)
