"""The program's start, shared by `python main.py` and the installed `phasescope` command.

The environment is set here, before anything imports torch: idle OpenMP threads sleep instead
of spinning (with a GUI thread or other work sharing the cores, spinning threads made a CPU
decode step ~4x slower: 57 ms -> 250 ms on 2 cores). Sub-commands run headless in backend.cli;
with none, the window opens. Qt is imported only then, so a headless run never loads it.
"""
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def start_engine(model: str | None = None):
    """The window's engine process, started before anything of the window's is imported (Qt,
    pyqtgraph, torch: two seconds), with the model the window will ask for loading in it
    (backend/engine/preload.py): the two processes' starts overlap instead of following each other."""
    from backend.engine import preload
    from backend.engine.process import EngineProcess
    engine = EngineProcess()
    config = preload.recall(model)
    engine.start() if config is None else engine.warm(config)
    return engine


def open_window(model: str | None = None, profile: str | None = None, autostart: bool = False,
                threads: int | None = None) -> int:
    engine = start_engine(model)
    try:
        from gui.main_window import run_app
    except BaseException:
        engine.close()   # the window cannot open: no engine process outlives its start
        raise
    return run_app(model=model, profile=profile, autostart=autostart, threads=threads, engine=engine)


def render_plots(plots, folder):
    """compare --out's PNGs, drawn with the window's libraries (imported only when asked)."""
    from gui.views.plot_export import render_plots as render
    return render(plots, folder)


def desktop_entry(install: bool) -> int:
    """--install-desktop-entry / --uninstall-desktop-entry (gui/desktop_entry.py; no Qt)."""
    from gui.desktop_entry import run
    return run(install)


def main(argv: list[str] | None = None) -> int:
    """Run the window (no sub-command) or a sub-command; the exit status."""
    from backend.cli.main import main as cli_main
    return cli_main(sys.argv[1:] if argv is None else argv, open_window=open_window, render_plots=render_plots,
                    desktop_entry=desktop_entry)


if __name__ == "__main__":   # `python -m gui.app`, as a desktop entry without the phasescope script starts it
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())
