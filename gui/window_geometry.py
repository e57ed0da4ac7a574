"""Where the window opens: on the first start most of the screen it opens on, later where it was
left unless that no longer fits the screen (a laptop unplugged from its monitor, a resolution
lowered since).

A fixed first size (it was 1,400 x 900) ran off a 1,366 x 768 laptop screen and left a third of a
1,920 x 1,080 one unused; the window's pictures need the room. Small screens start maximised,
where a window manager honours it; the geometry set here is what remains without one (Xvfb, some
tiling setups), so it alone must fit.
"""
from __future__ import annotations

from PySide6 import QtCore, QtGui, QtWidgets

SHARE = 0.96          # of the available width and height: at least 90% of the screen, a margin to grab it by
TITLE_BAR = 32        # room left above the client area for a window manager's title bar
MAXIMISE_BELOW = 1000  # available heights under this start maximised: every row counts there


def first_geometry(available: QtCore.QRect) -> QtCore.QRect:
    """The client area for a first start on a screen of this available geometry, centred."""
    width = round(available.width() * SHARE)
    height = round(available.height() * SHARE) - TITLE_BAR
    x = available.x() + (available.width() - width) // 2
    y = available.y() + (available.height() - height - TITLE_BAR) // 2 + TITLE_BAR
    return QtCore.QRect(x, y, width, height)


def fits(geometry: QtCore.QRect, available: QtCore.QRect) -> bool:
    """A restored client area lies wholly on the available screen."""
    return available.contains(geometry)


def available_for(window: QtWidgets.QWidget) -> QtCore.QRect:
    """The available geometry of the screen under the window's centre, else the primary screen's."""
    screen = QtGui.QGuiApplication.screenAt(window.geometry().center()) or QtGui.QGuiApplication.primaryScreen()
    return screen.availableGeometry()


def place_first(window: QtWidgets.QWidget) -> None:
    """Most of the available screen, centred; marks a small screen's window to be shown maximised."""
    available = QtGui.QGuiApplication.primaryScreen().availableGeometry()
    window.setGeometry(first_geometry(available))
    window.maximise_at_start = available.height() < MAXIMISE_BELOW


def keep_on_screen(window: QtWidgets.QWidget) -> bool:
    """After restoreGeometry: a saved geometry that no longer fits its screen gives way to a first
    start's (True when it did)."""
    if window.isMaximized() or window.isFullScreen():   # shown so on whatever screen is there
        return False
    if fits(window.geometry(), available_for(window)):
        return False
    place_first(window)
    return True
