"""Reference runs in the window: Add reference run…, drag and drop of run folders, hide, remove,
and one reference's steps and lanes drawn under the current run's (methods of MainWindow)."""
from __future__ import annotations

from pathlib import Path

from PySide6 import QtCore, QtGui, QtWidgets

from backend.errors import InputError

from gui.views.lanes import LanesView
from gui.views.plot_style import set_title
from gui.panels.references import ReferencePanel
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


class ReferenceActions:
    """Mixed into MainWindow: uses its views, splitter, status bar and show_error."""

    def _build_references(self) -> None:
        self.references = ReferenceSet()
        self.reference_panel = ReferencePanel(self.references)
        self.reference_panel.addRequested.connect(self._add_reference_dialog)
        self.reference_panel.removeRequested.connect(self.remove_reference)
        self.reference_panel.visibilityChanged.connect(self.set_reference_visible)
        self.reference_panel.alignRequested.connect(self.align_reference)
        self.ref_timeline: TimelineView | None = None
        self.ref_lanes: LanesView | None = None
        self.setAcceptDrops(True)

    # ---- the set -----------------------------------------------------------------------------

    def add_reference(self, folder: str, tag: str = "") -> Reference | None:
        """Read a run folder as a reference; a folder that is not a readable run is refused with one line."""
        try:
            ref = self.references.add(folder, tag)
        except InputError as exc:
            self.show_error(f"not added as a reference: {exc}")
            return None
        if self.references.aligned is None and self.ref_timeline is None and ref.run.steps:
            self.align_reference(ref.key)   # the first reference with steps goes under the strip at once
        self._references_changed()
        self.statusBar().showMessage(f"Added reference {ref.name}: {ref.label} ({len(ref.run.requests)} requests, "
                                     f"{len(ref.run.steps)} steps{', a sweep' if ref.sweep else ''})")
        return ref

    def remove_reference(self, key: int) -> None:
        ref = self.references.get(key)
        if ref is None:
            return
        self.references.remove(key)
        if self.ref_timeline is not None and self.ref_timeline.store is ref.store:
            self._drop_aligned_views()
        self._references_changed()
        self.statusBar().showMessage(f"Removed reference {ref.name}")

    def set_reference_visible(self, key: int, visible: bool) -> None:
        self.references.set_visible(key, visible)
        self._show_aligned()
        self._references_changed()

    def align_reference(self, key: int | None) -> None:
        """Draw this reference's steps and lanes under the current run's, on the same time axis (None: none)."""
        self.references.align(key)
        ref = self.references.get(self.references.aligned)
        if self.ref_timeline is not None and (ref is None or self.ref_timeline.store is not ref.store):
            self._drop_aligned_views()
        if ref is not None and self.ref_timeline is None:
            self._build_aligned_views(ref)
        self._show_aligned()
        self._references_changed()

    def _references_changed(self) -> None:
        self.reference_panel.refresh()
        self.repaint_views()

    # ---- the aligned strip and lanes ---------------------------------------------------------

    def _build_aligned_views(self, ref: Reference) -> None:
        self.ref_timeline = TimelineView(ref.store)
        self.ref_timeline.setObjectName("referenceTimelinePlot")
        self.ref_lanes = LanesView(ref.store)
        self.ref_lanes.setObjectName("referenceLanesPlot")
        self.ref_timeline.set_follow(False)   # the current run's strip leads; these follow through the link
        for plot in (self.ref_timeline, self.ref_lanes):
            plot.getPlotItem().getAxis("left").setWidth(AXIS_WIDTH)
            plot.setXLink(self.timeline)
            plot.getPlotItem().getViewBox().sigRangeChangedManually.connect(
                lambda *_: self.timeline.set_follow(False))
            plot.scene().sigMouseClicked.connect(lambda _e, p=plot: setattr(self, "current_plot", p))
        name = f'<span style="color:{ref.color}"><b>{ref.name}</b></span>'
        set_title(self.ref_timeline.getPlotItem(), f"{name} engine steps — {ref.label}")
        set_title(self.ref_lanes.getPlotItem(), f"{name} request lanes ({len(ref.run.requests)} requests), "
                                                "on this run's time axis")
        self.central_splitter.addWidget(self.ref_timeline)
        self.central_splitter.addWidget(self.ref_lanes)
        total = sum(self.central_splitter.sizes()) or 550
        rows = 0.2 if self.worker_strip.isVisibleTo(self) else 0.0   # a disaggregated run's rows take the strip's share
        fractions = (0.2 - rows, rows, 0.3, 0.2, 0.3)   # strip, worker rows, lanes, the reference's strip and lanes
        self.central_splitter.setSizes([int(total * f) for f in fractions])
        self.timeline.extent_ms = ref.store.now_ms()   # a stopped strip fits the reference's run too
        self.timeline.set_follow(self.timeline.follow)
        self.ref_timeline.refresh()
        self.ref_lanes.refresh()

    def _drop_aligned_views(self) -> None:
        for plot in (self.ref_timeline, self.ref_lanes):
            plot.hide()
            plot.setParent(None)
            plot.deleteLater()
        self.ref_timeline = self.ref_lanes = None
        self.timeline.extent_ms = 0.0

    def _show_aligned(self) -> None:
        """The aligned views are drawn only while their reference is shown."""
        ref = self.references.get(self.references.aligned)
        for plot in (self.ref_timeline, self.ref_lanes):
            if plot is not None:
                plot.setVisible(ref is not None and ref.visible)

    def aligned_views(self) -> tuple:
        return tuple(p for p in (self.ref_timeline, self.ref_lanes) if p is not None)

    # ---- dialogs, drag and drop ----------------------------------------------------------------

    def _add_reference_dialog(self) -> None:
        folder = QtWidgets.QFileDialog.getExistingDirectory(self, "Add a run folder as a reference",
                                                            start_folder("runs"))
        if folder:
            remember_folder("runs", str(Path(folder).parent))
            self.add_reference(folder)

    def dragEnterEvent(self, event: QtGui.QDragEnterEvent) -> None:
        if dropped_folders(event.mimeData()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QtGui.QDropEvent) -> None:
        folders = dropped_folders(event.mimeData())
        if not folders:
            event.ignore()
            return
        event.acceptProposedAction()
        for folder in folders:   # each stands alone: a bad one is refused, the others are added
            self.add_reference(folder)
