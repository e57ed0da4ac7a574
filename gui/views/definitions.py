"""The metrics panel's definitions: which definition each headline figure uses, and every other tool's
definition of TTFT, ITL and TPOT on the same run, on request (a "Definitions" toggle).

The words and numbers come from backend.results.definitions (the same rows `load --definitions` prints);
this file only lays them out. The table needs the finished run's summary: while a run goes, it says so.
"""
from __future__ import annotations

import math
from html import escape

from PySide6 import QtCore, QtWidgets

from backend.results.definitions import DEFINITIONS, HEADLINE, definition_rows, differences

_BY_NAME = {d.name: d for d in DEFINITIONS}
# the headline rows of the metrics panel, titled by the definition each one uses
# (short: the live metrics dock is narrow on a 1,366-pixel screen; the tooltip gives the whole definition)
TTFT_TITLE = "TTFT, first token (mean/p99)"
TPOT_TITLE = "TPOT, request mean (mean/p99)"
PENDING = "Every definition is computed from the run's records when the run ends."


def headline_tip(key: str) -> str:
    """A headline row's tooltip: its definition's formula and who else reports that figure."""
    d = _BY_NAME[HEADLINE[key]]
    return f"{d.label}: {d.formula}. Also reported as such by: {d.used_by}. Definitions (below) shows the others."


def chunks_text(s) -> str:
    """How the streams arrived: multi-token chunks and first chunks without text (empty for a run without them)."""
    chunks, multi = getattr(s, "num_chunks", None), getattr(s, "num_multi_token_chunks", None)
    role, empty = getattr(s, "num_first_chunk_role", None) or 0, getattr(s, "num_first_chunk_empty", None) or 0
    if not chunks:
        return ""
    return (f"{multi or 0:,} of {chunks:,} chunks carried several tokens; {role + empty:,} requests' first chunk "
            f"carried no text ({role:,} role-only, {empty:,} empty).")


def _is_request_summary(s) -> bool:
    value = getattr(s, "ttft_p50_ms", None)
    return value is not None and not (isinstance(value, float) and math.isnan(value))


class DefinitionsBox(QtWidgets.QWidget):
    """A toggle, and under it (when on) the table of every definition with the run's figures."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("definitionsBox")
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.toggle = QtWidgets.QToolButton()
        self.toggle.setObjectName("definitionsToggle")
        self.toggle.setText("Definitions other tools use")
        self.toggle.setToolButtonStyle(QtCore.Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(QtCore.Qt.ArrowType.RightArrow)
        self.toggle.setCheckable(True)
        self.toggle.setAutoRaise(True)
        self.toggle.setToolTip("Serving benchmarks give different figures the same names: this run's latencies "
                               "under each definition, which one this window's figures use, and which tools use "
                               "the others (docs/metrics.md)")
        self.toggle.toggled.connect(self._on_toggled)
        layout.addWidget(self.toggle)
        self.body = QtWidgets.QWidget()
        body = QtWidgets.QVBoxLayout(self.body)
        body.setContentsMargins(12, 0, 0, 0)
        self.table = QtWidgets.QTableWidget(0, 0)
        self.table.setObjectName("definitionsTable")
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.setWordWrap(False)
        body.addWidget(self.table)
        self.note = QtWidgets.QLabel(PENDING)
        self.note.setObjectName("definitionsNote")
        self.note.setWordWrap(True)
        self.note.setTextFormat(QtCore.Qt.TextFormat.RichText)
        self.note.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        body.addWidget(self.note)
        self.body.hide()
        layout.addWidget(self.body)
        self.summary = None
        self.show_summary(None)

    def _on_toggled(self, on: bool) -> None:
        self.toggle.setArrowType(QtCore.Qt.ArrowType.DownArrow if on else QtCore.Qt.ArrowType.RightArrow)
        self.body.setVisible(on)

    def show_summary(self, summary) -> None:
        """The finished run's figures under every definition (None, or a run with no requests: the note only)."""
        self.summary = summary if summary is not None and _is_request_summary(summary) else None
        if self.summary is None:
            self.table.setRowCount(0)
            self.table.setColumnCount(0)
            self.table.hide()
            self.note.setText(PENDING)
            return
        header, *rows = definition_rows(self.summary)
        header = header[:-1]   # "used by" goes in each row's tooltip, with the formula: a dock is narrow
        self.table.setColumnCount(len(header))
        self.table.setRowCount(len(rows))
        self.table.setHorizontalHeaderLabels(list(header))
        right = QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter
        for r, (row, d) in enumerate(zip(rows, DEFINITIONS)):
            tip = f"{d.label}: {d.formula}. Reported as such by: {d.used_by}."
            for c, text in enumerate(row[:-1]):
                item = QtWidgets.QTableWidgetItem(text)
                item.setToolTip(tip)
                if c:
                    item.setTextAlignment(right)
                if "[headline]" in row[0]:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                self.table.setItem(r, c, item)
        self.table.resizeColumnsToContents()
        self.table.resizeRowsToContents()
        self.table.setFixedHeight(self.table.horizontalHeader().sizeHint().height() + self.table.verticalHeader().length()
                                  + 2 * self.table.frameWidth() + self.table.horizontalScrollBar().sizeHint().height())
        self.table.show()
        lines = ["<b>[headline]</b>: the definition this window's TTFT, ITL and TPOT use."]
        if chunks := chunks_text(self.summary):
            lines.append(escape(chunks, quote=False))
        flagged = differences(self.summary)
        lines += [f'<span style="color:#c0392b">{escape(line, quote=False)}</span>' for line in flagged]
        if not flagged:
            lines.append("No other definition moves a headline p50 by more than 5% on this run.")
        self.note.setText("<br>".join(lines))

    def cell(self, row_label: str, column: str) -> str:
        """A cell's text by its row's label (without the headline mark) and its column's title (tests read it)."""
        columns = [self.table.horizontalHeaderItem(c).text() for c in range(self.table.columnCount())]
        for r in range(self.table.rowCount()):
            if self.table.item(r, 0).text().replace(" [headline]", "") == row_label:
                return self.table.item(r, columns.index(column)).text()
        raise KeyError(row_label)

    def tip(self, row_label: str) -> str:
        for r in range(self.table.rowCount()):
            if self.table.item(r, 0).text().replace(" [headline]", "") == row_label:
                return self.table.item(r, 0).toolTip()
        raise KeyError(row_label)
