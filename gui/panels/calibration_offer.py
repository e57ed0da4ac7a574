"""The first start's offer to calibrate: a banner over the central views, never a dialog.

Until this machine has a calibrated profile, the roofline prices steps with the generic CPU's
(or a datasheet's) figures, which can sit several times above what this machine measures. A
calibration takes seconds, so the window offers it where it is seen but in nobody's way: a
modal dialog would stop `--autostart` and every test that opens a window. The offer goes away
once calibrated, or for good when declined (remembered in the window's settings); the Profile
box's Calibrate… and Run › Calibrate this machine… stay for later.
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


class CalibrationOffer(QtWidgets.QFrame):
    """"This machine is not calibrated… [Calibrate now] [No thanks]"."""

    calibrateRequested = QtCore.Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("calibrationOffer")
        self.setFrameShape(QtWidgets.QFrame.Shape.StyledPanel)
        self.label = QtWidgets.QLabel(
            "This machine has no calibrated profile: the roofline uses generic figures. Calibrating measures its "
            "FLOP/s and memory bandwidth in about 15 seconds.")
        self.label.setWordWrap(True)   # at 200% scaling or on a narrow window it takes two lines, never clips
        self.calibrate_button = QtWidgets.QPushButton("Calibrate now")
        self.calibrate_button.setObjectName("calibrateOfferButton")
        self.calibrate_button.setToolTip("Measure this machine into the profile 'this-machine' and select it "
                                         "(`calibrate`); runs go on meanwhile")
        self.decline_button = QtWidgets.QPushButton("No thanks")
        self.decline_button.setObjectName("declineCalibrationButton")
        self.decline_button.setToolTip("Not asked again; Run › Calibrate this machine… does it later")
        row = QtWidgets.QHBoxLayout(self)
        row.setContentsMargins(8, 4, 8, 4)
        row.addWidget(self.label, 1)
        row.addWidget(self.calibrate_button)
        row.addWidget(self.decline_button)
        self.calibrate_button.clicked.connect(self.calibrateRequested)
        self.decline_button.clicked.connect(self.decline)
        self.hide()   # until placed: refresh() shows it where there is something to offer

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
