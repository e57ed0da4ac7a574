"""The main window: its views, docks and menus, and the controllers it owns (gui/controllers/): runs
(the worker's traffic), files, recent runs, references, compare policies and its cache, tools, help.
Each controller is given what it needs and speaks through its signals; the window wires them to the
views, the status bar and each other. It owns the worker thread's lifecycle (shut_down)."""
from __future__ import annotations

import sys
import time

import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from backend.loaders.device import run_dtype_name
from backend.precision import from_info
from backend.run_info import RunInfo
from backend.errors import InputError
from backend.events import EngineStatus, ModelLoaded, Progress
from backend.engine.threads import window_choice
from backend.shape import ModelShape
from backend.models.shapes import SHAPES
from backend.roofline.profiles import LOCAL_KEY
from backend.config import LOAD_SWEEPS, RunKind, SweepKind

from gui.controllers.compare import CompareController
from gui.controllers.files import FilesController
from gui.controllers.help import HelpController
from gui.controllers.recent import RecentController
from gui.controllers.references import ReferencesController
from gui.controllers.runs import RunsController
from gui.controllers.tools import ToolsController
from gui.panels.calibration_offer import CalibrationOffer, place_offer
from gui.panels.controls import ControlsPanel
from gui.panels.references import ReferencePanel
from gui.views.distributions import DistributionsView
from gui.views.kv_map import KvMapView
from gui.views.lanes import LanesView
from gui.views.server_metrics import ServerMetricsView
from gui.views.depth_sweep import DepthSweepView
from gui.views.load_sweep import LoadSweepView
from gui.views.metrics import MetricsPanel
from gui.views.precision import PrecisionView
from gui.views.requests_table import RequestsTable
from gui.views.speculation import SpeculationView
from gui.state.references import ReferenceSet
from gui.state.run_store import RunStore
from gui.panels.status import RunStatus
from gui.panels.status_bar import MessageBar
from gui.desktop_entry import icon_path
from gui.layout import (DISTRIBUTIONS_NOTE, LIVE_NOTE, NotesPanel, ViewTabs, arrange_docks, plot_page, scrolled,
                        set_minimum_heights, short_screen)
from gui.shutdown import stop_worker
from gui.window_settings import restore_window, save_window
from gui.views.text import GeneratedText
from gui.views.throughput import ThroughputView
from gui.views.timeline import TimelineView
from gui.views.worker_strip import WorkerStripView
from gui.worker import RunWorker, WorkerThread

REPAINT_MS = 30          # about 30 Hz: records arrive at any rate, the screen changes at this one
NUMBERS_EVERY = 3        # the table and the metrics panel every third tick while running: digits cannot be read faster
PAINT_SHARE = 0.5        # of a core, for the window's thread while a run goes; past it the repaints slow down
REPAINT_MAX_MS = 250     # ... to at most 4 a second
AXIS_WIDTH = 64          # the strip and the lanes share a time axis: equal left axes keep them aligned
RIGHT_AXIS_WIDTH = 44    # ... and equal right ones: the strip's KV lines' scale (gui/views/kv_overlay.py), the others' empty
SWEEP_MESSAGE = "A sweep shows one bar per point (its median step); its plot comes forward when it finishes"
LIVE_TAB = "Live: steps and lanes"
PRECISION_TAB, DISTRIBUTIONS_TAB, LOAD_SWEEP_TAB = "Precision", "Latency CDF", "Load sweep"
KV_TAB = "KV cache"
SPEC_TAB = "Speculation"
SPEC_TITLE = ("Speculative decoding: guesses kept per verification, acceptance by guess position, and the step time "
              "against the tokens verified beside the roofline's prediction")
KV_TITLE = "The KV cache block by block: who holds each block, what stays cached, its occupancy and hit rate"
PRECISION_TITLE = "TTFT and TPOT by weight precision"
DISTRIBUTIONS_TITLE = "Latency distributions: this run and the references"
LOAD_SWEEP_TITLE = "Load sweep: a load run at each point"
DEPTH_TAB = "Depth"
DEPTH_TITLE = "Depth sweep: prefill and decode tokens/s at each context depth"
LOAD_SWEEP_MESSAGE = "A load sweep runs the workload once per point; its plot comes forward when it finishes"
DEPTH_MESSAGE = "A depth sweep times pairs of requests at each context depth; its plot comes forward when it finishes"
REMOTE_MESSAGE = ("engine steps are not visible for a remote server — "
                  "its lanes and metrics come from the client's clock")
TITLE = "phasescope — prefill and decode, step by step"


