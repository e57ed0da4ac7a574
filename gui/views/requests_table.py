"""The requests table: a model over the store's lane columns, sortable through a proxy."""
from __future__ import annotations

import numpy as np
from PySide6 import QtCore, QtWidgets

from gui.state.run_store import STATUSES, RunStore

# (header, lane column, decimals, width in px); None decimals: an integer
COLUMNS = (
    ("id", "request_id", None, 40),
    ("status", "status", None, 66),
    ("prompt", "prompt_tokens", None, 52),
    ("cached", "cached_tokens", None, 54),
    ("computed", "computed_tokens", None, 64),
    ("output", "output_tokens", None, 52),
    ("arrival ms", "arrival_ms", 1, 72),
    ("queue ms", "queue_ms", 1, 66),
    ("TTFT ms", "ttft_ms", 1, 66),
    ("TPOT ms", "tpot_ms", 2, 62),
    ("end-to-end ms", "e2e_ms", 1, 90),
)
SORT_ROLE = QtCore.Qt.ItemDataRole.UserRole
HEADER_TIPS = {
    "cached": "prompt tokens found in the prefix cache at admission: reused, not computed",
    "computed": "prompt tokens the prefill computed (prompt - cached): what its TTFT paid for",
}


class RequestsModel(QtCore.QAbstractTableModel):
    """Rows are the store's lanes (arrival order); refresh() announces new and changed rows."""

    def __init__(self, store: RunStore, parent=None):
        super().__init__(parent)
        self.store = store
        self._rows = 0
        self._generation = store.generation

    def rowCount(self, parent=QtCore.QModelIndex()) -> int:
        return 0 if parent.isValid() else self._rows

    def columnCount(self, parent=QtCore.QModelIndex()) -> int:
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=QtCore.Qt.ItemDataRole.DisplayRole):
        if orientation != QtCore.Qt.Orientation.Horizontal:
            return None
        if role == QtCore.Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section][0]
        if role == QtCore.Qt.ItemDataRole.ToolTipRole:
            return HEADER_TIPS.get(COLUMNS[section][0])
        return None

    def data(self, index, role=QtCore.Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        _, column, decimals, _ = COLUMNS[index.column()]
        value = float(self.store.lanes.column(column)[index.row()])
        if role == SORT_ROLE:
            return -np.inf if np.isnan(value) else value
        if role == QtCore.Qt.ItemDataRole.TextAlignmentRole:
            return int(QtCore.Qt.AlignmentFlag.AlignRight | QtCore.Qt.AlignmentFlag.AlignVCenter)
        if role != QtCore.Qt.ItemDataRole.DisplayRole:
            return None
        if np.isnan(value):
            return ""
        if column == "status":
            return STATUSES[int(value)].value
        return str(int(value)) if decimals is None else f"{value:.{decimals}f}"

    def request_id(self, row: int) -> int:
        return int(self.store.lanes.column("request_id")[row])

    def refresh(self) -> None:
        """Insert rows the store gained, then report the rows it changed (or reset after a new run)."""
        n = self.store.num_requests
        if self.store.generation != self._generation:
            self.beginResetModel()
            self._rows, self._generation = n, self.store.generation
            self.endResetModel()
            self.store.changed_rows.clear()
            return
        if n > self._rows:
            self.beginInsertRows(QtCore.QModelIndex(), self._rows, n - 1)
            self._rows = n
            self.endInsertRows()
        changed = self.store.changed_rows
        if changed:
            lo, hi = min(changed), max(changed)
            changed.clear()
            self.dataChanged.emit(self.index(lo, 0), self.index(min(hi, n - 1), len(COLUMNS) - 1))


class RequestsTable(QtWidgets.QTableView):
    requestSelected = QtCore.Signal(int)

    def __init__(self, store: RunStore, parent=None):
        super().__init__(parent)
        self.setObjectName("requestsTable")
        self.source = RequestsModel(store, self)
        self.proxy = QtCore.QSortFilterProxyModel(self)
        self.proxy.setSourceModel(self.source)
        self.proxy.setSortRole(SORT_ROLE)
        self.proxy.setDynamicSortFilter(True)
        self.setModel(self.proxy)
        self.setSortingEnabled(True)
        self.sortByColumn(0, QtCore.Qt.SortOrder.AscendingOrder)
        self.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.SingleSelection)
        self.setAlternatingRowColors(True)
        self.verticalHeader().setVisible(False)
        self.verticalHeader().setDefaultSectionSize(20)
        self.horizontalHeader().setStretchLastSection(True)
        # fixed widths: measuring thousands of rows on every update would stall the repaint timer
        for i, (*_, width) in enumerate(COLUMNS):
            self.horizontalHeader().resizeSection(i, width)
        self._syncing = False
        self.selectionModel().currentRowChanged.connect(self._current_changed)

    def refresh(self) -> None:
        self.source.refresh()

    def _current_changed(self, current, _previous) -> None:
        if current.isValid() and not self._syncing:
            self.requestSelected.emit(self.source.request_id(self.proxy.mapToSource(current).row()))

    def select_request(self, request_id: int) -> None:
        """Select a request's row (from a click on its lane) without re-announcing it."""
        row = self.source.store.rows.get(request_id)
        if row is None:
            return
        index = self.proxy.mapFromSource(self.source.index(row, 0))
        if index.row() == self.currentIndex().row():
            return
        self._syncing = True
        self.setCurrentIndex(index)
        self._syncing = False
        self.scrollTo(index)
