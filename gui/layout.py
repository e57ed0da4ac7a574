"""The window's central area: one view at a time, each with all of the room.

Two pictures tell the seed's story: the live phase view (the engine's steps over the request lanes,
with the live metrics beside it) shows *what* happens, and the throughput-against-batch plot (the
roofline's roofs, the crossover, the measured points; with it the prompt-length, precision and
latency plots) shows *why*. Stacked as docks they split the height between them and the why-plot
got a strip; here they are tabs of the central area, so the one on screen has all of it, and a
finished sweep brings its own plot forward (gui/main_window.py). What a plot cannot show goes to
the notes beside it (NotesPanel), not under it where it took the plot's height.
"""
from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

# the least height each plot widget keeps (title with its legend lines, axes, and a data area of at
# least MIN_PLOT_AREA): below it its axes, labels and legend could no longer be read
MIN_HEIGHTS = {"timelinePlot": 200, "requestLanesPlot": 200, "throughputPlot": 360, "precisionPlot": 300,
               "distributionsPlot": 260, "loadSweepPlot": 300, "depthSweepPlot": 300, "kvMapPlot": 200, "kvHistoryPlot": 190,
               "specHistogramPlot": 170, "specPositionPlot": 170, "specStepsPlot": 210}
MIN_PLOT_AREA = 120   # px of a plot's data area (its ViewBox), the test's measure of "readable"

SHORT_SCREEN = 900   # px of available height below which the side column holds the metrics alone

LIVE_NOTE = ("<b>Live: steps and lanes.</b> The upper plot has one bar per forward pass of the engine, as tall as "
             "the tokens it computed: a prefill computes a whole prompt in one step, a decode step one token per "
             "request. The lanes below show each request waiting, in prefill, then decoding; a white tick is a "
             "generated token. The two share their time axis.")
DISTRIBUTIONS_NOTE = ("<b>Latency CDF.</b> The share of requests (or of gaps between tokens) at or below each "
                      "latency, for this run and every reference: a curve further left is faster, a flatter one "
                      "less predictable.")


def short_screen() -> bool:
    """The primary screen leaves less than SHORT_SCREEN px of height (a 1,366 x 768 laptop's)."""
    screen = QtGui.QGuiApplication.primaryScreen()
    return screen is not None and screen.availableGeometry().height() < SHORT_SCREEN


def scrolled(widget: QtWidgets.QWidget) -> QtWidgets.QScrollArea:
    """`widget` in a frameless scroll area: a dock of it scrolls rather than cut it or set its least size."""
    area = QtWidgets.QScrollArea()
    area.setWidget(widget)
    area.setWidgetResizable(True)
    area.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
    return area


def plot_page(view: QtWidgets.QWidget) -> QtWidgets.QWidget:
    """A plot as one tab page (its parentWidget, by which the window names the tab)."""
    page = QtWidgets.QWidget()
    column = QtWidgets.QVBoxLayout(page)
    column.setContentsMargins(2, 2, 2, 2)
    column.addWidget(view, 1)
    return page


def set_minimum_heights(*plots: QtWidgets.QWidget) -> None:
    for plot in plots:
        plot.setMinimumHeight(MIN_HEIGHTS[plot.objectName()])


