"""The live metrics panel: latency, throughput, load, and where the time goes in the two phases."""
from __future__ import annotations

from html import escape

from PySide6 import QtCore, QtGui, QtWidgets

from backend.results.band_text import panel_parts
from backend.results.text import breakdown_text

from gui.state.live_metrics import LiveMetrics, compute
from gui.views.definitions import TPOT_TITLE, TTFT_TITLE, DefinitionsBox, headline_tip
from gui.state.references import COMPARED, compared_figures, delta_percent
from gui.state.run_store import RunStore

BETTER_COLOR = "#1e8449"
WORSE_COLOR = "#c0392b"

ROWS = (   # TTFT and TPOT titled by the definition each uses (gui/views/definitions.py shows the others)
    ("ttft", TTFT_TITLE),
    ("tpot", TPOT_TITLE),
    ("throughput", "Output tokens/s (run)"),
    ("decode_rate", "Decode tokens/s (last 1 s)"),
    ("load", "Requests running / waiting"),
    ("done", "Requests finished / seen"),
    ("kv", "KV cache in use"),
    ("weights", "Weights read / decode step"),
    ("units", "Prefill / decode ran on"),
)


PRODUCTS_TIP = ("The unit each phase's matrix products ran on, known once the run finishes: "
                "bfloat16 on AVX512-BF16 or AMX for products of many rows with Prefill math bf16 or auto, "
                "else float32")

# a run of several repeats: these figures' mean ± the 95% interval's half width (RunFinished.repeats)
REPEATED = (("ttft_mean_ms", "TTFT mean", " ms", 1), ("tpot_mean_ms", "TPOT mean", " ms", 2),
            ("output_tokens_per_s", "output tokens/s", "", 1))


def repeats_parts(summary) -> list[str]:
    """"TTFT mean 12.3 ± 0.4 ms", ... for the figures the repeats measured (± — for one repeat)."""
    parts = []
    for key, title, unit, decimals in REPEATED:
        iv = summary.metrics.get(key)
        if iv is None or iv.n == 0 or iv.mean != iv.mean:
            continue
        half = "—" if iv.half_width != iv.half_width else f"{iv.half_width:,.{decimals}f}"
        parts.append(f"{title} {iv.mean:,.{decimals}f} ± {half}{unit}")
    return parts


def repeats_text(summary) -> str:
    """One line for the status bar: how many repeats counted, and the main figures over them."""
    head = f"{summary.num_done} of {summary.requested} repeats"
    note = f" ({summary.note})" if summary.note else ""
    return f"{head}: " + ", ".join(repeats_parts(summary)) + f" (mean ± 95% CI){note}"


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
        "weights": weights_text(m),
        "units": m.units or "—",
    }


def weights_text(m: LiveMetrics) -> str:
    """The last second's decode steps' weight reads; an MoE's with the experts they touched."""
    if m.weights_per_step is None:
        return "—"
    text = f"{m.weights_per_step / 1e6:,.1f} MB"
    if m.experts_per_layer is not None:
        text += f" ({m.experts_per_layer:.1f} of {m.num_experts} experts per layer)"
    return text


def figure_text(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}" if value < 10 else f"{value:.1f}"


def delta_html(current: float | None, reference: float | None, lower_is_better: bool) -> str:
    """The reference's figure, and in brackets the current run against it (green: better, red: worse)."""
    delta = delta_percent(current, reference)
    if delta is None:
        return figure_text(reference)
    better = (delta < 0) == lower_is_better
    color = "#666" if abs(delta) < 1 else BETTER_COLOR if better else WORSE_COLOR
    return f'{figure_text(reference)} <span style="color:{color}">({delta:+.0f}%)</span>'


def worked_example(m: LiveMetrics) -> str:
    """Where the time goes, with this run's numbers (HTML): the latency broken down, each phase's roofline."""
    lines = []
    if m.simulated_on:
        lines.append(f'<span style="color:#c0392b"><b>SIMULATED</b> on {escape(m.simulated_on)}: every time here is '
                     f"the cost model's price of a step, none was measured</span>")
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
    if m.ttft_split is not None:
        lines.append(ttft_split_html(m))
    for label, text in m.roofline:
        text = escape(text, quote=False)
        for word in ("compute-bound", "memory-bound"):
            text = text.replace(word, f"<b>{word}</b>")
        lines.append(f"<br><b>Roofline</b> — {text}" if label == "roofline" else f"{label}: {text}")
    return "<br>".join(lines)


