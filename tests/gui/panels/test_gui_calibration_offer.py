"""The first start offers calibration in a banner; once calibrated the profile list selects this machine;
declined, it is not offered again. Real windows, real (quick) calibrations written by the real code
into the test's own configuration folder (the config_dir fixture)."""
from __future__ import annotations

from functools import partial

import pytest
from PySide6 import QtCore

from backend.roofline.calibrate import calibrate, write_profile
from backend.roofline.profiles import LOCAL_KEY, local_profile_path
from gui.main_window import MainWindow
from gui.worker import RunWorker


def no_run(config, emit, should_stop):
    raise AssertionError("these tests start no run")


def open_window(qtbot, worker=None) -> MainWindow:
    # by default a worker without an engine process: the offer is the window's, and an engine process
    # started ahead for the bundled model would only be ended again as the window closes
    w = MainWindow(worker=worker or RunWorker(run=no_run))
    qtbot.addWidget(w)
    w.show()
    return w


@pytest.fixture(scope="module")
def quick_profile():
    """One real quick calibration of this CPU, shared by the tests that need a calibrated machine."""
    return calibrate("cpu", quick=True)


def test_a_first_start_offers_calibration_without_blocking(qtbot):
    assert not local_profile_path().is_file()
    w = open_window(qtbot)
    assert w.calibration_offer.isVisible()
    assert w.controls.profile_combo.currentData() != LOCAL_KEY
    assert w.controls.run_button.isEnabled()   # a banner, not a dialog: Run (and --autostart) go on


def test_a_calibrated_machine_selects_its_own_profile_and_is_not_asked(qtbot, quick_profile):
    write_profile(quick_profile)   # where the window's own calibration writes it
    w = open_window(qtbot)
    assert not w.calibration_offer.isVisible()
    assert w.controls.profile_combo.currentData() == LOCAL_KEY
    assert w.controls.profile_combo.currentText().endswith("(measured)")


def test_calibrating_from_the_offer_selects_this_machine(qtbot):
    w = open_window(qtbot, RunWorker(measure=partial(calibrate, quick=True)))
    assert w.calibration_offer.isVisible()
    qtbot.mouseClick(w.calibration_offer.calibrate_button, QtCore.Qt.MouseButton.LeftButton)
    assert w.running and not w.calibration_offer.calibrate_button.isEnabled()
    qtbot.waitUntil(lambda: not w.running, timeout=60_000)
    assert local_profile_path().is_file()
    assert not w.calibration_offer.isVisible()
    assert w.controls.profile_combo.currentData() == LOCAL_KEY


def test_a_declined_offer_is_remembered(qtbot):
    w = open_window(qtbot)
    qtbot.mouseClick(w.calibration_offer.decline_button, QtCore.Qt.MouseButton.LeftButton)
    assert not w.calibration_offer.isVisible()
    w.close()
    again = open_window(qtbot)
    assert not again.calibration_offer.isVisible()
    assert not local_profile_path().is_file()