class MainWindow(QtWidgets.QMainWindow):
    # emitted in the window's thread once it has taken in the outcome (tests and automation wait on these)
    runFinished = QtCore.Signal(object)
    runFailed = QtCore.Signal(str)
    comparisonFinished = QtCore.Signal(object)   # a Compare policies series ended (gui/controllers/compare.py Series)
    fitFinished = QtCore.Signal(object)          # a FitReport, once the window has shown it

    def __init__(self, worker=None, parent=None, remember: bool = False):
        """`remember`: restore the last session's layout and settings and save them at the end (the
        app's window; one made by code, a test's or a benchmark's, starts from the defaults)."""
        super().__init__(parent)
        self.remember = remember
        self.setWindowTitle(TITLE)
        self.setWindowIcon(QtGui.QIcon(str(icon_path())))
        self.store = RunStore()
        self.references = ReferenceSet()   # runs overlaid on the views
        self.last_error = ""
        self.error_box: QtWidgets.QMessageBox | None = None
        self.selected_request: int | None = None
        self.is_shut_down = False
        self._throughput_title = "Throughput vs batch size"
        self._build_views()
        self.setStatusBar(MessageBar())   # messages never clipped by the labels beside them
        self.status = RunStatus(self.statusBar())
        self.controls = ControlsPanel()
        self.reference_panel = ReferencePanel(self.references)
        self.worker_thread = WorkerThread(worker)
        self.worker = self.worker_thread.worker
        self._build_controllers()
        self.show_threads()
        self.controls.threads_spin.valueChanged.connect(self.show_threads)
        self._build_docks()
        self._build_actions()
        self._ticks = 0
        self.repaint_timer = QtCore.QTimer(self)
        self.repaint_timer.setTimerType(QtCore.Qt.TimerType.PreciseTimer)   # a coarse one drifts below 30 Hz
        self.repaint_timer.setInterval(REPAINT_MS)
        self.repaint_timer.timeout.connect(self.repaint_views)
        self.repaint_timer.start()
        self.window_cpu_share = 0.0   # the main thread's CPU over the last second, as a share of a core
        self._cpu_clock = (time.monotonic(), time.thread_time())
        self.cpu_timer = QtCore.QTimer(self)
        self.cpu_timer.setInterval(1000)
        self.cpu_timer.timeout.connect(self._sample_cpu)
        self.cpu_timer.start()
        self._choices_changed()
        self.maximise_at_start = False   # the app's first start on a small screen (gui/window_geometry.py)
        self.resize(1400, 900)           # a window made by code; the app's fits the screen (restore_window)
        if remember:
            restore_window(self)   # the last session's layout and settings (gui/window_settings.py)
        if self.controls.profile_problem:
            self.show_error(self.controls.profile_problem)

    @property
    def running(self) -> bool:
        """A run, calibration or fit is under way (the runs controller's)."""
        return self.runs.running

    # ---- building ----------------------------------------------------------------------------

    def _build_controllers(self) -> None:
        """Each controller gets what it needs; what it says goes to the status bar, the message box,
        the views and the other controllers through the connections made here."""
        self.runs = RunsController(self.store, self.worker, self.controls.remote_url, self)
        self.reference_runs = ReferencesController(self.references, self.reference_panel, self.timeline,
                                                   self.worker_strip, self.central_splitter, self)
        self.files = FilesController(self.store, self.runs, lambda: self.current_plot, self)
        self.compare = CompareController(self.store, self.runs, self.reference_runs, self.controls.form, self)
        self.tools = ToolsController(self.runs, self.controls, self)
        self.help = HelpController(self)
        for controller in (self.runs, self.reference_runs, self.files, self.compare, self.compare.cache, self.tools):
            controller.message.connect(self.show_message)
        for controller in (self.runs, self.reference_runs, self.files, self.compare):
            controller.error.connect(self.show_error)
        self.runs.launched.connect(self._show_launched)
        self.runs.runningChanged.connect(self._set_running)
        self.runs.repeatStarted.connect(self._show_repeat)
        self.runs.event.connect(self._show_event)
        self.runs.finished.connect(self._on_finished)
        self.runs.failed.connect(self.runFailed)
        self.runs.calibrated.connect(self._on_calibrated)
        self.compare.finished.connect(self.comparisonFinished)
        self.tools.fitFinished.connect(self.fitFinished)
        self.tools.fitFinished.connect(lambda _: self.calibration_offer.refresh())   # a fit writes the profile too
        self.files.opened.connect(self._show_opened)
        self.reference_runs.changed.connect(self.repaint_views)
        # a reference chosen for under the strip is seen on the live view: it comes forward
        self.reference_panel.alignRequested.connect(
            lambda key: self.view_tabs.show_view(self.live_page) if key is not None else None)
        # the references share a tab of the side column with the notes: one added comes forward
        self.reference_runs.changed.connect(lambda: self.references_dock.raise_() if len(self.references) else None)
        self.reference_runs.plotClicked.connect(lambda plot: setattr(self, "current_plot", plot))
        self.setAcceptDrops(True)   # run folders dropped on the window are added as references

    def _build_views(self) -> None:
        self.timeline = TimelineView(self.store)
        self.lanes = LanesView(self.store)
        self.lanes.setXLink(self.timeline)
        for plot in (self.timeline, self.lanes):
            plot.getPlotItem().getAxis("left").setWidth(AXIS_WIDTH)
        self.lanes.getPlotItem().getViewBox().sigRangeChangedManually.connect(
            lambda *_: self.timeline.set_follow(False))
        # a disaggregated run's strip: one row per worker, in place of the one engine's strip
        self.worker_strip = WorkerStripView(self.store)
        self.worker_strip.setXLink(self.timeline)
        self.worker_strip.getPlotItem().getAxis("left").setWidth(AXIS_WIDTH)
        self.worker_strip.getPlotItem().getViewBox().sigRangeChangedManually.connect(
            lambda *_: self.timeline.set_follow(False))
        self.worker_strip.hide()
        # a remote run's server load under the lanes, on their time axis (shown when the server has /metrics)
        self.server_view = ServerMetricsView(self.store)
        self.server_view.setXLink(self.timeline)
        self.server_view.getPlotItem().getAxis("left").setWidth(AXIS_WIDTH)
        self.server_view.hide()
        for plot in (self.timeline, self.lanes, self.worker_strip, self.server_view):
            item = plot.getPlotItem()
            item.showAxis("right")
            item.getAxis("right").setWidth(RIGHT_AXIS_WIDTH)
            if plot is not self.timeline:
                item.getAxis("right").setStyle(showValues=False)
        self.throughput = ThroughputView(self.store)
        self.precision = PrecisionView(self.store)
        self.load_sweep = LoadSweepView(self.store)   # rate, concurrency and prefill:decode split sweeps
        self.depth_sweep = DepthSweepView(self.store)
        self.table = RequestsTable(self.store)
        self.text = GeneratedText(self.store)
        self.metrics = MetricsPanel(self.store)
        self.distributions = DistributionsView(self.store, self.references)
        self.kv_view = KvMapView(self.store)
        self.speculation = SpeculationView(self.store, self.throughput)   # priced on the why view's inputs
        self.throughput.set_references(self.references)
        self.precision.set_references(self.references)
        self.metrics.set_references(self.references)
        self.current_plot: pg.PlotWidget = self.timeline
        for plot in (self.timeline, self.lanes, self.throughput, self.precision, self.load_sweep, self.depth_sweep,
                     self.distributions.plot, self.speculation.histogram_plot, self.speculation.position_plot,
                     self.speculation.steps_plot):
            plot.scene().sigMouseClicked.connect(lambda _e, p=plot: setattr(self, "current_plot", p))
        self.lanes.requestClicked.connect(self.select_request)
        self.table.requestSelected.connect(self.select_request)

        self.follow_check = QtWidgets.QCheckBox("Follow the live edge")
        self.follow_check.setChecked(True)
        self.follow_check.toggled.connect(self.timeline.set_follow)
        self.timeline.followChanged.connect(self.follow_check.setChecked)
        hint = QtWidgets.QLabel("wheel: zoom · drag: pan · hover: numbers · click a lane: select")
        hint.setStyleSheet("color: #666;")
        header = QtWidgets.QHBoxLayout()
        header.addWidget(self.follow_check)
        header.addStretch(1)
        header.addWidget(hint)
        splitter = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)
        splitter.setChildrenCollapsible(False)   # a plot dragged to nothing would be lost from view
        splitter.addWidget(self.timeline)
        splitter.addWidget(self.worker_strip)
        lanes_box = QtWidgets.QSplitter(QtCore.Qt.Orientation.Vertical)   # one slot of the splitter: the lanes
        lanes_box.addWidget(self.lanes)                                   # and the server's load under them
        lanes_box.addWidget(self.server_view)
        lanes_box.setSizes([240, 110])
        splitter.addWidget(lanes_box)
        splitter.setSizes([220, 0, 330])
        self.central_splitter = splitter   # a reference's strip and lanes go under these (align_reference)
        self.live_page = QtWidgets.QWidget()
        layout = QtWidgets.QVBoxLayout(self.live_page)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.addLayout(header)
        layout.addWidget(splitter, 1)
        set_minimum_heights(self.timeline, self.lanes, self.throughput, self.precision, self.load_sweep, self.depth_sweep,
                            self.distributions.plot, self.speculation.histogram_plot, self.speculation.position_plot,
                            self.speculation.steps_plot)
        # the central area: one picture at a time, each with all the room (gui/layout.py says why)
        self.view_tabs = ViewTabs()
        self.view_tabs.add_view(self.live_page, LIVE_TAB, "The engine's steps and the requests' lanes, as they run")
        self.throughput_page = plot_page(self.throughput)
        self.view_tabs.add_view(self.throughput_page, self._throughput_title,
                                "Why: decode throughput against batch size (or prefill against prompt length), "
                                "the roofline's prediction and roofs, the crossover and the measured points")
        self.view_tabs.add_view(plot_page(self.precision), PRECISION_TAB, PRECISION_TITLE)
        self.view_tabs.add_view(self.distributions, DISTRIBUTIONS_TAB, DISTRIBUTIONS_TITLE)
        self.view_tabs.add_view(plot_page(self.load_sweep), LOAD_SWEEP_TAB, LOAD_SWEEP_TITLE)
        self.view_tabs.add_view(plot_page(self.depth_sweep), DEPTH_TAB, DEPTH_TITLE)
        self.view_tabs.add_view(self.kv_view, KV_TAB, KV_TITLE)
        self.view_tabs.add_view(self.speculation, SPEC_TAB, SPEC_TITLE)
        self.setCentralWidget(self.view_tabs)
        self.calibration_offer = CalibrationOffer()   # placed with the menus (_build_actions)

    def _dock(self, title: str, widget: QtWidgets.QWidget, name: str) -> QtWidgets.QDockWidget:
        dock = QtWidgets.QDockWidget(title, self)
        dock.setObjectName(name)
        dock.setWidget(widget)
        return dock

    def _build_docks(self) -> None:
        scroll = QtWidgets.QScrollArea()
        scroll.setWidget(self.controls)
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(QtCore.Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setMinimumWidth(330)
        self.controls_dock = self._dock("Controls", scroll, "controlsDock")
        # the metrics scroll rather than clip: "Where the time goes" grows with the run's story
        self.metrics_dock = self._dock("Live metrics", scrolled(self.metrics), "metricsDock")
        self.text_dock = self._dock("Generated text", self.text, "textDock")
        self.notes = NotesPanel(self.view_tabs)
        self.notes.add_notes(self.live_page, NotesPanel.fixed(LIVE_NOTE))
        self.notes.add_notes(self.throughput_page, self.throughput.note)
        self.notes.add_notes(self.precision.parentWidget(), self.precision.note)
        self.notes.add_notes(self.distributions, NotesPanel.fixed(DISTRIBUTIONS_NOTE))
        self.notes.add_notes(self.load_sweep.parentWidget(), self.load_sweep.note)
        self.notes.add_notes(self.depth_sweep.parentWidget(), self.depth_sweep.note)
        self.notes.add_notes(self.kv_view, self.kv_view.note)
        self.notes.add_notes(self.speculation, self.speculation.note)
        self.notes_dock = self._dock("About this view", self.notes, "notesDock")
        self.table_dock = self._dock("Requests", self.table, "requestsDock")
        # in a scroll area, so its list and buttons do not set the least height of the tabbed group it joins
        self.references_dock = self._dock("References", scrolled(self.reference_panel), "referencesDock")
        arrange_docks(self, short_screen())
        self.text.titleChanged.connect(self.text_dock.setWindowTitle)
        self.view_tabs.currentChanged.connect(self._view_changed)
        self.controls.runRequested.connect(self.start_run)
        self.controls.stopRequested.connect(self.stop_run)
        self.controls.calibrateRequested.connect(self.runs.calibrate)
        self.calibration_offer.calibrateRequested.connect(
            lambda: self.runs.calibrate(self.controls.device_combo.currentText()))
        self.controls.choicesChanged.connect(self._choices_changed)
        self.controls.inputRejected.connect(self.show_error)

    def _action(self, menu: QtWidgets.QMenu, text: str, slot, shortcut=None, name: str | None = None) -> QtGui.QAction:
        action = QtGui.QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QtGui.QKeySequence(shortcut))
        if name:
            action.setObjectName(name)
        action.triggered.connect(slot)
        menu.addAction(action)
        return action

    def _build_actions(self) -> None:
        bar = self.menuBar()
        place_offer(self, self.calibration_offer)
        file_menu = bar.addMenu("&File")
        self.open_run_action = self._action(file_menu, "&Open run…", self.files.open_run_dialog,
                                            QtGui.QKeySequence.StandardKey.Open, "openRunAction")
        self.recent = RecentController(file_menu, self.files, self.runs, self)
        self.recent.message.connect(self.show_message)
        self.recent.error.connect(self.show_error)
        self.add_reference_action = self._action(file_menu, "Add &reference run…", self.reference_runs.add_dialog,
                                                 "Ctrl+Shift+O", "addReferenceAction")
        self.export_csv_action = self._action(file_menu, "&Export CSV…", self.files.export_dialog, "Ctrl+E",
                                              "exportCsvAction")
        self.save_plot_action = self._action(file_menu, "Save plot as &PNG…", self.files.save_plot_dialog,
                                             "Ctrl+Shift+S", "savePlotAction")
        file_menu.addSeparator()
        self._action(file_menu, "Clear Compare-policies &cache", self.compare.cache.clear, name="clearCacheAction")
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", self.close, QtGui.QKeySequence.StandardKey.Quit)
        run_menu = bar.addMenu("&Run")
        self.run_action = self._action(run_menu, "&Run", self.start_run, "Ctrl+R", "runAction")
        self.stop_action = self._action(run_menu, "&Stop", self.stop_run, "Esc", "stopAction")
        self._action(run_menu, "&Calibrate this machine…",
                     lambda: self.runs.calibrate(self.controls.device_combo.currentText()))
        self._action(run_menu, "Fit the simulator's cost model…",
                     lambda: self.tools.start_fit(self.controls.device_combo.currentText()), name="fitAction")
        self._action(run_menu, "&Plan deployment…", self.tools.open_plan, name="planAction")
        self._action(run_menu, "&Worked example…", self.tools.open_example, name="exampleAction")
        learn_menu = bar.addMenu("&Learn")
        self._action(learn_menu, "The &tour: the seed's claims, measured here…", self.tools.open_tour,
                     name="tourAction")
        view_menu = bar.addMenu("&View")
        for i in range(self.view_tabs.count()):   # Ctrl+1 ... Ctrl+7: the central views
            page = self.view_tabs.widget(i)
            self._action(view_menu, self.view_tabs.tabText(i), lambda _=False, p=page: self.view_tabs.show_view(p),
                         f"Ctrl+{i + 1}")
        view_menu.addSeparator()
        for dock in (self.controls_dock, self.metrics_dock, self.notes_dock, self.references_dock, self.text_dock,
                     self.table_dock):
            view_menu.addAction(dock.toggleViewAction())
        help_menu = bar.addMenu("&Help")
        self.shortcuts_action = self._action(help_menu, "&Keyboard shortcuts…", self.help.show_shortcuts,
                                             QtGui.QKeySequence.StandardKey.HelpContents, "shortcutsAction")
        self.about_action = self._action(help_menu, "&About phasescope…", self.help.show_about, name="aboutAction")

    # ---- running -----------------------------------------------------------------------------

    def show_threads(self) -> None:
        """The status bar says how many threads the engine will take, of how many cores, and why."""
        self.status.show_thread_choice(self.controls.thread_choice)

    def start_run(self) -> None:
        """Run (the button, the menu, Ctrl+R): the form's settings, or a Compare policies series of them."""
        if self.running:
            return
        try:
            config = self.controls.build_config()
        except InputError as exc:
            self.show_error(str(exc))
            return
        if self.controls.form.compare_policies():
            self.compare.start(config)
        else:
            self.runs.launch(config)

    def stop_run(self) -> None:
        self.compare.cancel()
        self.runs.stop()

    def _show_launched(self, config, what: str) -> None:
        """A run was handed to the worker: the views forget the last one's rows before anything paints,
        and the live view comes forward (a sweep's own plot does when it finishes)."""
        self.table.refresh()
        self.select_request(None)
        self._show_run_kind(config.mode, SweepKind.PROMPT if config.mode == RunKind.SWEEP_PROMPT else None)
        self.view_tabs.show_view(self.live_page)
        self.timeline.set_follow(True)

    def _show_run_kind(self, mode: RunKind | None, sweep_kind: SweepKind | None) -> None:
        """Titles and messages for the kind of run on screen (a sweep, a remote server's, or a local run;
        None: a folder that records no kind this version knows)."""
        kind = sweep_kind or SweepKind.BATCH
        self.throughput.set_kind(kind)
        self.throughput.set_inputs(context=self._prediction_context())
        self._throughput_title = "Throughput vs " + ("prompt length" if kind == SweepKind.PROMPT else "batch size")
        self.view_tabs.rename(self.throughput_page, self._throughput_title)
        one_bar_a_point = mode in (RunKind.SWEEP_BATCH, RunKind.SWEEP_PROMPT)   # a precision sweep: every timed step
        message = REMOTE_MESSAGE if self.store.remote else SWEEP_MESSAGE if one_bar_a_point else \
            LOAD_SWEEP_MESSAGE if mode in LOAD_SWEEPS else DEPTH_MESSAGE if mode == RunKind.SWEEP_DEPTH else ""
        self.timeline.set_empty_message(message)
        self.lanes.set_remote(self.store.remote)

    def sweep_view(self, mode: RunKind | None) -> QtWidgets.QWidget | None:
        """The plot that shows a sweep of this kind (None: not a sweep)."""
        if mode == RunKind.SWEEP_PRECISION:
            return self.precision
        if mode in LOAD_SWEEPS:
            return self.load_sweep
        if mode == RunKind.SWEEP_DEPTH:
            return self.depth_sweep
        if mode is not None and mode.sweep_kind is not None:
            return self.throughput
        return None

    def _show_sweep(self, mode: RunKind | None) -> None:
        """A sweep's result is its plot: brought forward, repainted at once."""
        view = self.sweep_view(mode)
        if view is not None:
            self.view_tabs.show_view(view)
            self.repaint_views()

    def _view_changed(self, *_) -> None:
        """A view brought forward repaints at once, not at the next tick (the CDF sorts only when shown),
        and the side column's tab follows it: the generated text beside the live view, the notes beside
        a plot, unless the references are in front."""
        page = self.view_tabs.currentWidget()
        if page is self.distributions or page is self.speculation:
            page.refresh()
        if not (len(self.references) and self.references_dock.isVisible()):   # the references, once in front, stay
            (self.text_dock if page is self.live_page else self.notes_dock).raise_()

    def _set_running(self, running: bool) -> None:
        self.controls.set_running(running)
        self.calibration_offer.set_running(running)
        self.run_action.setEnabled(not running)
        self.open_run_action.setEnabled(not running)
        self.export_csv_action.setEnabled(not running)
        self.timeline.set_running(running)
        self.lanes.set_running(running)
        if running:
            self.status.start_clock()
        else:
            self.status.hide_progress()
            self.repaint_timer.setInterval(REPAINT_MS)
            self.repaint_views()

    def _show_event(self, event) -> None:
        if isinstance(event, Progress):
            self.status.show_progress(event)
        elif isinstance(event, EngineStatus):
            self.status.show_engine(event)
        elif isinstance(event, ModelLoaded):
            # a precision sweep loads the model at each of its precisions: none of them is the run's dtype
            run_dtype = None if self._is_precision_sweep() else event.precision or event.dtype
            self.throughput.set_inputs(shape=event.shape, run_dtype=run_dtype)
            self._show_choices(event.name, f"{event.device} ({event.device_name})", event.dtype)

    def _show_repeat(self, event) -> None:
        """A repeat past the first: the store starts over, and so do the table and the strip."""
        self.table.refresh()
        self.select_request(None)
        self.timeline.set_follow(True)

    def _on_finished(self, result) -> None:
        if result.data is not None:
            self._show_run_info(result.data.info)
        if not result.error and result.summary.num_points:
            self._show_sweep(RunKind.recorded(self.store.config.get("mode")))
        self.runFinished.emit(result)

    def _show_opened(self, run, mode: str, sweep_kind: str | None) -> None:
        """A run folder opened into the store (File > Open run, Recent runs)."""
        self.select_request(None)
        self._show_run_kind(mode, sweep_kind)
        self._show_run_info(run.info)
        self.timeline.set_follow(True)
        sweep = self.sweep_view(mode)
        if sweep is not None:   # a sweep's result is its plot; a run's leaves the view on screen as it is
            self.view_tabs.show_view(sweep)
        self.repaint_views()

    def _on_calibrated(self, profile, path: str) -> None:
        self.controls.reload_profiles()
        self.controls.select_profile(LOCAL_KEY)
        self.calibration_offer.calibrated()
        self.show_message(f"Calibrated {profile.name}: profile written to {path}")

    # ---- views -------------------------------------------------------------------------------

    def repaint_views(self) -> None:
        """The timer's tick: each visible view repaints if the store changed since it last looked."""
        self._ticks += 1
        numbers = not self.running or self._ticks % NUMBERS_EVERY == 0
        if numbers:
            self.table.refresh()   # keeps row counts right even while hidden
        # a CDF sorts every value: with the numbers' cadence, not every frame
        self._show_worker_strip(bool(self.store.workers))
        self.server_view.setVisible(self.server_view.has_data())
        for view in (self.timeline, self.worker_strip, self.lanes, self.server_view, self.throughput, self.precision,
                     self.load_sweep, self.depth_sweep, self.text, self.kv_view) + \
                self.reference_runs.aligned_views() + \
                ((self.metrics, self.distributions, self.speculation) if numbers else ()):
            if view.isVisible():
                view.refresh()

    def _show_worker_strip(self, show: bool) -> None:
        """A disaggregated run's per-worker rows take the strip's place; the strip folds to nothing but
        stays (its time axis drives the rows' and the lanes')."""
        if show == self.worker_strip.isVisibleTo(self.live_page):   # (the live view may be behind another tab)
            return
        sizes = self.central_splitter.sizes()   # strip, worker rows, lanes (and a reference's strip and lanes)
        self.worker_strip.setVisible(show)
        strip = sizes[0] + sizes[1]
        self.central_splitter.setSizes(([0, strip] if show else [strip, 0]) + sizes[2:])

    def _sample_cpu(self) -> None:
        """Once a second: what the window's own thread cost, and the repaint rate that keeps it in its share."""
        now, cpu = time.monotonic(), time.thread_time()   # thread_time: this, the main thread's, CPU
        self.window_cpu_share = (cpu - self._cpu_clock[1]) / max(now - self._cpu_clock[0], 1e-6)
        self._cpu_clock = (now, cpu)
        interval = self.repaint_timer.interval()
        if self.running and self.window_cpu_share > PAINT_SHARE:
            interval = min(REPAINT_MAX_MS, round(interval * 1.5))
        elif self.window_cpu_share < PAINT_SHARE / 2:
            interval = max(REPAINT_MS, round(interval / 1.5))
        if interval != self.repaint_timer.interval():
            self.repaint_timer.setInterval(interval)
        if self.running:
            self.status.show_window_cpu(self.window_cpu_share, interval)

    def select_request(self, request_id: int | None) -> None:
        self.selected_request = request_id
        self.lanes.select_request(request_id)
        self.text.show_request(request_id)
        if request_id is not None:
            self.table.select_request(request_id)

    def _choices_changed(self) -> None:
        c = self.controls
        if c.is_remote():
            self._show_choices(c.model_name() or "", f"remote ({c.remote_url()})", "—")
            return
        self._show_choices(c.model_name() or "", c.device_combo.currentText(), c.dtype_combo.currentText())
        self.throughput.set_inputs(profile=c.profile(), context=self._prediction_context())
        name = c.model_name()
        if self.running or not name:
            return
        if c.is_simulated():   # any shape the simulator prices: a shipped config, a config.json
            from gui.panels.sim_choices import check_sim_model
            shape = check_sim_model(name)[0]
        else:
            shape = SHAPES.get(name)
        if shape is not None:
            self.throughput.set_inputs(shape=shape, run_dtype=self._guess_dtype())

    def _prediction_context(self) -> int:
        """The context of the batch sweep on the plot (its points were measured there), else the form's."""
        if self.store.sweep_context and any(p.kind == SweepKind.BATCH for p in self.store.sweep_points):
            return self.store.sweep_context
        return self.controls.form.prediction_context()

    def _guess_dtype(self) -> str | None:
        """The dtype the next run will use, as the backend resolves it (None keeps the last one): under
        Simulate, as the simulator resolves it on the chosen profile."""
        c = self.controls
        if c.is_simulated():
            from backend.errors import InputError
            from backend.sim.model import resolve_precision
            try:
                return resolve_precision(c.dtype_combo.currentText(), c.profile()).name
            except (InputError, AttributeError):
                return None
        return run_dtype_name(c.device_combo.currentText(), c.dtype_combo.currentText())

    def _show_choices(self, model: str, device: str, dtype: str) -> None:
        simulated = device.startswith("simulated")
        if simulated:   # said where it cannot be missed: none of these times was measured
            device = "SIMULATED on " + device.removeprefix("simulated ")
        self.status.show_choices(model, device, dtype, self.controls.profile_combo.currentText())
        self.setWindowTitle(TITLE + (" — SIMULATED: step times from a cost model, not measured" if simulated else ""))

    def show_message(self, message: str) -> None:
        self.statusBar().showMessage(message)

    def show_error(self, message: str) -> None:
        """A message box that does not block (tests and runs go on), and the same line in the status bar."""
        self.last_error = message
        self.statusBar().showMessage("Error: " + message)
        if self.error_box is not None:
            self.error_box.close()
        box = QtWidgets.QMessageBox(QtWidgets.QMessageBox.Icon.Warning, "phasescope", message,
                                    QtWidgets.QMessageBox.StandardButton.Ok, self)
        box.setWindowModality(QtCore.Qt.WindowModality.NonModal)
        box.setAttribute(QtCore.Qt.WidgetAttribute.WA_DeleteOnClose)
        box.finished.connect(lambda *_: setattr(self, "error_box", None))
        box.show()
        self.error_box = box

    def _show_run_info(self, info: RunInfo) -> None:
        """Model, device and dtype as a run recorded them (run.json's info), and its shape for the prediction."""
        if isinstance(info.shape, dict):
            # a precision sweep's info names all its precisions ("float32,q8_0"): none is the run's dtype
            run_dtype = None if self._is_precision_sweep() else from_info(info) or info.dtype
            self.throughput.set_inputs(shape=ModelShape(**info.shape), run_dtype=run_dtype)
        if info.is_remote:
            self._show_choices(info.model or "?", f"remote ({info.remote.endpoint or '?'})", "—")
        elif info.is_imported and info.imported is not None:
            self._show_choices(info.model or "?", f"imported from {info.imported.tool}", info.dtype or "—")
        elif info.model:
            self._show_choices(info.model, f"{info.device or '?'} ({info.device_name})", info.dtype or "?")

    def _is_precision_sweep(self) -> bool:
        return RunKind.recorded(self.store.config.get("mode")) is RunKind.SWEEP_PRECISION

    def dragEnterEvent(self, event: QtGui.QDragEnterEvent) -> None:
        self.reference_runs.drag_enter(event)

    def dropEvent(self, event: QtGui.QDropEvent) -> None:
        self.reference_runs.drop(event)

    def shut_down(self) -> None:
        """The one way out, whatever asked for it (File > Quit, the close button, QApplication.quit(),
        a signal): a run stopped at its next step with its records kept (gui/shutdown.py), the worker
        thread joined, the engine process ended, the settings saved. Once; again does nothing."""
        if self.is_shut_down:
            return
        self.is_shut_down = True
        self.repaint_timer.stop()
        self.cpu_timer.stop()
        self.tools.stop()      # no engine process started for a window that is going
        self.compare.abandon()   # a Compare policies series starts nothing more
        if self.remember:
            save_window(self)
        kept = stop_worker(self.worker_thread, self.runs.running)
        if kept is not None:
            self.recent.remember_run(str(kept))

    def closeEvent(self, event: QtGui.QCloseEvent) -> None:
        self.shut_down()
        super().closeEvent(event)


