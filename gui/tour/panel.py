"""Learn › The tour: the seed's claims, one experiment at a time, each a real run of the window.

A step's runs go through the main window's own machinery (its runs controller: the engine process,
the live views, the status bar), one after another; when the last ends, its finding is
computed from the records the window holds and drawn here with what to look at. Stop in the
window ends the step (the runs so far are not measured). A step can be run again, or
exported: its table as CSV and this panel, figure and sentence included, as PNG.
"""
from __future__ import annotations

import csv
import time
from dataclasses import replace
from pathlib import Path

import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from backend.records import Phase
from backend.summary import Summary

from gui.tour import figure
from gui.tour.finding import Finding, Outcome
from gui.tour.steps import STEPS, TourStep

TITLE = "Learn: the seed's claims, measured here"
PHASE_NAMES = [p.value for p in Phase]   # a worker row's phase code is the index in Phase


def worker_steps(store) -> dict[str, list[tuple[float, float, int, str]]]:
    """A disaggregated run's steps by worker, as the window holds them (its worker rows)."""
    out = {}
    for name in store.workers.names:
        rows = store.workers.rows[name]
        out[name] = [(float(a), float(b), int(t), PHASE_NAMES[int(p)]) for a, b, t, p in
                     zip(rows.column("start"), rows.column("end"), rows.column("tokens"), rows.column("phase"))]
    return out


