"""The check before the window opens: one line and exit 2 instead of Qt's abort and core dump."""
import io
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.cli import main as cli
from backend.cli import display_check
from backend.cli.display_check import check_display, missing_libraries, platforms_dir, probe

ROOT = Path(__file__).resolve().parents[2]
NO_DISPLAY_LINE = ("error: no display to open the window on (DISPLAY and WAYLAND_DISPLAY are not set); on a machine "
                   "without a screen run QT_QPA_PLATFORM=offscreen python main.py, or use the sub-commands, which need "
                   "no window (python main.py --help)")
CURSOR_LINE = ("error: the window cannot open: Qt's xcb platform plugin needs libxcb-cursor.so.0, which is missing; "
               "install it with: sudo apt-get install libxcb-cursor0 (Debian/Ubuntu) or sudo dnf install "
               "xcb-util-cursor (Fedora)")


@pytest.fixture
def plugins(tmp_path):
    """A platforms folder with the plugin files the check looks for (their contents are never read here)."""
    folder = tmp_path / "platforms"
    folder.mkdir()
    for name in ("xcb", "wayland", "offscreen", "minimal"):
        (folder / f"libq{name}.so").write_bytes(b"")
    return folder


def never(*_):
    raise AssertionError("not to be asked on this platform")


def check(env, plugins, find_missing=lambda plugin: [], connect_x=lambda display: "", system="linux"):
    stream = io.StringIO()
    code = check_display(stream, env=env, system=system, find_missing=find_missing, connect_x=connect_x,
                         plugins_dir=plugins)
    return code, stream.getvalue()


def test_a_missing_xcb_library_is_one_line_naming_it_and_the_commands_that_install_it(plugins):
    asked = []

    def finder(plugin):
        asked.append(plugin.name)
        return ["libxcb-cursor.so.0"]
    code, text = check({"DISPLAY": ":0"}, plugins, finder)
    assert (code, text) == (2, CURSOR_LINE + "\n")
    assert asked == ["libqxcb.so"]


def test_only_the_missing_libraries_are_named_each_package_once(plugins):
    code, text = check({"DISPLAY": ":0"}, plugins,
                       lambda p: ["libxcb-icccm.so.4", "libxcb-randr.so.0", "libxcb-shape.so.0", "libEGL.so.1",
                                  "libxcb-randr.so.0", "libfoo.so.3"])
    assert code == 2 and text.count("\n") == 1
    assert text == ("error: the window cannot open: Qt's xcb platform plugin needs libxcb-icccm.so.4, "
                    "libxcb-randr.so.0, libxcb-shape.so.0, libEGL.so.1 and libfoo.so.3, which are missing; "
                    "install them with: sudo apt-get install libxcb-icccm4 libxcb-randr0 libxcb-shape0 libegl1 "
                    "(Debian/Ubuntu) or sudo dnf install xcb-util-wm libxcb mesa-libEGL (Fedora); find the package "
                    "that provides libfoo.so.3: apt-file search libfoo.so.3 (Debian/Ubuntu) or dnf provides "
                    "libfoo.so.3 (Fedora)\n")


def test_the_cli_exits_2_with_the_line_before_the_window_is_made(monkeypatch, capsys, plugins):
    for name in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY", "XDG_SESSION_TYPE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setattr(display_check, "platforms_dir", lambda: plugins)
    monkeypatch.setattr(display_check, "missing_libraries", lambda plugin: ["libxcb-cursor.so.0"])
    opened = []
    assert cli.main([], open_window=lambda **choices: opened.append(choices) or 0) == 2
    assert opened == []   # refused before the window (and Qt) was reached
    captured = capsys.readouterr()
    assert captured.err == CURSOR_LINE + "\n" and captured.out == ""


@pytest.mark.parametrize("env", [{}, {"XDG_SESSION_TYPE": "wayland"}, {"XDG_SESSION_TYPE": "x11"},
                                 {"QT_QPA_PLATFORM": "xcb"}, {"QT_QPA_PLATFORM": "wayland;xcb"}])
def test_no_display_at_all_suggests_offscreen_or_the_sub_commands(env, plugins):
    assert check(env, plugins, never, never) == (2, NO_DISPLAY_LINE + "\n")


@pytest.mark.parametrize("platform", ["offscreen", "minimal", "offscreen:enable_fonts", "vnc", "eglfs"])
def test_platforms_that_need_no_display_are_not_checked(platform, plugins):
    assert check({"QT_QPA_PLATFORM": platform}, plugins, never, never) == (0, "")


@pytest.mark.parametrize("system", ["darwin", "win32"])
def test_macos_and_windows_are_not_checked(system):
    assert check({}, None, never, never, system=system) == (0, "")


