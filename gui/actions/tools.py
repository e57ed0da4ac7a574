"""What the command line does besides runs, from the window: `calibrate --fit` (the Profile box's
Fit…), the worked example (Run › Worked example…), and the engine process started ahead of the
first Run. (Methods of MainWindow.)"""
from __future__ import annotations

import os
from pathlib import Path

from PySide6 import QtCore

from backend.errors import InputError
from backend.roofline.profiles import LOCAL_KEY

WARM_AFTER_MS = 300   # the settings settle (a typed hub id, several combos set in a row) before the engine starts


def calibration_runs_dir() -> Path:
    """Where Fit… measures its runs: $XDG_CACHE_HOME/phasescope/calibration-runs (the CLI: ./calibration-runs)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "phasescope" / "calibration-runs"


class ToolActions:
    """Mixed into MainWindow: uses its controls, worker, running state, status bar, show_error and
    its startFit and warmEngine signals (queued to the worker's thread)."""

    def _build_tools(self) -> None:
        self._warmed: tuple | None = None   # the settings the engine process was last started for
        self.warm_timer = QtCore.QTimer(self)
        self.warm_timer.setSingleShot(True)
        self.warm_timer.setInterval(WARM_AFTER_MS)
        self.warm_timer.timeout.connect(self.warm_engine)
        self.fit_dialog = self.example_dialog = None
        self.controls.fitRequested.connect(self.start_fit)
        self.controls.choicesChanged.connect(self.warm_timer.start)
        self.warm_timer.start()   # when the window opens

    # ---- the engine, started ahead ----------------------------------------------------------

    def warm_engine(self) -> None:
        """Start the engine process (and load the model in it) for the settings on screen, so that the
        first Run starts at once; again when the model, device, dtype, prefill math or threads change."""
        if self.running:
            return
        try:
            config = self.controls.build_config()
        except InputError:   # nothing runnable yet: the Run that follows says why
            return
        m = config.model
        key = (m.name, m.device, m.dtype, m.prefill_math, config.threads, config.simulate,
               config.endpoint.url if config.endpoint is not None else None)
        if key == self._warmed:
            return
        self._warmed = key
        self.warmEngine.emit(config)

    def launch_config(self, config, what: str = "") -> bool:
        """Run these settings as if Run had been pressed with them (the worked example's runs)."""
        if self.running:
            return False
        self._launch(config, what)
        return True

    # ---- calibrate --fit ----------------------------------------------------------------------

    def start_fit(self, device: str) -> None:
        """The standard runs of the bundled model measured, the cost model fitted to them and stored in
        this machine's profile, in the engine process; the report opens when it ends."""
        if self.running:
            return
        self._set_running(True)
        self._warmed = None   # the fit's runs replace the model the engine held
        self.statusBar().showMessage("Fitting the cost model: measuring the standard runs of the bundled model…")
        self.worker.clear_stop()
        self.startFit.emit(str(calibration_runs_dir()), device, self.controls.threads_spin.value())

    def _on_fitted(self, report) -> None:
        from gui.views.tool_dialogs import FitDialog
        self._set_running(False)
        self.controls.reload_profiles()
        self.controls.select_profile(LOCAL_KEY)
        worst = [fitted.overall(phase) for _, fitted, _ in report.held_out for phase in ("prefill", "decode")]
        worst = [row.mape for row in worst if row is not None]
        error = f"; held-out step-time error up to {max(worst):.1f}%" if worst else ""
        self.statusBar().showMessage(f"Fitted the cost model to {report.num_runs} runs{error}: written to {report.path}")
        self.fit_dialog = FitDialog(report, self)
        self.fit_dialog.show()
        self.fitFinished.emit(report)

    # ---- the worked example --------------------------------------------------------------------

    def open_example(self) -> None:
        from gui.views.tool_dialogs import ExampleDialog
        if self.example_dialog is None:
            self.example_dialog = ExampleDialog(self)
        self.example_dialog.show()
        self.example_dialog.raise_()
