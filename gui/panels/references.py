"""The References dock: one checkable row per reference (shown or hidden), Add, Remove, and which
reference's steps and lanes are drawn under the current run's."""
from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

from gui.state.references import ReferenceSet

HINT = "File ▸ Add reference run… or drop run folders on the window"


def swatch_icon(color: str, size: int = 12) -> QtGui.QIcon:
    pixmap = QtGui.QPixmap(size, size)
    pixmap.fill(QtGui.QColor(color))
    return QtGui.QIcon(pixmap)


class ReferencePanel(QtWidgets.QWidget):
    addRequested = QtCore.Signal()
    removeRequested = QtCore.Signal(int)           # a reference's key
    visibilityChanged = QtCore.Signal(int, bool)
    alignRequested = QtCore.Signal(object)         # a key, or None for no reference under the strip

    def __init__(self, references: ReferenceSet, parent=None):
        super().__init__(parent)
        self.setObjectName("referencePanel")
        self.references = references
        self._seen = -1
        self.list = QtWidgets.QListWidget()
        self.list.setObjectName("referenceList")
        self.list.itemChanged.connect(self._item_changed)
        self.list.currentRowChanged.connect(lambda *_: self._enable())
        self.add_button = QtWidgets.QPushButton("Add…")
        self.add_button.clicked.connect(self.addRequested)
        self.remove_button = QtWidgets.QPushButton("Remove")
        self.remove_button.clicked.connect(self._remove_current)
        self.align_combo = QtWidgets.QComboBox()
        self.align_combo.setObjectName("alignCombo")
        self.align_combo.setToolTip("a reference's engine steps and request lanes under the current run's, "
                                    "on the same time axis")
        self.align_combo.activated.connect(lambda *_: self.alignRequested.emit(self.align_combo.currentData()))
        self.hint = QtWidgets.QLabel(HINT)
        self.hint.setStyleSheet("color: #666;")
        self.hint.setWordWrap(True)
        buttons = QtWidgets.QHBoxLayout()
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.remove_button)
        buttons.addStretch(1)
        align = QtWidgets.QHBoxLayout()
        align.addWidget(QtWidgets.QLabel("Steps and lanes under the run:"))
        align.addWidget(self.align_combo, 1)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.setSpacing(3)
        layout.addWidget(self.list, 1)
        layout.addLayout(buttons)
        layout.addLayout(align)
        layout.addWidget(self.hint)
        self.refresh()

    def refresh(self) -> None:
        """Rows and the alignment choice after the set changed (cheap when it did not)."""
        if self.references.version == self._seen:
            return
        self._seen = self.references.version
        keys = [r.key for r in self.references]
        if keys == [self.list.item(i).data(QtCore.Qt.ItemDataRole.UserRole) for i in range(self.list.count())]:
            self.list.blockSignals(True)   # the same rows: only their checks and the alignment change
            for ref in self.references:
                self.row_of(ref.key).setCheckState(QtCore.Qt.CheckState.Checked if ref.visible
                                                   else QtCore.Qt.CheckState.Unchecked)
            self.list.blockSignals(False)
            self.align_combo.setCurrentIndex(max(0, self.align_combo.findData(self.references.aligned)))
            return
        current = self.list.currentItem()
        current_key = current.data(QtCore.Qt.ItemDataRole.UserRole) if current is not None else None
        self.list.blockSignals(True)
        self.list.clear()
        for ref in self.references:
            item = QtWidgets.QListWidgetItem(swatch_icon(ref.color), f"{ref.name} — {ref.label}")
            item.setData(QtCore.Qt.ItemDataRole.UserRole, ref.key)
            item.setFlags(item.flags() | QtCore.Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(QtCore.Qt.CheckState.Checked if ref.visible else QtCore.Qt.CheckState.Unchecked)
            item.setToolTip(f"{ref.label}\n{ref.folder}\nchecked: drawn in the views")
            self.list.addItem(item)
            if ref.key == current_key:
                self.list.setCurrentItem(item)
        if self.list.currentItem() is None and self.list.count():
            self.list.setCurrentRow(self.list.count() - 1)
        self.list.blockSignals(False)
        self.align_combo.clear()
        self.align_combo.addItem("none", None)
        for ref in self.references:
            self.align_combo.addItem(swatch_icon(ref.color), ref.name, ref.key)
        self.align_combo.setCurrentIndex(max(0, self.align_combo.findData(self.references.aligned)))
        self.hint.setVisible(len(self.references) == 0)
        self._enable()

    def row_of(self, key: int) -> QtWidgets.QListWidgetItem | None:
        for i in range(self.list.count()):
            if self.list.item(i).data(QtCore.Qt.ItemDataRole.UserRole) == key:
                return self.list.item(i)
        return None

    def _enable(self) -> None:
        self.remove_button.setEnabled(self.list.currentItem() is not None)
        self.align_combo.setEnabled(len(self.references) > 0)

    def _item_changed(self, item: QtWidgets.QListWidgetItem) -> None:
        self.visibilityChanged.emit(item.data(QtCore.Qt.ItemDataRole.UserRole),
                                    item.checkState() == QtCore.Qt.CheckState.Checked)

    def _remove_current(self) -> None:
        item = self.list.currentItem()
        if item is not None:
            self.removeRequested.emit(item.data(QtCore.Qt.ItemDataRole.UserRole))
