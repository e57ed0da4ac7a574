"""The Help menu (keyboard shortcuts, About with versions), the window's icon, and light and dark
palettes following the system (gui/controllers/help.py, gui/theme.py)."""
import sys


import numpy
import PySide6
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from gui.controllers.help import shortcut_rows, versions
from gui.theme import PLOT_COLORS, apply_scheme, is_dark_palette


def test_run_stop_export_and_open_have_keys_and_the_dialog_lists_them(qtbot, window):
    keys = {command: key for _, command, key in shortcut_rows(window.menuBar())}
    for command in ("Run", "Stop", "Export CSV", "Open run"):
        assert keys.get(command), f"{command} has no shortcut"
    assert window.run_action.shortcut().toString() == "Ctrl+R"
    dialog = window.help.show_shortcuts()
    qtbot.addWidget(dialog)
    table = dialog.findChild(QtWidgets.QTableWidget, "shortcutsTable")
    rows = {table.item(r, 1).text(): table.item(r, 2).text() for r in range(table.rowCount())}
    assert rows == {command: key for command, key in keys.items()}
    assert rows["Run"] == QtGui.QKeySequence("Ctrl+R").toString(QtGui.QKeySequence.SequenceFormat.NativeText)
    # the dialog is under Help
    help_menu = [a.menu() for a in window.menuBar().actions() if a.text() == "&Help"][0]
    assert window.shortcuts_action in help_menu.actions() and window.about_action in help_menu.actions()


def test_the_shortcuts_do_what_they_say(qtbot, window, tmp_path):
    started = []
    window.start_run = lambda: started.append(True)   # the slot the action calls, by its key
    window.run_action.triggered.disconnect()
    window.run_action.triggered.connect(window.start_run)
    window.activateWindow()
    window.setFocus()
    qtbot.keyClick(window, QtCore.Qt.Key.Key_R, QtCore.Qt.KeyboardModifier.ControlModifier)
    assert started == [True]


def test_about_names_every_version(qtbot, window):
    names = dict(versions())
    assert names["Python"].startswith(".".join(map(str, sys.version_info[:3])))
    assert names["PySide6"] == PySide6.__version__ and names["Qt"] == QtCore.qVersion()
    assert names["pyqtgraph"] == pg.__version__ and names["numpy"] == numpy.__version__
    assert names["torch"] and names["C kernels"] and names["phasescope"]
    box = window.help.show_about()
    qtbot.addWidget(box)
    for value in (PySide6.__version__, numpy.__version__, pg.__version__):
        assert value in box.text()


def test_the_window_has_the_shipped_icon(qtbot, window):
    assert not window.windowIcon().isNull()
    assert not window.windowIcon().pixmap(64, 64).toImage().isNull()


def test_a_dark_scheme_darkens_the_palette_and_the_plots_and_light_brings_them_back(qtbot, window):
    app = QtWidgets.QApplication.instance()
    style, palette = app.style().name(), QtGui.QPalette(app.palette())
    try:
        apply_scheme(app, True, [window])
        assert is_dark_palette(app.palette())
        dark_background = pg.mkColor(PLOT_COLORS[True][0])
        assert window.timeline.backgroundBrush().color() == dark_background
        assert window.throughput.backgroundBrush().color() == dark_background
        axis = window.timeline.getPlotItem().getAxis("left")
        assert axis.textPen().color() == pg.mkColor(PLOT_COLORS[True][1])
        apply_scheme(app, False, [window])
        assert not is_dark_palette(app.palette()) and app.style().name() == style   # given back as found
        assert app.palette().color(QtGui.QPalette.ColorRole.Window) == palette.color(QtGui.QPalette.ColorRole.Window)
        assert window.timeline.backgroundBrush().color() == pg.mkColor(PLOT_COLORS[False][0])
    finally:
        apply_scheme(app, False, [window])
        pg.setConfigOptions(background="w", foreground="#222")
