"""A combo box's current text elided ("smollm2-135m (bundled, 1…") where the box is narrower than it.

Qt's styles clip a combo's label at its edge instead ("smollm2-135m (bundled, 135", seen at 200%
scaling): the reader cannot tell a cut name from a whole one. The combos of the narrow controls
dock are drawn here with the label elided; the list that drops down shows each name whole.
An event filter rather than a subclass, so the controls keep their plain QComboBoxes.
"""
from __future__ import annotations

from PySide6 import QtCore, QtWidgets


class _ElideLabel(QtCore.QObject):
    def eventFilter(self, combo, event) -> bool:
        if event.type() != QtCore.QEvent.Type.Paint or not isinstance(combo, QtWidgets.QComboBox) \
                or combo.isEditable():
            return False
        painter = QtWidgets.QStylePainter(combo)
        option = QtWidgets.QStyleOptionComboBox()
        combo.initStyleOption(option)
        painter.drawComplexControl(QtWidgets.QStyle.ComplexControl.CC_ComboBox, option)
        field = combo.style().subControlRect(QtWidgets.QStyle.ComplexControl.CC_ComboBox, option,
                                             QtWidgets.QStyle.SubControl.SC_ComboBoxEditField, combo)
        icon = option.iconSize.width() + 4 if not option.currentIcon.isNull() else 0
        option.currentText = elided(combo, option.currentText, field.width() - icon)
        painter.drawControl(QtWidgets.QStyle.ControlElement.CE_ComboBoxLabel, option)
        painter.end()
        return True


_FILTER = _ElideLabel()


def elided(combo: QtWidgets.QComboBox, text: str, width: int) -> str:
    return combo.fontMetrics().elidedText(text, QtCore.Qt.TextElideMode.ElideRight, max(width, 0))


def elide_label(combo: QtWidgets.QComboBox) -> QtWidgets.QComboBox:
    """Draw `combo`'s current text elided to its width."""
    combo.installEventFilter(_FILTER)
    return combo
