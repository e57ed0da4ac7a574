"""The live metrics panel: latency, throughput, load and the worked example of the two phases."""
from __future__ import annotations

from PySide6 import QtCore, QtWidgets

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
    """The seed's arithmetic with this run's numbers (HTML)."""
    if m.example_total_ms is None:
        return ("<i>The worked example appears once a request has two output tokens: total latency = "
                "TTFT + (output tokens − 1) × TPOT.</i>")
    n = m.example_output_tokens
    decode_ms = m.example_total_ms - m.example_ttft_ms
    lines = [
        "<b>Where the time goes</b> (means over requests so far)",
        f"total ≈ TTFT + (output tokens − 1) × TPOT<br>"
        f"&nbsp;&nbsp;= {m.example_ttft_ms:.1f} ms + ({n:.0f} − 1) × {m.example_tpot_ms:.2f} ms<br>"
        f"&nbsp;&nbsp;= {m.example_ttft_ms:.1f} ms + {decode_ms:.1f} ms = <b>{m.example_total_ms:.1f} ms</b>"
        f" (measured {m.measured_e2e_ms:.1f} ms)",
        f"decode share of the latency: <b>{100.0 * m.decode_share:.0f}%</b>",
    ]
    if m.cost_ratio is not None:
        lines.append(f"per-token cost: decode {m.decode_ms_per_token:.3f} ms vs prefill "
                     f"{m.prefill_ms_per_token:.3f} ms → a decode token costs <b>{m.cost_ratio:.1f}×</b> "
                     f"a prompt token (decode reads every weight for few tokens)")
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
