"""The first start's offer to calibrate: a line in the menu bar's empty right end, never a dialog.

Until this machine has a calibrated profile, the roofline prices steps with the generic CPU's
(or a datasheet's) figures, which can sit several times above what this machine measures. A
calibration takes seconds, so the window offers it where it is seen but in nobody's way: a
modal dialog would stop `--autostart` and every test that opens a window, and a banner over the
views took their height (on a 1,366 x 768 screen the throughput plot fell under a third of the
window). The offer goes away once calibrated, or for good when declined (remembered in the
window's settings); the Profile box's Calibrate… and Run › Calibrate this machine… stay for later.
"""
from __future__ import annotations

from PySide6 import QtCore, QtWidgets

from backend.roofline.profiles import local_profile_path

from gui.settings import open_settings

DECLINED_KEY = "calibration/declined"


def is_declined() -> bool:
    value = open_settings().value(DECLINED_KEY, False)
    return value is True or str(value).lower() == "true"


def remember_declined() -> None:
    s = open_settings()
    s.setValue(DECLINED_KEY, True)
    s.sync()


def should_offer() -> bool:
    """No calibrated profile for this machine, and the offer not declined before."""
    return not local_profile_path().is_file() and not is_declined()


class CalibrationOffer(QtWidgets.QWidget):
    """"Not calibrated: the roofline uses generic figures. [Calibrate (15 s)] [No thanks]"."""

    calibrateRequested = QtCore.Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("calibrationOffer")
        self.setToolTip("This machine has no calibrated profile, so the roofline prices steps with a generic "
                        "CPU's (or a datasheet's) figures. Calibrating measures its FLOP/s and memory bandwidth "
                        "in about 15 seconds and selects the profile 'this machine'; runs wait meanwhile.")
        self.label = QtWidgets.QLabel("Not calibrated: the roofline uses generic figures.")
        # tool buttons, flat until pointed at: as tall as the menus' text, so the menu bar keeps its height
        self.calibrate_button = self._button("Calibrate (15 s)", "calibrateOfferButton")
        self.decline_button = self._button("No thanks", "declineCalibrationButton")
        self.decline_button.setToolTip("Not asked again; Run › Calibrate this machine… does it later")
        row = QtWidgets.QHBoxLayout(self)
        row.setContentsMargins(0, 0, 6, 0)
        row.addWidget(self.label)
        row.addWidget(self.calibrate_button)
        row.addWidget(self.decline_button)
        self.calibrate_button.clicked.connect(self.calibrateRequested)
        self.decline_button.clicked.connect(self.decline)
        self.hide()   # until placed: refresh() shows it where there is something to offer

    @staticmethod
    def _button(text: str, name: str) -> QtWidgets.QToolButton:
        button = QtWidgets.QToolButton()
        button.setText(text)
        button.setObjectName(name)
        button.setAutoRaise(True)
        font = button.font()
        font.setBold(True)
        button.setFont(font)
        return button

    def refresh(self) -> None:
        self.setVisible(should_offer())

    def decline(self) -> None:
        remember_declined()
        self.hide()

    def set_running(self, running: bool) -> None:
        """A run or a calibration holds the engine: the offer waits for it."""
        self.calibrate_button.setEnabled(not running)

    def calibrated(self) -> None:
        self.hide()


def place_offer(window: QtWidgets.QMainWindow, offer: CalibrationOffer) -> None:
    """In the menu bar's right corner; where the menus are the system's (macOS), whose bar has no corner for
    it, at the status bar's left end instead."""
    bar = window.menuBar()
    if bar.isNativeMenuBar():
        window.statusBar().insertPermanentWidget(0, offer)
    else:
        bar.setCornerWidget(offer, QtCore.Qt.Corner.TopRightCorner)
    offer.refresh()
