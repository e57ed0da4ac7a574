"""Learn › The tour: the seed's claims, one experiment at a time, each a real run of the window.

The tour lives in the main window's own layout (gui/layout.py): its figure is a tab of the central
views, with the whole central area, and its words (the step's text, what to look at, the measured
sentence, the buttons) are a dock tabbed over the Controls, which a tour step does not need (it
sets its own runs). A separate window put the figure under three paragraphs and over the measured
sentence, a strip of a 960 x 820 window on top of the main one.

A step's runs go through the main window's own machinery (its runs controller: the engine process,
the live views, the status bar), one after another, the view that shows them live in front
(TourStep.view); when the last ends, its finding is computed from the records the window holds and
its figure comes forward with what to look at. Stop in the window ends the step (the runs so far
are not measured). A step that draws this machine's roofline (TourStep.uses_roofline) first
measures the machine when it has no calibrated profile (Run › Calibrate, seconds), so its roof is
this machine's and not the generic CPU's. A step can be run again, or exported: its table as CSV
and the window showing it as PNG.
"""
from __future__ import annotations

import csv
import time
from dataclasses import replace
from pathlib import Path

import pyqtgraph as pg
from PySide6 import QtCore, QtWidgets

from backend.records import Phase
from backend.roofline.profiles import local_profile_path
from backend.summary import Summary

from gui.layout import NotesPanel, plot_page, scrolled
from gui.tour import figure
from gui.tour.finding import Finding, Outcome
from gui.tour.steps import STEPS, TourStep