def app_window(engine=None) -> MainWindow:
    """The app's window (its remembered settings and layout), its runs sent to `engine` (an
    EngineProcess gui/app.py started early), or to one of its own."""
    return MainWindow(RunWorker(engine=engine) if engine is not None else None, remember=True)


def run_app(model: str | None = None, profile: str | None = None, autostart: bool = False,
            threads: int | None = None, engine=None) -> int:
    """`python main.py [--model NAME] [--profile NAME] [--threads N] [--autostart]`: open the window (and run)."""
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    app.setApplicationName("phasescope")
    app.setDesktopFileName("phasescope")   # the desktop entry's (--install-desktop-entry): its icon in the dock
    from gui.theme import follow_system
    from gui.shutdown import quit_on_signals
    window = app_window(engine)
    follow_system(app, window)
    try:
        if model:
            window.controls.select_model(model)
        if profile:
            window.controls.select_profile(profile)
        if threads:
            window.controls.show_thread_choice(window_choice(threads))
            window.show_threads()
    except InputError as exc:
        window.close()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    window.showMaximized() if window.maximise_at_start else window.show()
    waker = quit_on_signals(app, window)   # SIGTERM, SIGINT and quit() take the window's way out
    if autostart:
        QtCore.QTimer.singleShot(0, window.start_run)
    try:
        return app.exec()
    finally:
        waker.close()   # Python's own signal handling back

