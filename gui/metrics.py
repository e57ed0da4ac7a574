"""The live metrics panel: latency, throughput, load, and where the time goes in the two phases."""
from __future__ import annotations

from html import escape

from PySide6 import QtCore, QtWidgets

from backend.cli.report import breakdown_text

from .live_metrics import LiveMetrics, compute
from .run_store import RunStore

ROWS = (
    ("ttft", "TTFT (mean / p99)"),
    ("tpot", "TPOT (mean / p99)"),
    ("throughput", "Output tokens/s (run)"),
    ("decode_rate", "Decode tokens/s (last 1 s)"),
    ("load", "Requests running / waiting"),
    ("done", "Requests finished / seen"),
    ("kv", "KV cache in use"),
)


def _ms(value: float | None, decimals: int = 1) -> str:
    return "—" if value is None else f"{value:.{decimals}f} ms"


def format_rows(m: LiveMetrics) -> dict[str, str]:
    rate = "—" if m.output_tokens_per_s is None else f"{m.output_tokens_per_s:,.1f}"
    decode_rate = "—" if m.decode_tokens_per_s is None else f"{m.decode_tokens_per_s:,.1f}"
    def count(n):
        return "—" if n is None else f"{n}"
    load = "—"
    if m.num_running is not None or m.num_waiting is not None:
        load = f"{count(m.num_running)} / {count(m.num_waiting)}"
    kv = "—"
    if m.kv_tokens is not None and m.kv_capacity:
        kv = f"{m.kv_tokens:,} / {m.kv_capacity:,} tokens ({100.0 * m.kv_tokens / m.kv_capacity:.0f}%)"
    if m.load_source != "engine":   # a remote server: its own gauges where it serves them
        if m.load_source == "server":
            load += " (server)"
        else:
            load = f"{m.num_running} in flight / — (client's view)"
        kv = "— (not published by the server)" if m.kv_usage is None else f"{100.0 * m.kv_usage:.0f}% (server)"
    return {
        "ttft": f"{_ms(m.ttft_mean_ms)} / {_ms(m.ttft_p99_ms)}",
        "tpot": f"{_ms(m.tpot_mean_ms, 2)} / {_ms(m.tpot_p99_ms, 2)}",
        "throughput": rate,
        "decode_rate": decode_rate,
        "load": load,
        "done": f"{m.num_finished} / {m.num_requests}",
        "kv": kv,
    }


def worked_example(m: LiveMetrics) -> str:
    """Where the time goes, with this run's numbers (HTML): the latency broken down, each phase's roofline."""
    lines = []
    if m.example_total_ms is None:
        lines.append("<i>The breakdown appears once a request has two output tokens: its latency is its TTFT "
                     "plus its decode steps × TPOT.</i>")
    else:
        fewest, most = m.example_decode_steps
        requests = f"{m.example_requests} request{'s' if m.example_requests != 1 else ''}"
        lines += [f"<b>Where the time goes</b> (means over {requests} so far)",
                  escape(breakdown_text(m.example_ttft_ms, m.example_decode_ms, m.example_total_ms, fewest, most,
                                        m.example_tpot_ms, times="×"))]
        if m.cost_ratio is not None:
            lines.append(f"per-token cost: decode {m.decode_ms_per_token:.3f} ms vs prefill "
                         f"{m.prefill_ms_per_token:.3f} ms → a decode token costs <b>{m.cost_ratio:.1f}×</b> "
                         f"a prompt token (decode reads every weight for few tokens)")
    for label, text in m.roofline:
        text = escape(text, quote=False)
        for word in ("compute-bound", "memory-bound"):
            text = text.replace(word, f"<b>{word}</b>")
        lines.append(f"<br><b>Roofline</b> — {text}" if label == "roofline" else f"{label}: {text}")
    return "<br>".join(lines)


class MetricsPanel(QtWidgets.QWidget):
    def __init__(self, store: RunStore, parent=None):
        super().__init__(parent)
        self.setObjectName("metricsPanel")
        self.store = store
        self._seen = -1
        self.metrics = LiveMetrics()
        layout = QtWidgets.QVBoxLayout(self)
        form = QtWidgets.QFormLayout()
        form.setLabelAlignment(QtCore.Qt.AlignmentFlag.AlignRight)
        self.values: dict[str, QtWidgets.QLabel] = {}
        for key, title in ROWS:
            label = QtWidgets.QLabel("—")
            label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
            self.values[key] = label
            form.addRow(title, label)
        layout.addLayout(form)
        self.example = QtWidgets.QLabel(worked_example(self.metrics))
        self.example.setWordWrap(True)
        self.example.setTextFormat(QtCore.Qt.TextFormat.RichText)
        self.example.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.example.setFrameShape(QtWidgets.QFrame.Shape.StyledPanel)
        self.example.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.example)
        layout.addStretch(1)

    def refresh(self) -> None:
        if self.store.version == self._seen:
            return
        self._seen = self.store.version
        self.metrics = compute(self.store)
        for key, text in format_rows(self.metrics).items():
            self.values[key].setText(text)
        self.example.setText(worked_example(self.metrics))
