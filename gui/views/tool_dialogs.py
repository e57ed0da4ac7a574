"""Two tables the command line prints, as the window's dialogs: the cost model's fit (`calibrate
--fit`: its terms and the step-time error on each run left out of it) and the seed's worked example
(`example`: the seed's row, llama-8b simulated on a datacenter profile, the bundled model measured here)."""
from __future__ import annotations

from PySide6 import QtCore, QtWidgets


def fill_table(table: QtWidgets.QTableWidget, rows: list[tuple]) -> None:
    """rows[0] is the header; every cell read-only text."""
    table.clear()
    table.setColumnCount(len(rows[0]))
    table.setRowCount(len(rows) - 1)
    table.setHorizontalHeaderLabels([str(c) for c in rows[0]])
    for r, row in enumerate(rows[1:]):
        for c, value in enumerate(row):
            item = QtWidgets.QTableWidgetItem(str(value))
            item.setFlags(item.flags() & ~QtCore.Qt.ItemFlag.ItemIsEditable)
            table.setItem(r, c, item)
    table.resizeColumnsToContents()
    table.verticalHeader().setVisible(False)


def _label(text: str) -> QtWidgets.QLabel:
    label = QtWidgets.QLabel(text)
    label.setWordWrap(True)
    label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


class FitDialog(QtWidgets.QDialog):
    """A fit's report: where it was written, its terms, and per held-out run the error table."""

    def __init__(self, report, parent=None):
        from backend.results.text import error_rows, terms_text
        super().__init__(parent)
        self.setObjectName("fitDialog")
        self.setWindowTitle("Cost model fitted to this machine")
        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(_label(f"Fitted on {report.num_runs} measured run(s), priced on {report.profile_text}:\n"
                                f"{terms_text(report)}.\nWritten to {report.path}: simulations on "
                                f"{report.profile_key} now price steps with these terms."))
        self.tables: list[QtWidgets.QTableWidget] = []
        if not report.held_out:
            layout.addWidget(_label("No held-out error: the fit needs two or more runs to leave each out in turn."))
        for name, rows in error_rows(report):
            layout.addWidget(_label(f"<b>Step-time error on {name}</b> (the placeholder terms' error beside it)"))
            table = QtWidgets.QTableWidget()
            fill_table(table, rows)
            table.setMinimumHeight(min(220, 30 + 26 * (len(rows) - 1)))
            layout.addWidget(table)
            self.tables.append(table)
        buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        layout.addWidget(buttons)
        self.resize(720, 640)


class ExampleDialog(QtWidgets.QDialog):
    """The worked example: Run runs llama-8b simulated on the profile, then (when ticked) the bundled
    model here, each through the window's own run so the views show it; the table fills as each ends."""

    def __init__(self, window, parent=None):
        from backend.results.example import OUTPUT_LEN, PROMPT_LEN, SEED_ROW
        from backend.roofline.profiles import list_profiles
        super().__init__(parent or window)
        self.setObjectName("exampleDialog")
        self.setWindowTitle("The seed's worked example")
        self.window_ = window
        self.rows = [SEED_ROW]
        self.pending: list[tuple[str, object]] = []   # (row label, RunConfig) still to run
        layout = QtWidgets.QVBoxLayout(self)
        layout.addWidget(_label(f"One request, a {PROMPT_LEN:,}-token prompt and {OUTPUT_LEN} output tokens: "
                                f"total = TTFT + {OUTPUT_LEN - 1} decode steps × TPOT. The seed worked it by hand "
                                "for an 8B model on a datacenter GPU; here it is simulated on a profile, and "
                                "measured on this machine with the bundled model (`example` headless)."))
        form = QtWidgets.QFormLayout()
        self.profile_combo = QtWidgets.QComboBox()
        self.profile_combo.setObjectName("exampleProfileCombo")
        for p in list_profiles():
            self.profile_combo.addItem(p.name, p.key)
        index = self.profile_combo.findData("h100-sxm")
        self.profile_combo.setCurrentIndex(max(index, 0))
        self.measure_check = QtWidgets.QCheckBox("also measure the bundled model here (about a minute on a CPU)")
        self.measure_check.setChecked(True)
        form.addRow("Simulate llama-8b on", self.profile_combo)
        form.addRow(self.measure_check)
        layout.addLayout(form)
        self.table = QtWidgets.QTableWidget()
        self.table.setObjectName("exampleTable")
        layout.addWidget(self.table)
        self.status = _label("")
        layout.addWidget(self.status)
        buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.StandardButton.Close)
        self.run_button = buttons.addButton("Run", QtWidgets.QDialogButtonBox.ButtonRole.ActionRole)
        self.run_button.setObjectName("exampleRunButton")
        self.run_button.clicked.connect(self.start)
        buttons.rejected.connect(self.close)
        layout.addWidget(buttons)
        window.runFinished.connect(self._run_ended)
        window.runFailed.connect(self._run_failed)
        self._show()
        self.resize(760, 300)

    def _show(self) -> None:
        from backend.results.example import format_rows
        fill_table(self.table, format_rows(self.rows))

    def start(self) -> None:
        from backend.results.example import SEED_ROW, example_config
        if self.window_.running:
            self.status.setText("a run is under way: Run again once it ends")
            return
        profile = self.profile_combo.currentData()
        threads = self.window_.controls.threads_spin.value()
        self.rows = [SEED_ROW]
        self.pending = [(f"llama-8b on {profile}, simulated", example_config("llama-8b", True, profile, None))]
        if self.measure_check.isChecked():
            self.pending.append(("smollm2-135m on {device}, measured",
                                 example_config("smollm2-135m", False, None, threads)))
        self._show()
        self._next()

    def _next(self) -> None:
        if not self.pending:
            self.status.setText("done")
            self.run_button.setEnabled(True)
            return
        label, config = self.pending[0]
        self.run_button.setEnabled(False)
        self.status.setText(f"running: {label.format(device='this machine')}…")
        self.window_.runs.launch(config, "the worked example")

    def _run_ended(self, finished) -> None:
        from backend.results.example import row_of
        if not self.pending:
            return   # a run of the window's own, not the example's
        label, _ = self.pending.pop(0)
        if finished.error or finished.stopped or finished.data is None:
            self.pending = []
            self.status.setText(f"stopped: {finished.error or 'by the user'}")
            self.run_button.setEnabled(True)
            return
        self.rows.append(row_of(label.format(device=finished.data.info.device_name or "this machine"), finished))
        self._show()
        self._next()

    def _run_failed(self, message: str) -> None:
        if self.pending:
            self.pending = []
            self.status.setText(f"failed: {message}")
            self.run_button.setEnabled(True)
