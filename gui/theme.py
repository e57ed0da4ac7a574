"""Light and dark palettes that follow the system's colour scheme (Qt 6.5+: QStyleHints.colorScheme,
and its colorSchemeChanged while the window is open), the plots' backgrounds, axes and titles too.

Where the platform theme already gives a dark palette for a dark scheme (KDE, GNOME with its Qt
theme, Windows 11), it is kept; where it does not (a bare X11 session, Fusion), a dark Fusion palette
is set. pyqtgraph draws on its own background: it is set on every plot on screen and, through
setConfigOptions, on the plots made later.
"""
from __future__ import annotations

import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

PLOT_COLORS = {False: ("w", "#222"), True: ("#1f2228", "#d4d4d4")}   # dark?: (background, foreground)
LIGHTNESS_DARK = 128   # a palette whose window colour is darker than this is a dark palette


def system_is_dark(app: QtGui.QGuiApplication) -> bool:
    return app.styleHints().colorScheme() == QtCore.Qt.ColorScheme.Dark


def is_dark_palette(palette: QtGui.QPalette) -> bool:
    return palette.color(QtGui.QPalette.ColorRole.Window).lightness() < LIGHTNESS_DARK


def dark_palette() -> QtGui.QPalette:
    """Fusion's dark palette: a dark window, light text, the selection in the decode phase's blue."""
    C, R, G = QtGui.QColor, QtGui.QPalette.ColorRole, QtGui.QPalette.ColorGroup
    p = QtGui.QPalette()
    for role, color in ((R.Window, "#2b2d31"), (R.WindowText, "#e0e0e0"), (R.Base, "#1f2228"),
                        (R.AlternateBase, "#2f3238"), (R.ToolTipBase, "#2f3238"), (R.ToolTipText, "#e0e0e0"),
                        (R.PlaceholderText, "#8a8a8a"), (R.Text, "#e0e0e0"), (R.Button, "#35383e"),
                        (R.ButtonText, "#e0e0e0"), (R.BrightText, "#ff6b6b"), (R.Link, "#6ea4ff"),
                        (R.Highlight, "#2f6fd6"), (R.HighlightedText, "#ffffff"), (R.Light, "#4a4d54"),
                        (R.Midlight, "#3c3f45"), (R.Mid, "#2a2c30"), (R.Dark, "#1a1b1e"), (R.Shadow, "#000000")):
        p.setColor(role, C(color))
    for role in (R.WindowText, R.Text, R.ButtonText):
        p.setColor(G.Disabled, role, C("#7a7a7a"))
    return p


_before_dark: dict = {}   # the style and palette found before a dark palette was set here: put back for light


def apply_scheme(app: QtWidgets.QApplication, dark: bool, roots=()) -> None:
    """Set the palette for a dark or light scheme, and restyle the plots under each of `roots`. The
    application's palette is set only to darken it (an explicitly set palette stops a platform
    theme's own updates), and given back when the scheme turns light."""
    if dark and not is_dark_palette(app.palette()):
        _before_dark.setdefault("style", app.style().name())
        _before_dark.setdefault("palette", QtGui.QPalette(app.palette()))
        app.setStyle("Fusion")   # the native styles ignore a palette in places; Fusion paints with it
        app.setPalette(dark_palette())
    elif not dark and _before_dark:
        app.setStyle(_before_dark.pop("style"))
        app.setPalette(_before_dark.pop("palette"))
    background, foreground = PLOT_COLORS[dark]
    pg.setConfigOptions(background=background, foreground=foreground)
    for root in roots:
        restyle_plots(root, dark)


def restyle_plots(root: QtWidgets.QWidget, dark: bool) -> None:
    background, foreground = PLOT_COLORS[dark]
    pen = pg.mkPen(foreground)
    for widget in root.findChildren(pg.PlotWidget):
        widget.setBackground(background)
        item = widget.getPlotItem()
        for axis in item.axes.values():
            axis["item"].setPen(pen)
            axis["item"].setTextPen(pen)
        if item.titleLabel.text:
            item.titleLabel.setText(item.titleLabel.text, color=foreground)


def follow_system(app: QtWidgets.QApplication, window: QtWidgets.QWidget) -> None:
    """Apply the system's scheme now, and again whenever it changes."""
    apply_scheme(app, system_is_dark(app), [window])
    app.styleHints().colorSchemeChanged.connect(
        lambda scheme: apply_scheme(app, scheme == QtCore.Qt.ColorScheme.Dark, [window]))