TOUR_TAB = "Tour"
TOUR_NOTE = ("<b>The tour.</b> The figure of the step shown in the tour's dock (beside the Controls, left), drawn "
             "from this machine's runs when the step ends, with what to look at marked on the measured data. While "
             "a step runs, the view its runs feed is in front (the live steps and lanes, or the sweep's plot).")
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
    """The tour's words, in a dock of `window`; its figure (`plot`) on a tab of the window's central views."""

    stepFinished = QtCore.Signal(int, object)   # step index, Finding
    stepFailed = QtCore.Signal(int, str)        # step index, why (stopped, failed, a run is going)

    def __init__(self, window, steps: list[TourStep] | None = None):
        super().__init__()
        self.setObjectName("tourPanel")
        self.window_ = window
        self.steps = steps if steps is not None else STEPS
        self.index = 0
        self.findings: dict[int, Finding] = {}
        self.took_s: dict[int, float] = {}
        self.queue: list[tuple[str, object]] = []   # the running step's runs still to go
        self.outcomes: list[Outcome] = []
        self.running_step: int | None = None
        self._calibrating = False        # this machine is being measured before the step's runs
        self.calibration_asked = False   # once a session: a failed one is not tried before every step
        self._started = 0.0
        self._current = ""
        self._build()
        self._place(window)
        window.runFinished.connect(self._on_run_finished)
        window.runFailed.connect(self._on_run_failed)
        window.runs.calibrated.connect(self._on_calibrated)
        self.show_step(0)

    def _build(self) -> None:
        self.heading = QtWidgets.QLabel()
        self.heading.setObjectName("tourHeading")
        self.heading.setWordWrap(True)
        self.heading.setStyleSheet("font-size: 13pt; font-weight: bold;")
        self.text = QtWidgets.QLabel()
        self.text.setWordWrap(True)
        self.text.setTextFormat(QtCore.Qt.TextFormat.PlainText)
        self.look = QtWidgets.QLabel()
        self.look.setWordWrap(True)
        self.look.setStyleSheet("color: #444; font-style: italic;")
        self.plot = pg.PlotWidget()
        self.plot.setObjectName("tourPlot")
        self.plot.setMinimumHeight(300)
        self.sentence = QtWidgets.QLabel()
        self.sentence.setObjectName("tourSentence")
        self.sentence.setWordWrap(True)
        self.sentence.setStyleSheet("background: #fff8e1; border: 1px solid #e0c060; padding: 6px; font-weight: bold;")
        self.state = QtWidgets.QLabel()
        self.state.setWordWrap(True)
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
        # a column of about 330-420 px: two buttons a row
        moves, acts = QtWidgets.QHBoxLayout(), QtWidgets.QHBoxLayout()
        moves.addWidget(self.previous_button)
        moves.addStretch(1)
        moves.addWidget(self.next_button)
        acts.addWidget(self.run_button)
        acts.addWidget(self.export_button)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.addLayout(moves)
        layout.addWidget(self.heading)
        layout.addWidget(self.text)
        layout.addWidget(self.look)
        layout.addLayout(acts)
        layout.addWidget(self.sentence)
        layout.addWidget(self.state)
        layout.addStretch(1)

    def _place(self, w) -> None:
        """The figure as a central view, the words as a dock tabbed over the Controls (full height, left)."""
        self.page = plot_page(self.plot)
        w.view_tabs.add_view(self.page, TOUR_TAB, "Learn › The tour: the figure of the step in the tour dock, "
                                                  "measured on this machine")
        w.notes.add_notes(self.page, NotesPanel.fixed(TOUR_NOTE))
        self.dock = QtWidgets.QDockWidget("The tour", w)   # its tab beside "Controls": short, both whole
        self.dock.setObjectName("tourDock")
        self.dock.setWidget(scrolled(self))
        w.addDockWidget(QtCore.Qt.DockWidgetArea.LeftDockWidgetArea, self.dock)
        w.tabifyDockWidget(w.controls_dock, self.dock)

    def bring_up(self) -> None:
        """Learn › The tour again: its words and its figure in front."""
        self.dock.show()
        self.dock.raise_()
        self.window_.view_tabs.show_view(self.page)

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
        """Run the shown step's runs one after another through the window (this machine measured
        first when the step draws its roofline and it never was)."""
        w = self.window_
        if w.running or self.running_step is not None:
            self._fail(self.index, "a run is going: stop it, or wait for it to end")
            return
        step = self.steps[self.index]
        threads = w.controls.threads_spin.value()   # the window's setting, as for its own runs
        self.queue = [(name, config if config.simulate else replace(config, threads=threads))
                      for name, config in step.runs()]
        self.outcomes = []
        self.running_step = self.index
        self._started = time.monotonic()
        if step.uses_roofline and not self.calibration_asked and not local_profile_path().is_file():
            self.calibration_asked = True
            self._calibrating = True
            self._show_state("Measuring this machine first (Run › Calibrate, a few seconds, once): this step's "
                             "roofline is then this machine's, not a generic CPU's…")
            w.runs.calibrate(w.controls.device_combo.currentText())
            return
        self._next_run()

    def _on_calibrated(self, *_) -> None:
        if self._calibrating:
            self._calibrating = False
            self._next_run()

    def _next_run(self) -> None:
        name, config = self.queue.pop(0)
        done = len(self.outcomes)
        total = done + 1 + len(self.queue)
        self._show_state(f"Running {done + 1} of {total}: {name}… (the window's views show it live; Stop ends it)")
        self._current = name
        w = self.window_
        w.runs.launch(config, f"tour step {self.running_step + 1}: {name}")
        # the view these runs feed gets the central area while they run: the sweep's plot for a sweep
        views = {"live": w.live_page, "throughput": w.throughput_page, "precision": w.precision,
                 "speculation": w.speculation}
        w.view_tabs.show_view(views[self.steps[self.running_step].view])

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
            self.window_.view_tabs.show_view(self.page)   # the finding's figure comes forward
        self.stepFinished.emit(index, finding)

    def _on_run_failed(self, message: str) -> None:
        if self._calibrating:   # the step runs on the generic profile, and its sentence says so
            self._calibrating = False
            self._next_run()
            return
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
        """The step's table as CSV and the window showing it (the tour's figure and words in front) as PNG,
        in `folder`."""
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
        self.bring_up()
        picture = folder / f"{self.file_stem(index)}.png"
        # a plot's layout settles on posted events (its axes' sizes, their names' places): let it, then grab
        QtWidgets.QApplication.sendPostedEvents()
        QtWidgets.QApplication.processEvents()
        if not self.window_.grab().save(str(picture)):
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
