"""`phasescope --install-desktop-entry`: the window in the desktop's application menu (Linux).

Writes $XDG_DATA_HOME/applications/phasescope.desktop and the icon into
$XDG_DATA_HOME/icons/hicolor/scalable/apps/phasescope.svg (XDG_DATA_HOME: else ~/.local/share),
the per-user places every freedesktop desktop (GNOME, KDE, Xfce, ...) reads; `--uninstall-desktop-entry`
removes both. The entry starts the command that installed it: the `phasescope` script (a pipx or
pip install), else this interpreter on this checkout's main.py. No Qt here: it runs headless.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

from backend.errors import InputError
from backend.files import data_home

APP_ID = "phasescope"
ICON = Path(__file__).resolve().parent / "icons" / "phasescope.svg"   # package data (pyproject.toml)
ENTRY = """[Desktop Entry]
Type=Application
Version=1.5
Name=phasescope
GenericName=LLM inference visualizer
Comment=See prefill and decode, measured on your own hardware
Exec={exec}
Icon={icon}
Terminal=false
Categories=Development;Science;Education;
Keywords=LLM;inference;prefill;decode;roofline;benchmark;
StartupWMClass=phasescope
"""


def icon_path() -> Path:
    """The shipped icon (the window's too)."""
    return ICON


def entry_path() -> Path:
    return data_home() / "applications" / f"{APP_ID}.desktop"


def installed_icon_path() -> Path:
    return data_home() / "icons" / "hicolor" / "scalable" / "apps" / f"{APP_ID}.svg"


def launch_command(argv0: str | None = None) -> str:
    """The Exec line: what runs now (the installed `phasescope` command, or this interpreter on a
    checkout's main.py), else the `phasescope` on the PATH, else `python -m gui.app`. Quoted as the
    desktop entry specification asks."""
    argv0 = argv0 if argv0 is not None else sys.argv[0]
    here = Path(argv0)
    if here.name == APP_ID and here.is_file():
        command = [str(here.resolve())]
    elif here.name == "main.py" and here.is_file():
        command = [sys.executable, str(here.resolve())]
    elif shutil.which(APP_ID):
        command = [shutil.which(APP_ID)]
    else:
        command = [sys.executable, "-m", "gui.app"]
    return " ".join(_quote(part) for part in command)


def _quote(arg: str) -> str:
    if arg and all(c.isalnum() or c in "/._-+" for c in arg):
        return arg
    escaped = "".join("\\" + c if c in '"`$\\' else c for c in arg)
    return f'"{escaped}"'


def install(argv0: str | None = None) -> tuple[Path, Path]:
    """Write the entry and the icon; (entry, icon). InputError on a platform without them or a failed write."""
    _check_platform()
    entry, icon = entry_path(), installed_icon_path()
    try:
        icon.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ICON, icon)
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.write_text(ENTRY.format(exec=launch_command(argv0), icon=APP_ID), encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot install the desktop entry under {data_home()}: {exc.strerror or exc}") from None
    return entry, icon


def uninstall() -> list[Path]:
    """Remove the entry and the icon; the files removed (none when they were not there)."""
    _check_platform()
    removed = []
    for path in (entry_path(), installed_icon_path()):
        if path.is_file():
            try:
                path.unlink()
            except OSError as exc:
                raise InputError(f"cannot remove {path}: {exc.strerror or exc}") from None
            removed.append(path)
    return removed


def _check_platform() -> None:
    if not sys.platform.startswith(("linux", "freebsd", "openbsd", "netbsd")):
        raise InputError("desktop entries are a Linux (freedesktop) feature; on this system start "
                         "the window with the phasescope command")


def run(install_it: bool) -> int:
    """The flag's work: one line on success; InputError (exit 2) is the CLI's to print."""
    if install_it:
        entry, icon = install()
        print(f"installed {entry} and {icon}: phasescope is in the applications menu "
              f"(runs: {launch_command()})")
    else:
        removed = uninstall()
        print("removed " + " and ".join(str(p) for p in removed) if removed else
              f"no desktop entry to remove ({entry_path()} does not exist)")
    return 0

