"""The workload page's trace and closed-loop rows: a trace file to replay (--trace) at a speed
(--trace-speed), and a closed loop's think time (--think-ms). Methods of RunForm (its load page)."""
from __future__ import annotations

from pathlib import Path

from PySide6 import QtCore, QtWidgets

from gui.panels.fields import ValidatedField, open_file

TRACE_KEYS = ("trace", "trace_speed", "think_ms")   # WorkloadSpec's --trace, --trace-speed, --think-ms


def trace_file(text: str) -> str:
    path = Path(text.strip()).expanduser()
    if not path.is_file():
        raise ValueError(f"trace: no such file {text.strip()!r}")
    return str(path)


class TraceRows:
    """Mixed into RunForm: uses its `fields["load"]`, `arrival_combo`, `inputRejected` and `_field_changed`."""

    def _trace_widgets(self) -> QtWidgets.QHBoxLayout:
        """The trace field (with its Open button beside it, as the returned row), the speed and think spins."""
        f = self.fields["load"]
        f["trace"] = ValidatedField("", trace_file, allow_empty=True, placeholder="none (the arrivals above)",
                                    tooltip="--trace: replay a trace's arrival times with its prompt and output "
                                            "lengths (CSV or JSONL: the Azure LLM inference trace's columns, "
                                            "Mooncake's JSONL, or a run's requests.csv) instead of the arrivals "
                                            "and lengths above")
        self.open_trace_button = QtWidgets.QToolButton()
        self.open_trace_button.setObjectName("openTraceButton")
        self.open_trace_button.setText("…")
        self.open_trace_button.setToolTip("Open a trace file")
        trace_row = QtWidgets.QHBoxLayout()
        trace_row.setContentsMargins(0, 0, 0, 0)
        trace_row.addWidget(f["trace"], 1)
        trace_row.addWidget(self.open_trace_button, 0, QtCore.Qt.AlignmentFlag.AlignTop)
        self.trace_speed_spin = QtWidgets.QDoubleSpinBox()
        self.trace_speed_spin.setObjectName("traceSpeedSpin")
        self.trace_speed_spin.setRange(0.01, 1000.0)
        self.trace_speed_spin.setDecimals(2)
        self.trace_speed_spin.setSingleStep(0.5)
        self.trace_speed_spin.setValue(1.0)
        self.trace_speed_spin.setSuffix("×")
        self.trace_speed_spin.setToolTip("--trace-speed: the trace's arrivals this many times faster (2: twice the rate)")
        self.think_spin = QtWidgets.QDoubleSpinBox()
        self.think_spin.setObjectName("thinkSpin")
        self.think_spin.setRange(0.0, 3_600_000.0)
        self.think_spin.setDecimals(0)
        self.think_spin.setSingleStep(100.0)
        self.think_spin.setSuffix(" ms")
        self.think_spin.setToolTip("--think-ms: closed loop, each user waits this long after an answer before "
                                   "sending the next request (users start staggered); with Turns above 1, the "
                                   "wait between a conversation's turns")
        self.open_trace_button.clicked.connect(self._open_trace_dialog)
        self.trace_speed_spin.valueChanged.connect(self._field_changed)
        self.think_spin.valueChanged.connect(self._field_changed)
        return trace_row

    def _show_trace_arrival(self, traced: bool) -> None:
        """A trace brings its own arrival times: the Arrival list says so (empty, its placeholder) and
        gets its choice back when the trace is cleared."""
        combo = self.arrival_combo
        combo.setEnabled(not traced)
        combo.blockSignals(True)
        if traced and combo.currentIndex() >= 0:
            self._arrival_before_trace = combo.currentText()
            combo.setCurrentIndex(-1)
        elif not traced and combo.currentIndex() < 0:
            combo.setCurrentText(getattr(self, "_arrival_before_trace", "poisson"))
        combo.blockSignals(False)
        trace = self.fields["load"]["trace"]
        if traced and not trace.edit.hasFocus():
            trace.edit.setCursorPosition(len(trace.text()))   # the file's name, not its folders

    def open_trace(self, path: str) -> None:
        """Replay this trace file: the Trace field set to it, Requests emptied (all its rows)."""
        self.fields["load"]["requests"].setText("")
        self.fields["load"]["trace"].setText(path)

    def _open_trace_dialog(self) -> None:
        open_file(self, "Open a trace", "Trace (*.csv *.jsonl *.json);;All files (*)", self.open_trace,
                  self.inputRejected)

    def _trace_values(self) -> dict:
        """--trace and --trace-speed, or --think-ms of a closed loop or of conversations, as the form has them."""
        trace = self.fields["load"]["trace"].value
        if trace:
            values = {"trace": trace, "trace_speed": self.trace_speed_spin.value()}
        elif self.arrival_combo.currentText() == "closed" or self._turns() > 1:
            values = {"think_ms": self.think_spin.value()}
        else:
            values = {}
        return values