def test_wayland_with_its_display_checks_the_wayland_plugin_and_never_x(plugins):
    asked = []
    env = {"WAYLAND_DISPLAY": "wayland-0"}
    assert check(env, plugins, lambda p: asked.append(p.name) or [], never) == (0, "")
    assert asked == ["libqwayland.so"]
    # on a Wayland session whose plugin cannot load, Qt falls back to xcb: that is asked next
    assert check({**env, "DISPLAY": ":0"}, plugins, lambda p: ["libwayland-cursor.so.0"] if "wayland" in p.name
                 else [], lambda d: "") == (0, "")


def test_a_display_that_does_not_answer_is_named(plugins):
    code, text = check({"DISPLAY": ":7"}, plugins, connect_x=lambda d: "no X server answers there")
    assert code == 2 and text.startswith("error: cannot connect to the X display :7 (no X server answers there); ")
    assert "QT_QPA_PLATFORM=offscreen" in text and text.count("\n") == 1


def test_an_unknown_platform_is_named_with_the_ones_there_are(plugins):
    code, text = check({"QT_QPA_PLATFORM": "headless"}, plugins, never, never)
    assert (code, text) == (2, "error: QT_QPA_PLATFORM=headless names no Qt platform plugin (there are: minimal, "
                               "offscreen, wayland, xcb); set it to one of them, e.g. offscreen, or unset it\n")


def test_a_fault_in_the_check_lets_qt_try(plugins):
    def broken(plugin):
        raise RuntimeError("a bug")
    assert check({"DISPLAY": ":0"}, plugins, broken) == (0, "")


def test_without_ldd_each_known_library_is_tried_with_dlopen(monkeypatch, tmp_path):
    monkeypatch.setattr(display_check.shutil, "which", lambda name: None)
    monkeypatch.setattr(display_check, "_loads", lambda soname: soname != "libxcb-cursor.so.0")
    assert missing_libraries(tmp_path / "libqxcb.so") == ["libxcb-cursor.so.0"]


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("ldd") is None, reason="ldd is Linux's")
def test_ldd_names_a_library_the_real_plugin_cannot_find(tmp_path):
    """The real plugin, copied with one of its libraries renamed to one that exists nowhere."""
    real = platforms_dir() / "libqxcb.so"
    if not real.is_file():
        pytest.skip("PySide6 has no xcb plugin here")
    (tmp_path / "plugins" / "platforms").mkdir(parents=True)
    (tmp_path / "lib").symlink_to(real.parents[2] / "lib")   # its RUNPATH: $ORIGIN/../../lib
    data = real.read_bytes()
    assert data.count(b"libxcb-cursor.so.0\0") == 1
    copy = tmp_path / "plugins" / "platforms" / "libqxcb.so"
    copy.write_bytes(data.replace(b"libxcb-cursor.so.0\0", b"libxcb-cursor.so.9\0"))
    missing = missing_libraries(copy)
    assert "libxcb-cursor.so.9" in missing
    assert set(missing) - {"libxcb-cursor.so.9"} == set(missing_libraries(real))


def _env_without_display(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM", "XDG_SESSION_TYPE", "XDG_RUNTIME_DIR")}
    return {**env, **extra}


def _main(env, timeout=60):
    return subprocess.run([sys.executable, "main.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_main_without_a_display_prints_one_line_and_exits_2():
    proc = _main(_env_without_display())
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == NO_DISPLAY_LINE + "\n" and proc.stdout == ""
    assert "Traceback" not in proc.stderr and "Aborted" not in proc.stderr


def _xcb_ready() -> bool:
    folder = platforms_dir()
    return sys.platform.startswith("linux") and folder is not None and (folder / "libqxcb.so").is_file() \
        and not missing_libraries(folder / "libqxcb.so")


@pytest.mark.skipif(not _xcb_ready(), reason="needs Qt's xcb plugin with all its libraries")
def test_main_with_a_display_nobody_answers_prints_one_line_and_exits_2():
    number = next(n for n in range(12345, 12400) if not Path(f"/tmp/.X11-unix/X{n}").exists())
    proc = _main(_env_without_display(DISPLAY=f":{number}"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"error: cannot connect to the X display :{number} (")
    assert proc.stderr.count("\n") == 1
    assert "Aborted" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.skipif(not _xcb_ready() or shutil.which("Xvfb") is None, reason="needs Xvfb and Qt's xcb libraries")
def test_a_display_that_answers_passes_the_check():
    number = next(n for n in range(140, 200) if not Path(f"/tmp/.X11-unix/X{n}").exists())
    server = subprocess.Popen(["Xvfb", f":{number}", "-screen", "0", "640x480x24", "-nolisten", "tcp"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        socket = Path(f"/tmp/.X11-unix/X{number}")
        deadline = time.monotonic() + 20
        while not socket.exists() and time.monotonic() < deadline and server.poll() is None:
            time.sleep(0.05)
        if not socket.exists():
            pytest.skip("Xvfb did not start")
        status = probe(env={"DISPLAY": f":{number}"})
        assert status.ready, status.line()
        assert status.detail == f"xcb on DISPLAY=:{number}, its system libraries present"
    finally:
        server.terminate()
        server.wait(timeout=10)