class TourPanel(QtWidgets.QWidget):
    stepFinished = QtCore.Signal(int, object)   # step index, Finding
    stepFailed = QtCore.Signal(int, str)        # step index, why (stopped, failed, a run is going)

    def __init__(self, window, steps: list[TourStep] | None = None):
        super().__init__(window, QtCore.Qt.WindowType.Window)
        self.setWindowTitle(TITLE)
        self.setObjectName("tourPanel")
        self.window_ = window
        self.steps = steps if steps is not None else STEPS
        self.index = 0
        self.findings: dict[int, Finding] = {}
        self.took_s: dict[int, float] = {}
        self.queue: list[tuple[str, object]] = []   # the running step's runs still to go
        self.outcomes: list[Outcome] = []
        self.running_step: int | None = None
        self._started = 0.0
        self._current = ""
        self._build()
        window.runFinished.connect(self._on_run_finished)
        window.runFailed.connect(self._on_run_failed)
        window.installEventFilter(self)   # closes with the main window (a window of its own would stay up)
        self.resize(960, 820)
        self.show_step(0)

    def _build(self) -> None:
        self.heading = QtWidgets.QLabel()
        self.heading.setObjectName("tourHeading")
        self.heading.setStyleSheet("font-size: 15pt; font-weight: bold;")
        self.text = QtWidgets.QLabel()
        self.text.setWordWrap(True)
        self.text.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.look = QtWidgets.QLabel()
        self.look.setWordWrap(True)
        self.look.setStyleSheet("color: #444; font-style: italic;")
        self.plot = pg.PlotWidget()
        self.plot.setMinimumHeight(300)
        self.sentence = QtWidgets.QLabel()
        self.sentence.setObjectName("tourSentence")
        self.sentence.setWordWrap(True)
        self.sentence.setStyleSheet("background: #fff8e1; border: 1px solid #e0c060; padding: 6px; font-weight: bold;")
        self.state = QtWidgets.QLabel()
        self.state.setStyleSheet("color: #555;")
        self.previous_button = QtWidgets.QPushButton("◀ Previous")
        self.run_button = QtWidgets.QPushButton("Run this step")
        self.run_button.setDefault(True)
        self.export_button = QtWidgets.QPushButton("Export CSV and PNG…")
        self.next_button = QtWidgets.QPushButton("Next ▶")
        self.previous_button.clicked.connect(lambda: self.show_step(self.index - 1))
        self.next_button.clicked.connect(lambda: self.show_step(self.index + 1))
        self.run_button.clicked.connect(self.run_step)
        self.export_button.clicked.connect(self._export_dialog)
        buttons = QtWidgets.QHBoxLayout()
        buttons.addWidget(self.previous_button)
        buttons.addStretch(1)
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.export_button)
        buttons.addStretch(1)
        buttons.addWidget(self.next_button)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(self.heading)
        layout.addWidget(self.text)
        layout.addWidget(self.look)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.sentence)
        layout.addWidget(self.state)
        layout.addLayout(buttons)

    def eventFilter(self, watched, event) -> bool:
        if watched is self.window_ and event.type() == QtCore.QEvent.Type.Close:
            self.close()
        return False

    # ---- navigating --------------------------------------------------------------------------

    def show_step(self, index: int) -> None:
        self.index = max(0, min(index, len(self.steps) - 1))
        step = self.steps[self.index]
        self.heading.setText(f"{self.index + 1} of {len(self.steps)} · {step.title}")
        self.text.setText(step.text)
        self.look.setText("What to look at: " + step.look)
        self.previous_button.setEnabled(self.index > 0)
        self.next_button.setEnabled(self.index < len(self.steps) - 1)
        finding = self.findings.get(self.index)
        if finding is not None:
            figure.draw(self.plot, finding.figure)
            self.sentence.setText("Measured here: " + finding.sentence)
        else:
            figure.message(self.plot, step.title, "Press “Run this step”: the figure is measured on this machine")
            self.sentence.setText("Measured here: not yet — this step has not run in this session.")
        self._show_state()
        self._fit_labels()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit_labels()

    def _fit_labels(self) -> None:
        """Wrapped labels get the height their text needs at this width (a layout gives them their
        one-line hint, and the plot, which stretches, would squeeze them)."""
        margins = self.layout().contentsMargins()
        width = self.width() - margins.left() - margins.right()
        if width < 300:   # not laid out yet: a narrow width would ask for a very tall window
            return
        for label in (self.text, self.look, self.sentence):
            label.setMinimumHeight(label.heightForWidth(width))

    def _show_state(self, text: str | None = None) -> None:
        running = self.running_step is not None
        self.run_button.setEnabled(not running)
        self.export_button.setEnabled(self.index in self.findings)
        if text is None:
            took = self.took_s.get(self.index)
            text = (f"This step took {took:.0f} s here (Run again to measure again)." if took is not None else
                    f"Step {self.running_step + 1} is running." if running else "")
        self.state.setText(text)

    # ---- running -----------------------------------------------------------------------------

    def run_step(self) -> None:
        """Run the shown step's runs one after another through the window."""
        w = self.window_
        if w.running or self.running_step is not None:
            self._fail(self.index, "a run is going: stop it, or wait for it to end")
            return
        threads = w.controls.threads_spin.value()   # the window's setting, as for its own runs
        self.queue = [(name, config if config.simulate else replace(config, threads=threads))
                      for name, config in self.steps[self.index].runs()]
        self.outcomes = []
        self.running_step = self.index
        self._started = time.monotonic()
        self._next_run()

    def _next_run(self) -> None:
        name, config = self.queue.pop(0)
        done = len(self.outcomes)
        total = done + 1 + len(self.queue)
        self._show_state(f"Running {done + 1} of {total}: {name}… (the window's views show it live; Stop ends it)")
        self._current = name
        self.window_.runs.launch(config, f"tour step {self.running_step + 1}: {name}")

    def _on_run_finished(self, result) -> None:
        if self.running_step is None:
            return
        if result.stopped or result.error:
            self._fail(self.running_step, "stopped" if result.stopped else f"the run failed: {result.error}")
            return
        data = self.window_.store.to_run_data()
        if data.summary == Summary():   # the store held none: the result's
            data.summary = result.summary
        store = self.window_.store
        self.outcomes.append(Outcome(self._current, data, list(store.sweep_points), list(store.precision_points),
                                     worker_steps(store)))
        if self.queue:
            self._next_run()
            return
        index, self.running_step = self.running_step, None
        try:
            finding = self.steps[index].measure(self.outcomes)
        except (ValueError, KeyError, ZeroDivisionError, StopIteration) as exc:   # records too few to measure
            self._fail(index, f"the runs ended but could not be measured: {exc}")
            return
        self.findings[index] = finding
        self.took_s[index] = time.monotonic() - self._started
        if index == self.index:
            self.show_step(index)
        self.stepFinished.emit(index, finding)

    def _on_run_failed(self, message: str) -> None:
        if self.running_step is not None:
            self._fail(self.running_step, f"the run failed: {message}")

    def _fail(self, index: int, why: str) -> None:
        self.running_step = None
        self.queue = []
        self._show_state(f"Step {index + 1} did not finish: {why}.")
        self.stepFailed.emit(index, why)

    # ---- exporting ---------------------------------------------------------------------------

    def file_stem(self, index: int) -> str:
        return f"tour-{index + 1}-{self.steps[index].key}"

    def export_step(self, folder: str | Path, index: int | None = None) -> list[Path]:
        """The step's table as CSV and this panel showing it as PNG, in `folder`."""
        index = self.index if index is None else index
        finding = self.findings[index]
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        table = folder / f"{self.file_stem(index)}.csv"
        with table.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(finding.header)
            writer.writerows(finding.rows)
        if index != self.index:
            self.show_step(index)
        picture = folder / f"{self.file_stem(index)}.png"
        # a plot's layout settles on posted events (its axes' sizes, their names' places): let it, then grab
        QtWidgets.QApplication.sendPostedEvents()
        QtWidgets.QApplication.processEvents()
        if not self.grab().save(str(picture)):
            raise OSError(f"cannot write {picture}")
        return [table, picture]

    def _export_dialog(self) -> None:
        folder = QtWidgets.QFileDialog.getExistingDirectory(self, "Export this step to a folder")
        if not folder:
            return
        try:
            written = self.export_step(folder)
        except OSError as exc:
            self._show_state(f"Export failed: {exc}")
            return
        self._show_state("Exported " + ", ".join(p.name for p in written) + f" to {folder}")
