"""Can Qt open a window here? Asked before the window is created, without loading Qt.

When Qt's platform plugin cannot load (PySide6 >= 6.5 needs libxcb-cursor0 and other xcb
libraries that a plain Linux install lacks) or cannot reach a display, Qt calls qFatal: the
process aborts with a core dump and its hint is buried above. That cannot be caught, so this
module asks the same questions first, from outside Qt: which platform Qt will pick (the rules
of QGuiApplication: QT_QPA_PLATFORM, else wayland when WAYLAND_DISPLAY or XDG_SESSION_TYPE says
so, with xcb as the fallback), whether that plugin's shared libraries are all present (ldd of
the plugin in PySide6's Qt/plugins/platforms folder lists the missing ones precisely), and for
xcb whether the X server answers (libxcb's own xcb_connect). It takes a few milliseconds.

No Qt import here (backend/ never imports Qt): PySide6 is found with importlib, not imported.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

# soname -> (Debian/Ubuntu package, Fedora package): what Qt's xcb and wayland plugins and
# Qt Gui itself link against, outside what PySide6 bundles.
PACKAGES: dict[str, tuple[str, str]] = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-xinerama.so.0": ("libxcb-xinerama0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libX11.so.6": ("libx11-6", "libX11"),
    "libXau.so.6": ("libxau6", "libXau"),
    "libXdmcp.so.6": ("libxdmcp6", "libXdmcp"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libEGL.so.1": ("libegl1", "mesa-libEGL"),
    "libGL.so.1": ("libgl1", "mesa-libGL"),
    "libGLX.so.0": ("libglx0", "libglvnd-glx"),
    "libGLdispatch.so.0": ("libglvnd0", "libglvnd"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libwayland-client.so.0": ("libwayland-client0", "libwayland-client"),
    "libwayland-cursor.so.0": ("libwayland-cursor0", "libwayland-cursor"),
    "libexpat.so.1": ("libexpat1", "expat"),
    "libpng16.so.16": ("libpng16-16", "libpng"),
    "libz.so.1": ("zlib1g", "zlib"),
    "libzstd.so.1": ("libzstd1", "libzstd"),
}
# Platforms that draw into memory, a framebuffer or a VNC client: no display server needed.
NO_DISPLAY_PLATFORMS = {"offscreen", "minimal", "minimalegl", "vnc", "linuxfb", "eglfs", "vkkhrdisplay"}
NO_WINDOW_HINT = "or use the sub-commands, which need no window (python main.py --help)"
HEADLESS_HINT = f"on a machine without a screen run QT_QPA_PLATFORM=offscreen python main.py, {NO_WINDOW_HINT}"
CONNECT_TIMEOUT_S = 3.0

MissingFinder = Callable[[Path], list[str]]   # a plugin file -> the sonames it needs that cannot be found
Connector = Callable[[str], str]               # an X display name -> '' if it answers, else why not


@dataclass(slots=True, frozen=True)
class DisplayStatus:
    platform: str       # the Qt platform that will be used (or was tried), e.g. "xcb", "offscreen"
    ready: bool
    detail: str         # in words: what was found
    fix: str = ""       # what to do, when not ready
    missing: tuple[str, ...] = ()   # the system libraries that are missing (sonames)

    def line(self) -> str:
        """The one line printed on stderr when the window cannot open."""
        return f"error: {self.detail}; {self.fix}"


def check_display(stream=None, **probe_args) -> int:
    """0 when the window can open here; else print one line on `stream` (stderr) and give 2."""
    try:
        status = probe(**probe_args)
    except Exception:   # a fault in this check must not keep a working window from opening: let Qt try
        return 0
    if status.ready:
        return 0
    print(status.line(), file=stream or sys.stderr)
    return 2


def probe(env: Mapping[str, str] | None = None, system: str | None = None,
          find_missing: MissingFinder | None = None, connect_x: Connector | None = None,
          plugins_dir: Path | None = None) -> DisplayStatus:
    """What Qt will find when the window opens; every outside question can be injected for tests."""
    env = os.environ if env is None else env
    system = sys.platform if system is None else system
    find_missing = find_missing or missing_libraries
    connect_x = connect_x or connect_to_x
    if not system.startswith("linux"):
        return DisplayStatus({"darwin": "cocoa", "win32": "windows"}.get(system, system), True,
                             "the system's own window platform")
    if plugins_dir is None:
        plugins_dir = platforms_dir()
        if plugins_dir is None:
            return DisplayStatus("none", False, "PySide6 is not installed",
                                 "install the app with: pip install -e . (make run does it), " + NO_WINDOW_HINT)
    names = _candidates(env)
    statuses = []
    for name in names:   # Qt tries each in turn and takes the first that loads
        status = _probe_one(name, env, find_missing, connect_x, plugins_dir)
        if status.ready:
            return status
        statuses.append(status)
    for status in statuses:   # none can: missing libraries are the thing to fix first
        if status.missing:
            return status
    return statuses[-1]


def _candidates(env: Mapping[str, str]) -> list[str]:
    """The platforms Qt tries, in order (QGuiApplicationPrivate::createPlatformIntegration)."""
    wanted = env.get("QT_QPA_PLATFORM", "").strip()
    if wanted:
        names = [part.split(":", 1)[0].strip().lower() for part in wanted.split(";")]
        return [n for n in names if n] or ["xcb"]
    if env.get("WAYLAND_DISPLAY") or env.get("XDG_SESSION_TYPE", "").lower() == "wayland":
        return ["wayland", "xcb"]
    return ["xcb"]


def _no_display(env: Mapping[str, str], platform: str) -> DisplayStatus:
    if not env.get("DISPLAY") and not env.get("WAYLAND_DISPLAY"):
        why = "DISPLAY and WAYLAND_DISPLAY are not set"
    else:
        why = ("DISPLAY" if platform == "xcb" else "WAYLAND_DISPLAY") + " is not set"
    return DisplayStatus(platform, False, f"no display to open the window on ({why})", HEADLESS_HINT)


def _probe_one(name: str, env: Mapping[str, str], find_missing: MissingFinder, connect_x: Connector,
               plugins_dir: Path) -> DisplayStatus:
    from_env = " (QT_QPA_PLATFORM)" if env.get("QT_QPA_PLATFORM", "").strip() else ""
    if name in NO_DISPLAY_PLATFORMS:
        return DisplayStatus(name, True, f"{name}{from_env}: needs no display")
    if name == "xcb":
        display = env.get("DISPLAY", "")
        if not display:
            return _no_display(env, "xcb")
        plugin = plugins_dir / "libqxcb.so"
    elif name.startswith("wayland"):
        runtime = env.get("XDG_RUNTIME_DIR", "")
        display = env.get("WAYLAND_DISPLAY", "")
        if not display and not (runtime and (Path(runtime) / "wayland-0").exists()):
            return _no_display(env, "wayland")
        plugin = plugins_dir / "libqwayland.so"
    else:
        plugin = plugins_dir / f"libq{name}.so"
        if not plugin.is_file() and not env.get("QT_PLUGIN_PATH") and not env.get("QT_QPA_PLATFORM_PLUGIN_PATH"):
            known = sorted(p.name[4:-3] for p in plugins_dir.glob("libq*.so"))
            return DisplayStatus(name, False, f"QT_QPA_PLATFORM={name} names no Qt platform plugin "
                                 f"(there are: {', '.join(known)})",
                                 "set it to one of them, e.g. offscreen, or unset it")
        return DisplayStatus(name, True, f"{name}{from_env}")
    if not plugin.is_file():
        return DisplayStatus(name, False, f"Qt's {name} platform plugin is missing from PySide6 ({plugin.name})",
                             "reinstall it: pip install --force-reinstall PySide6, " + NO_WINDOW_HINT)
    missing = find_missing(plugin)
    if missing:
        return _missing_libraries(name, missing)
    where = f"DISPLAY={display}" if name == "xcb" else f"WAYLAND_DISPLAY={display or 'wayland-0'}"
    if name == "xcb":
        why = connect_x(display)
        if why:
            return DisplayStatus(name, False, f"cannot connect to the X display {display} ({why})",
                                 "check that the X server runs and lets this user in (XAUTHORITY; over ssh, "
                                 f"ssh -X); {HEADLESS_HINT}")
    return DisplayStatus(name, True, f"{name}{from_env} on {where}, its system libraries present")


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _missing_libraries(platform: str, missing: list[str]) -> DisplayStatus:
    missing = list(dict.fromkeys(missing))
    known = [s for s in missing if s in PACKAGES]
    unknown = [s for s in missing if s not in PACKAGES]
    it = "it" if len(missing) == 1 else "them"
    detail = (f"the window cannot open: Qt's {platform} platform plugin needs {_and(missing)}, "
              f"which {'is' if len(missing) == 1 else 'are'} missing")
    fixes = []
    if known:
        debian = " ".join(dict.fromkeys(PACKAGES[s][0] for s in known))
        fedora = " ".join(dict.fromkeys(PACKAGES[s][1] for s in known))
        fixes.append(f"install {it} with: sudo apt-get install {debian} (Debian/Ubuntu) "
                     f"or sudo dnf install {fedora} (Fedora)")
    if unknown:
        names = " ".join(unknown)
        fixes.append(f"find the package that provides {_and(unknown)}: apt-file search {names} (Debian/Ubuntu) "
                     f"or dnf provides {names} (Fedora)")
    return DisplayStatus(platform, False, detail, "; ".join(fixes), tuple(missing))


def platforms_dir() -> Path | None:
    """PySide6's Qt/plugins/platforms folder, found without importing PySide6 (None if not installed).

    Qt always looks there (QT_QPA_PLATFORM_PLUGIN_PATH only adds a folder before it).
    """
    try:
        spec = importlib.util.find_spec("PySide6")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "Qt" / "plugins" / "platforms"


_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found", re.MULTILINE)


def missing_libraries(plugin: Path) -> list[str]:
    """The shared libraries `plugin` needs, directly or through another, that the loader cannot find.

    ldd names them exactly ("libxcb-cursor.so.0 => not found"); without ldd, each known library
    is tried with dlopen instead.
    """
    ldd = shutil.which("ldd")
    if ldd:
        try:
            done = subprocess.run([ldd, str(plugin)], capture_output=True, text=True, timeout=10)
            if done.returncode == 0 or "not found" in done.stdout:
                return _NOT_FOUND.findall(done.stdout)
        except (OSError, subprocess.SubprocessError):
            pass
    return [name for name in _needed_sonames(plugin) if not _loads(name)]


def _needed_sonames(plugin: Path) -> list[str]:
    if plugin.name == "libqwayland.so":
        return ["libwayland-client.so.0", "libwayland-cursor.so.0", "libxkbcommon.so.0", "libGL.so.1",
                "libEGL.so.1", "libfontconfig.so.1", "libdbus-1.so.3", "libglib-2.0.so.0"]
    return [s for s in PACKAGES if not s.startswith(("libwayland", "libxcb-xinerama"))]


def _loads(soname: str) -> bool:
    try:
        ctypes.CDLL(soname)
        return True
    except OSError:
        return False


def connect_to_x(display: str) -> str:
    """'' when the X server at `display` accepts a connection (libxcb's xcb_connect), else why not."""
    try:
        xcb = ctypes.CDLL("libxcb.so.1")
    except OSError:
        return ""   # the library check names it; nothing more to ask here
    xcb.xcb_connect.restype = ctypes.c_void_p
    xcb.xcb_connect.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    xcb.xcb_connection_has_error.restype = ctypes.c_int
    xcb.xcb_connection_has_error.argtypes = [ctypes.c_void_p]
    xcb.xcb_disconnect.argtypes = [ctypes.c_void_p]
    answer: list[int] = []

    def attempt() -> None:
        conn = xcb.xcb_connect(display.encode(), None)
        answer.append(xcb.xcb_connection_has_error(conn) if conn else 1)
        if conn:
            xcb.xcb_disconnect(conn)
    thread = threading.Thread(target=attempt, daemon=True, name="x-display-probe")
    thread.start()
    thread.join(CONNECT_TIMEOUT_S)
    if not answer:
        return ""   # slow to answer (a remote display): let Qt try it
    if answer[0] == 0:
        return ""
    return {1: "no X server answers there, or it refused this user", 2: "an X extension is not supported",
            3: "out of memory", 4: "request too long", 5: "the display name cannot be parsed",
            6: "no such screen on that display"}.get(answer[0], f"xcb error {answer[0]}")
