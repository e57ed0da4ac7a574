"""Labels inside a plot that cannot collide: each takes the first of its candidate places that lies
in the plot and clears every label placed before it.

A label pinned to a fixed spot in data coordinates (the crossover's at the foot of its line, a roof's
at the left end of its curve) collides with another whenever the plot is short or the curves come
close: a real run's crossover label lay over the bf16 roof's. Placing is done in pixels, where the
collision is, again whenever the range or the size changes.
"""
from __future__ import annotations

import pyqtgraph as pg
from PySide6 import QtCore

Anchor = tuple[float, float]
GAP = 2.0   # px kept clear around each label


def label_rect(vb: pg.ViewBox, label: pg.TextItem, pos: QtCore.QPointF, anchor: Anchor) -> QtCore.QRectF:
    """The label's rectangle in scene pixels if it stood at `pos` (view coordinates) with `anchor`."""
    at = vb.mapViewToScene(pos)
    size = label.textItem.boundingRect()   # the text ignores the view's scale: its size is in pixels
    return QtCore.QRectF(at.x() - anchor[0] * size.width(), at.y() - anchor[1] * size.height(),
                         size.width(), size.height())


def place_labels(vb: pg.ViewBox, entries: list[tuple[pg.TextItem, list[tuple[QtCore.QPointF, Anchor]]]]) -> None:
    """`entries`: (label, its candidate places) in order of importance. Each label goes to its first
    candidate inside the plot that overlaps no label placed before it; failing that, the first that
    overlaps none (partly outside, clipped); failing that it is hidden, unless the plot is not laid out
    yet (then its first place, until the next placing)."""
    area = vb.sceneBoundingRect()
    laid_out = area.height() > 1 and area.width() > 1
    placed: list[QtCore.QRectF] = []
    for label, candidates in entries:
        if not candidates:
            label.hide()
            continue
        rects = [label_rect(vb, label, pos, anchor).adjusted(-GAP, -GAP, GAP, GAP) for pos, anchor in candidates]
        clear = [i for i, r in enumerate(rects) if not any(r.intersects(p) for p in placed)]
        inside = [i for i in clear if area.contains(rects[i])]
        choice = inside[0] if inside else clear[0] if clear else None if laid_out else 0
        if choice is None:
            label.hide()
            continue
        pos, anchor = candidates[choice]
        label.setAnchor(anchor)
        label.setPos(pos)
        label.show()
        placed.append(rects[choice])
