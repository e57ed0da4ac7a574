"""A narrow combo's current text is drawn elided, not cut at the edge (gui/panels/elided_combo.py)."""
from __future__ import annotations

from PySide6 import QtWidgets

from gui.panels.elided_combo import elided, elide_label


def test_a_long_name_is_elided_to_the_width_and_a_short_one_kept(qtbot):
    combo = elide_label(QtWidgets.QComboBox())
    qtbot.addWidget(combo)
    combo.addItem("smollm2-135m (bundled, 135M)")
    short = elided(combo, combo.currentText(), 60)
    assert short.endswith("…") and combo.fontMetrics().horizontalAdvance(short) <= 60
    assert elided(combo, "auto", 200) == "auto"


def test_the_controls_draw_their_combos_through_it(window):
    from gui.panels.elided_combo import _FILTER
    combo = window.controls.model_combo
    combo.resize(120, combo.height())
    elided_image = combo.grab().toImage()
    combo.removeEventFilter(_FILTER)
    clipped_image = combo.grab().toImage()   # Qt's own label: the name cut at the edge
    combo.installEventFilter(_FILTER)
    assert elided_image != clipped_image
    assert combo.currentText().startswith("smollm2")   # the item itself keeps its whole name
