"""What the command line does besides runs, from the window: `calibrate --fit` (the Profile box's
Fit…), the worked example (Run › Worked example…), the planner (Run › Plan deployment…), the tour
(Learn › The tour…), and the engine process started ahead of the first Run."""
from __future__ import annotations

import os
from pathlib import Path

from PySide6 import QtCore, QtWidgets

from backend.errors import InputError
from backend.roofline.profiles import LOCAL_KEY

WARM_AFTER_MS = 300   # the settings settle (a typed hub id, several combos set in a row) before the engine starts


def calibration_runs_dir() -> Path:
    """Where Fit… measures its runs: $XDG_CACHE_HOME/phasescope/calibration-runs (the CLI: ./calibration-runs)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "phasescope" / "calibration-runs"


class ToolsController(QtCore.QObject):
    """Works through `runs` (the RunsController) on the settings of `controls` (the ControlsPanel);
    `window`, the main window, parents the dialogs, and the example and the tour run through it."""

    fitFinished = QtCore.Signal(object)   # a FitReport, once its dialog shows it
    message = QtCore.Signal(str)

    def __init__(self, runs, controls, window: QtWidgets.QWidget):
        super().__init__(window)
        self.runs = runs
        self.controls = controls
        self.window = window
        self.warmed: tuple | None = None   # the settings the engine process was last started for
        self.warm_timer = QtCore.QTimer(self)
        self.warm_timer.setSingleShot(True)
        self.warm_timer.setInterval(WARM_AFTER_MS)
        self.warm_timer.timeout.connect(self.warm_engine)
        self.fit_dialog = self.example_dialog = self.plan_dialog = self.tour = None
        controls.fitRequested.connect(self.start_fit)
        controls.choicesChanged.connect(self.warm_timer.start)
        runs.fitted.connect(self._on_fitted)
        self.warm_timer.start()   # when the window opens

    def stop(self) -> None:
        """The window is going: no engine process started for it."""
        self.warm_timer.stop()

    # ---- the engine, started ahead ----------------------------------------------------------

    def warm_engine(self) -> None:
        """Start the engine process (and load the model in it) for the settings on screen, so that the
        first Run starts at once; again when the model, device, dtype, prefill math or threads change."""
        if self.runs.running:
            return
        try:
            config = self.controls.build_config()
        except InputError:   # nothing runnable yet: the Run that follows says why
            return
        m = config.model
        key = (m.name, m.device, m.dtype, m.prefill_math, config.threads, config.simulate,
               config.endpoint.url if config.endpoint is not None else None)
        if key == self.warmed:
            return
        if self.runs.warm(config):
            self.warmed = key

    # ---- calibrate --fit ----------------------------------------------------------------------

    def start_fit(self, device: str) -> None:
        """The standard runs of the bundled model measured, the cost model fitted to them and stored in
        this machine's profile, in the engine process; the report opens when it ends."""
        if self.runs.fit(calibration_runs_dir(), device, self.controls.threads_spin.value()):
            self.warmed = None   # the fit's runs replace the model the engine held

    def _on_fitted(self, report) -> None:
        from gui.views.tool_dialogs import FitDialog
        self.controls.reload_profiles()
        self.controls.select_profile(LOCAL_KEY)
        worst = [fitted.overall(phase) for _, fitted, _ in report.held_out for phase in ("prefill", "decode")]
        worst = [row.mape for row in worst if row is not None]
        error = f"; held-out step-time error up to {max(worst):.1f}%" if worst else ""
        self.message.emit(f"Fitted the cost model to {report.num_runs} runs{error}: written to {report.path}")
        self.fit_dialog = FitDialog(report, self.window)
        self.fit_dialog.show()
        self.fitFinished.emit(report)

    # ---- the worked example and the planner: a window each; the tour: a dock and a view of this one ----

    def open_example(self) -> None:
        from gui.views.tool_dialogs import ExampleDialog
        if self.example_dialog is None:
            self.example_dialog = ExampleDialog(self.window)
        _bring_up(self.example_dialog)

    def open_plan(self) -> None:
        """Run > Plan deployment: the planner's own window (gui/views/plan.py)."""
        from gui.views.plan import PlanDialog
        if self.plan_dialog is None:
            self.plan_dialog = PlanDialog(self.window)
        _bring_up(self.plan_dialog)

    def open_tour(self) -> None:
        """Learn > The tour (gui/tour/panel.py): each step a run of the main window."""
        from gui.tour.panel import TourPanel
        if self.tour is None:
            self.tour = TourPanel(self.window)   # a dock and a central view of the window (gui/tour/panel.py)
        self.tour.bring_up()


def _bring_up(dialog: QtWidgets.QWidget) -> None:
    dialog.show()
    dialog.raise_()
