"""Reference runs in the window: Add reference run…, drag and drop of run folders, hide, remove,
and one reference's steps and lanes drawn under the current run's."""
from __future__ import annotations

from pathlib import Path

from PySide6 import QtCore, QtGui, QtWidgets

from backend.errors import InputError

from gui.views.lanes import LanesView
from gui.views.plot_style import set_title
from gui.settings import remember_folder, start_folder
from gui.state.references import Reference, ReferenceSet
from gui.views.timeline import TimelineView

AXIS_WIDTH = 64   # as the current run's strip and lanes: equal left axes keep the four plots aligned


def dropped_folders(mime: QtCore.QMimeData) -> list[str]:
    """The run folders a drop names: folders as they are, a file (run.json, steps.csv) by its folder."""
    folders = []
    for url in mime.urls() if mime.hasUrls() else []:
        if not url.isLocalFile():
            continue
        path = Path(url.toLocalFile())
        folder = path if path.is_dir() else path.parent
        if str(folder) not in folders:
            folders.append(str(folder))
    return folders


class ReferencesController(QtCore.QObject):
    """Adds, hides, removes and aligns the runs of `references` (the ReferenceSet the views overlay),
    as `panel` (the References dock) asks; the aligned reference's strip and lanes go into
    `splitter` under `timeline`'s, on its time axis. `changed` asks the window to repaint."""

    changed = QtCore.Signal()
    plotClicked = QtCore.Signal(object)   # an aligned plot clicked: the plot Save plot as PNG saves
    message = QtCore.Signal(str)
    error = QtCore.Signal(str)

    def __init__(self, references: ReferenceSet, panel, timeline: TimelineView, worker_strip, splitter,
                 parent: QtWidgets.QWidget):
        super().__init__(parent)
        self.references = references
        self.panel = panel
        self.timeline = timeline
        self.worker_strip = worker_strip
        self.splitter = splitter
        self.parent_widget = parent
        self.timeline_view: TimelineView | None = None   # the aligned reference's strip and lanes
        self.lanes_view: LanesView | None = None
        panel.addRequested.connect(self.add_dialog)
        panel.removeRequested.connect(self.remove)
        panel.visibilityChanged.connect(self.set_visible)
        panel.alignRequested.connect(self.align)

    # ---- the set -----------------------------------------------------------------------------

    def add(self, folder: str, tag: str = "") -> Reference | None:
        """Read a run folder as a reference; a folder that is not a readable run is refused with one line."""
        try:
            ref = self.references.add(folder, tag)
        except InputError as exc:
            self.error.emit(f"not added as a reference: {exc}")
            return None
        if self.references.aligned is None and self.timeline_view is None and ref.run.steps:
            self.align(ref.key)   # the first reference with steps goes under the strip at once
        self._changed()
        self.message.emit(f"Added reference {ref.name}: {ref.label} ({len(ref.run.requests)} requests, "
                          f"{len(ref.run.steps)} steps{', a sweep' if ref.sweep else ''})")
        return ref

    def remove(self, key: int) -> None:
        ref = self.references.get(key)
        if ref is None:
            return
        self.references.remove(key)
        if self.timeline_view is not None and self.timeline_view.store is ref.store:
            self._drop_aligned_views()
        self._changed()
        self.message.emit(f"Removed reference {ref.name}")

    def set_visible(self, key: int, visible: bool) -> None:
        self.references.set_visible(key, visible)
        self._show_aligned()
        self._changed()

    def align(self, key: int | None) -> None:
        """Draw this reference's steps and lanes under the current run's, on the same time axis (None: none)."""
        self.references.align(key)
        ref = self.references.get(self.references.aligned)
        if self.timeline_view is not None and (ref is None or self.timeline_view.store is not ref.store):
            self._drop_aligned_views()
        if ref is not None and self.timeline_view is None:
            self._build_aligned_views(ref)
        self._show_aligned()
        self._changed()

    def _changed(self) -> None:
        self.panel.refresh()
        self.changed.emit()

    # ---- the aligned strip and lanes ---------------------------------------------------------

    def _build_aligned_views(self, ref: Reference) -> None:
        self.timeline_view = TimelineView(ref.store)
        self.timeline_view.setObjectName("referenceTimelinePlot")
        self.lanes_view = LanesView(ref.store)
        self.lanes_view.setObjectName("referenceLanesPlot")
        self.timeline_view.set_follow(False)   # the current run's strip leads; these follow through the link
        for plot in (self.timeline_view, self.lanes_view):
            plot.getPlotItem().getAxis("left").setWidth(AXIS_WIDTH)
            plot.setXLink(self.timeline)
            plot.getPlotItem().getViewBox().sigRangeChangedManually.connect(
                lambda *_: self.timeline.set_follow(False))
            plot.scene().sigMouseClicked.connect(lambda _e, p=plot: self.plotClicked.emit(p))
        name = f'<span style="color:{ref.color}"><b>{ref.name}</b></span>'
        set_title(self.timeline_view.getPlotItem(), f"{name} engine steps — {ref.label}")
        set_title(self.lanes_view.getPlotItem(), f"{name} request lanes ({len(ref.run.requests)} requests), "
                                                 "on this run's time axis")
        self.splitter.addWidget(self.timeline_view)
        self.splitter.addWidget(self.lanes_view)
        total = sum(self.splitter.sizes()) or 550
        # a disaggregated run's rows take the strip's share
        rows = 0.2 if self.worker_strip.isVisibleTo(self.parent_widget) else 0.0
        fractions = (0.2 - rows, rows, 0.3, 0.2, 0.3)   # strip, worker rows, lanes, the reference's strip and lanes
        self.splitter.setSizes([int(total * f) for f in fractions])
        self.timeline.extent_ms = ref.store.now_ms()   # a stopped strip fits the reference's run too
        self.timeline.set_follow(self.timeline.follow)
        self.timeline_view.refresh()
        self.lanes_view.refresh()

    def _drop_aligned_views(self) -> None:
        for plot in (self.timeline_view, self.lanes_view):
            plot.hide()
            plot.setParent(None)
            plot.deleteLater()
        self.timeline_view = self.lanes_view = None
        self.timeline.extent_ms = 0.0

    def _show_aligned(self) -> None:
        """The aligned views are drawn only while their reference is shown."""
        ref = self.references.get(self.references.aligned)
        for plot in (self.timeline_view, self.lanes_view):
            if plot is not None:
                plot.setVisible(ref is not None and ref.visible)

    def aligned_views(self) -> tuple:
        return tuple(p for p in (self.timeline_view, self.lanes_view) if p is not None)

    # ---- dialogs, drag and drop ----------------------------------------------------------------

    def add_dialog(self) -> None:
        folder = QtWidgets.QFileDialog.getExistingDirectory(self.parent_widget, "Add a run folder as a reference",
                                                            start_folder("runs"))
        if folder:
            remember_folder("runs", str(Path(folder).parent))
            self.add(folder)

    def drag_enter(self, event: QtGui.QDragEnterEvent) -> None:
        if dropped_folders(event.mimeData()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def drop(self, event: QtGui.QDropEvent) -> None:
        folders = dropped_folders(event.mimeData())
        if not folders:
            event.ignore()
            return
        event.acceptProposedAction()
        for folder in folders:   # each stands alone: a bad one is refused, the others are added
            self.add(folder)