def ttft_split_html(m: LiveMetrics) -> str:
    """A disaggregated run's TTFT: queue + prefill + KV transfer + first decode step (means)."""
    s = m.ttft_split
    total = sum(s.values())
    n = m.handed_off
    return (f"<br><b>TTFT, disaggregated</b> (means over {n} request{'s' if n != 1 else ''} handed off): "
            f"queue {s['queue']:,.1f} + prefill {s['prefill']:,.1f} + <b>KV transfer {s['kv_transfer']:,.1f}</b> "
            f"({(m.kv_bytes_mean or 0) / 1e6:,.2f} MB) + first decode step {s['first_decode']:,.1f} "
            f"= {total:,.1f} ms")


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
        # a value wider than the column left beside its name goes under it: a narrow dock never cuts it
        form.setRowWrapPolicy(QtWidgets.QFormLayout.RowWrapPolicy.WrapLongRows)
        self.values: dict[str, QtWidgets.QLabel] = {}
        for key, title in ROWS:
            label = QtWidgets.QLabel("—")
            label.setWordWrap(True)   # "5,280 / 5,312 tokens (99%)" wraps in a narrow column rather than being cut
            label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
            self.values[key] = label
            form.addRow(title, label)
            if key in ("ttft", "tpot"):
                form.labelForField(label).setToolTip(headline_tip(key))
                label.setToolTip(headline_tip(key))
        layout.addLayout(form)
        self.definitions = DefinitionsBox()   # every tool's definition, on request, once the run has ended
        layout.addWidget(self.definitions)
        self.repeats_label = QtWidgets.QLabel()   # a run of several repeats: the figures over them
        self.repeats_label.setObjectName("repeatsLabel")
        self.repeats_label.setWordWrap(True)
        self.repeats_label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.repeats_label.hide()
        layout.addWidget(self.repeats_label)
        self.band_label = QtWidgets.QLabel()   # a simulated run: each figure's band (backend.sim.bands)
        self.band_label.setObjectName("bandLabel")
        self.band_label.setWordWrap(True)
        self.band_label.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.band_label.setToolTip("where a real deployment's figure lies, by the simulator's cross-validated errors "
                                   "on published figures of the same regimes (docs/simulator-accuracy.md)")
        self.band_label.hide()
        layout.addWidget(self.band_label)
        # against the references: this run's figures, then a column per shown reference
        self.references = None
        self.compare_box = QtWidgets.QGroupBox("Against references (in brackets: this run vs the reference)")
        self.compare_box.setObjectName("compareBox")
        self.compare_grid = QtWidgets.QGridLayout(self.compare_box)
        self.compare_grid.setHorizontalSpacing(10)
        self.compare_grid.setVerticalSpacing(2)
        self.compare_box.hide()
        self.compare_cells: dict[tuple[int | None, str], QtWidgets.QLabel] = {}   # (reference key, figure key)
        self.compare_columns: list[int] = []   # the shown references' keys, in column order
        layout.addWidget(self.compare_box)
        self.example = QtWidgets.QLabel(worked_example(self.metrics))
        self.example.setWordWrap(True)
        self.example.setTextFormat(QtCore.Qt.TextFormat.RichText)
        self.example.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.example.setFrameShape(QtWidgets.QFrame.Shape.StyledPanel)
        self.example.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.example)
        layout.addStretch(1)

    def set_references(self, references) -> None:
        self.references = references
        self._seen = -1

    def refresh(self) -> None:
        key = (self.store.version, self.references.version if self.references is not None else None)
        if key == self._seen:
            return
        self._seen = key
        self.metrics = compute(self.store)
        for name, text in format_rows(self.metrics).items():
            self.values[name].setText(text)
        self.values["units"].setToolTip(self.metrics.products_note or PRODUCTS_TIP)
        self.example.setText(worked_example(self.metrics))
        finished = self.store.finished
        self.definitions.show_summary(finished.summary if finished is not None else None)
        summary = getattr(finished, "repeats", None) if finished is not None else None
        if summary is not None:
            self.repeats_label.setText(f"<b>Over {summary.num_done} of {summary.requested} repeats</b> "
                                       "(mean ± 95% CI):<br>" + "<br>".join(map(escape, repeats_parts(summary))))
        self.repeats_label.setVisible(summary is not None)
        result = finished.summary if finished is not None else None
        parts = panel_parts(result) if result is not None and result.band_level else []
        if parts:
            self.band_label.setText(f"<b>Simulated: {result.band_level:.0%} band</b> (low–high):<br>"
                                    + "<br>".join(map(escape, parts)))
        self.band_label.setVisible(bool(parts))
        self._refresh_comparison()

    def _refresh_comparison(self) -> None:
        shown = self.references.visible() if self.references is not None else []
        self.compare_box.setVisible(bool(shown))
        if not shown:
            return
        if [r.key for r in shown] != self.compare_columns:
            self._build_comparison(shown)
        current = compared_figures(self.store)
        for key, _title, _lower in COMPARED:
            self.compare_cells[(None, key)].setText(figure_text(current[key]))
        for ref in shown:
            for key, _title, lower in COMPARED:
                self.compare_cells[(ref.key, key)].setText(delta_html(current[key], ref.figures[key], lower))

    def _build_comparison(self, shown) -> None:
        """The grid's cells for these references (rebuilt only when the shown references change)."""
        grid = self.compare_grid
        while grid.count():
            widget = grid.takeAt(0).widget()
            if widget is not None:
                widget.hide()   # at once: deleteLater waits for the event loop
                widget.deleteLater()
        self.compare_cells = {}
        right = QtCore.Qt.AlignmentFlag.AlignRight
        grid.addWidget(QtWidgets.QLabel("<b>this run</b>"), 0, 1, alignment=right)
        for column, ref in enumerate(shown, start=2):
            label = QtWidgets.QLabel(f'<b><span style="color:{ref.color}">&#9632;</span> {escape(ref.name)}</b>')
            label.setToolTip(ref.label)
            grid.addWidget(label, 0, column, alignment=right)
        for row, (key, title, _lower) in enumerate(COMPARED, start=1):
            grid.addWidget(QtWidgets.QLabel(title), row, 0)
            for column, ref_key in enumerate([None] + [r.key for r in shown], start=1):
                cell = QtWidgets.QLabel("—")
                cell.setTextFormat(QtCore.Qt.TextFormat.RichText)
                cell.setAlignment(QtCore.Qt.AlignmentFlag.AlignRight)
                grid.addWidget(cell, row, column)
                self.compare_cells[(ref_key, key)] = cell
        self.compare_columns = [r.key for r in shown]

    def comparison_text(self, reference_key: int | None, figure: str) -> str:
        """A cell's words without markup (tests read them)."""
        return QtGui.QTextDocumentFragment.fromHtml(self.compare_cells[(reference_key, figure)].text()).toPlainText()