def arrange_docks(w: QtWidgets.QMainWindow, short: bool) -> None:
    """The side columns run the full height, the requests sit under the central views only. The
    generated text, the notes and the references share one tabbed dock whose tab follows the view
    on screen: in the right column under the metrics, or, on a short screen (a 768 px laptop),
    beside the requests, where the metrics' "Where the time goes" needs the column's whole height
    (stacked there, it was cut). Either way no note takes a plot's height. `w`: the MainWindow."""
    w.setCorner(QtCore.Qt.Corner.BottomLeftCorner, QtCore.Qt.DockWidgetArea.LeftDockWidgetArea)
    w.setCorner(QtCore.Qt.Corner.BottomRightCorner, QtCore.Qt.DockWidgetArea.RightDockWidgetArea)
    w.addDockWidget(QtCore.Qt.DockWidgetArea.LeftDockWidgetArea, w.controls_dock)
    w.addDockWidget(QtCore.Qt.DockWidgetArea.RightDockWidgetArea, w.metrics_dock)
    w.addDockWidget(QtCore.Qt.DockWidgetArea.BottomDockWidgetArea, w.table_dock)
    # sized before the others are tabbed onto it: resizeDocks does not reach a tabbed group
    w.resizeDocks([w.table_dock], [130 if short else 210], QtCore.Qt.Orientation.Vertical)
    if short:
        w.tabifyDockWidget(w.table_dock, w.text_dock)
    else:
        w.splitDockWidget(w.metrics_dock, w.text_dock, QtCore.Qt.Orientation.Vertical)
    w.tabifyDockWidget(w.text_dock, w.notes_dock)
    w.tabifyDockWidget(w.notes_dock, w.references_dock)
    w.text_dock.raise_()
    w.resizeDocks([w.controls_dock, w.metrics_dock], [330, 320 if short else 400], QtCore.Qt.Orientation.Horizontal)
    if not short:
        w.resizeDocks([w.metrics_dock, w.text_dock], [600, 200], QtCore.Qt.Orientation.Vertical)


class ViewTabs(QtWidgets.QTabWidget):
    """The central view switcher: a tab per picture, each page given the whole central area."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("viewTabs")
        self.setDocumentMode(True)
        # a narrow window (1,280 px at 200% on a 2,560 px screen) shortens the tab names rather than widening or
        # scrolling: scrolled, the last views were one letter and an arrow; shortened, every one shows and is
        # named in full in its tooltip
        self.setUsesScrollButtons(False)
        self.tabBar().setElideMode(QtCore.Qt.TextElideMode.ElideRight)

    def add_view(self, page: QtWidgets.QWidget, name: str, tip: str) -> int:
        index = self.addTab(page, name)
        self.setTabToolTip(index, tip)
        return index

    def show_view(self, view: QtWidgets.QWidget) -> None:
        """Brings forward the page that holds `view` (a page itself, or a plot on one)."""
        page = view if self.indexOf(view) >= 0 else view.parentWidget()
        if self.indexOf(page) >= 0:
            self.setCurrentWidget(page)

    def rename(self, page: QtWidgets.QWidget, name: str) -> None:
        self.setTabText(self.indexOf(page), name)


class NotesPanel(QtWidgets.QScrollArea):
    """The notes of the view on screen: one page per tab of the ViewTabs, following it."""

    def __init__(self, tabs: ViewTabs, parent=None):
        super().__init__(parent)
        self.setObjectName("notesPanel")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFrameShape(QtWidgets.QFrame.Shape.NoFrame)
        self.stack = QtWidgets.QStackedWidget()
        self.setWidget(self.stack)
        self.tabs = tabs
        self.pages: dict[QtWidgets.QWidget, QtWidgets.QWidget] = {}   # tab page -> its notes
        tabs.currentChanged.connect(self._follow)

    def add_notes(self, page: QtWidgets.QWidget, *labels: QtWidgets.QLabel) -> None:
        """`labels`: the view's own note (kept up to date by the view) and any fixed words, in order."""
        box = QtWidgets.QWidget()
        column = QtWidgets.QVBoxLayout(box)
        column.setContentsMargins(6, 4, 6, 4)
        for label in labels:
            label.setWordWrap(True)
            label.setAlignment(QtCore.Qt.AlignmentFlag.AlignTop | QtCore.Qt.AlignmentFlag.AlignLeft)
            column.addWidget(label)
        column.addStretch(1)
        self.stack.addWidget(box)
        self.pages[page] = box
        self._follow()

    def _follow(self, *_) -> None:
        box = self.pages.get(self.tabs.currentWidget())
        if box is not None:
            self.stack.setCurrentWidget(box)

    @staticmethod
    def fixed(text: str) -> QtWidgets.QLabel:
        label = QtWidgets.QLabel(text)
        label.setStyleSheet("color: #333;")
        return label
