"""The throughput plot's labels (the crossover's, the roofs') never overlap, at any size of the plot."""
import pytest

from PySide6 import QtWidgets

from backend.models.shapes import SHAPES
from backend.roofline.profiles import find_profile
from backend.run_info import RunInfo
from gui.state.run_store import RunStore
from gui.views.throughput import ThroughputView


def shown_labels(view):
    return [label for label in [view.crossover_label, *view.roof_labels] if label.isVisible()]


@pytest.mark.parametrize("dtype", ["q4_1", "float32"])   # crossovers near batch 28 and 179
@pytest.mark.parametrize("size", [(900, 700), (640, 360), (420, 360), (300, 200)])
def test_crossover_and_roof_labels_never_overlap(qtbot, size, dtype):
    store = RunStore()
    store.info = RunInfo.from_json({})   # float32 products: both of a CPU's roofs drawn (bf16 unused), labelled
    view = ThroughputView(store)
    qtbot.addWidget(view)
    # the default run's model and context, on the generic CPU profile: the first run's plot
    view.set_inputs(shape=SHAPES["smollm2-135m"], run_dtype=dtype, profile=find_profile("cpu"), context=160)
    view.resize(*size)
    view.show()
    view.refresh()
    QtWidgets.QApplication.processEvents()
    assert view.crossover_line.isVisible()
    labels = shown_labels(view)
    if size[1] >= 360:   # the plot at its minimum height or taller: every label finds room
        assert len(labels) == 3
    rects = [label.sceneBoundingRect() for label in labels]
    for i, a in enumerate(rects):
        for b in rects[i + 1:]:
            assert not a.intersects(b), (size, [l.textItem.toPlainText() for l in labels])
