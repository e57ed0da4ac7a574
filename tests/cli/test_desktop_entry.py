"""`phasescope --install-desktop-entry` / `--uninstall-desktop-entry` (gui/desktop_entry.py), into a
temporary XDG_DATA_HOME: the user's own applications menu is never touched."""
import configparser
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gui import desktop_entry
from gui.app import main as app_main
from gui.desktop_entry import entry_path, installed_icon_path, launch_command
from tests.cli.test_cli import main_in_process

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="freedesktop entries are Linux's")


def main_py(*args, env):
    return subprocess.run([sys.executable, str(ROOT / "main.py"), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def in_process(*args, monkeypatch, data_home):
    """main.py's entry point (gui.app.main) in this process: spares an interpreter start and its imports per call."""
    monkeypatch.setenv("XDG_DATA_HOME", str(data_home))
    return main_in_process(*args, entry=app_main)


def test_install_then_uninstall_from_main_py(tmp_path, monkeypatch):
    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "share"))
    done = main_py("--install-desktop-entry", env=env)
    assert done.returncode == 0, done.stderr
    entry = tmp_path / "share" / "applications" / "phasescope.desktop"
    icon = tmp_path / "share" / "icons" / "hicolor" / "scalable" / "apps" / "phasescope.svg"
    assert entry.is_file() and icon.is_file()
    assert str(entry) in done.stdout
    parsed = configparser.ConfigParser(interpolation=None)
    parsed.optionxform = str
    parsed.read(entry)
    desktop = parsed["Desktop Entry"]
    assert desktop["Type"] == "Application" and desktop["Icon"] == "phasescope" and desktop["Name"] == "phasescope"
    # it starts this interpreter on this checkout's main.py (the command that installed it)
    assert desktop["Exec"] == f"{sys.executable} {ROOT / 'main.py'}" or sys.executable in desktop["Exec"]
    assert icon.read_bytes() == desktop_entry.icon_path().read_bytes()
    assert icon.read_text().lstrip().startswith("<svg")

    done = main_py("--uninstall-desktop-entry", env=env)
    assert done.returncode == 0 and not entry.exists() and not icon.exists()
    done = in_process("--uninstall-desktop-entry", monkeypatch=monkeypatch, data_home=tmp_path / "share")
    assert done.returncode == 0 and "no desktop entry to remove" in done.stdout   # nothing left: said, not an error
    assert done.returncode == 0 and "no desktop entry to remove" in done.stdout


def test_the_flags_stand_alone(tmp_path, monkeypatch):
    share = tmp_path / "share"
    done = in_process("--install-desktop-entry", "models", monkeypatch=monkeypatch, data_home=share)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.count("\n") <= 3
    done = in_process("--install-desktop-entry", "--uninstall-desktop-entry", monkeypatch=monkeypatch, data_home=share)
    assert done.returncode == 2 and "not allowed with" in done.stderr
    assert not (tmp_path / "share").exists()


def test_an_unwritable_place_is_one_line(tmp_path, monkeypatch):
    blocker = tmp_path / "share"
    blocker.write_text("a file where the folder should be")
    done = in_process("--install-desktop-entry", monkeypatch=monkeypatch, data_home=blocker)
    assert done.returncode == 2 and done.stderr.startswith("error: cannot install the desktop entry")
    assert "Traceback" not in done.stderr


def test_the_installed_command_is_what_the_entry_runs(tmp_path, monkeypatch):
    script = tmp_path / "bin dir" / "phasescope"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    assert launch_command(str(script)) == f'"{script}"'   # quoted: its folder has a space
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert entry_path() == tmp_path / "xdg" / "applications" / "phasescope.desktop"
    assert installed_icon_path().parent == tmp_path / "xdg" / "icons" / "hicolor" / "scalable" / "apps"
