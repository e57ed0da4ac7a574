"""The command line: sub-commands run headless; with none, the window opens (through the
`open_window` the program's start passes in: backend never imports the gui).

Exit status: 0 success, 1 a failure during the run, 2 bad input, 130 stopped by Ctrl+C.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Callable

from backend.cli import report
from backend.cli.flags import Parser, common_config, kv_flags, model_flags, positive_int, simulate_flag
from backend.config import BatchRun, EngineConfig, RunConfig, RunKind
from backend.errors import InputError, RunError
from backend.results.plots import RenderPlots


def build_parser() -> argparse.ArgumentParser:
    # "main.py" from a checkout, "phasescope" from the installed command
    prog = "phasescope" if Path(sys.argv[0]).name == "phasescope" else "main.py"
    parser = Parser(prog=prog, description="See prefill and decode, measured on your hardware. "
                     "With no sub-command, opens the window.")
    parser.add_argument("--model", help="(window) model to select")
    parser.add_argument("--profile", help="(window) GPU profile to select")
    parser.add_argument("--autostart", action="store_true", help="(window) start a run as soon as it opens")
    parser.add_argument("--threads", dest="window_threads", type=positive_int,
                        help="(window) the engine's CPU threads (default: the cores the window does not need)")
    entry = parser.add_mutually_exclusive_group()
    entry.add_argument("--install-desktop-entry", action="store_true",
                       help="(Linux) add the window to the desktop's applications menu, with its icon, and exit")
    entry.add_argument("--uninstall-desktop-entry", action="store_true",
                       help="(Linux) remove that entry and icon, and exit")
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", help="one batch: one prefill pass, then one decode step per token")
    model_flags(run)
    run.add_argument("--prompt", help="prompt text (every request in the batch gets it)")
    run.add_argument("--prompt-len", type=positive_int, default=128, help="synthetic prompt tokens when no --prompt")
    run.add_argument("--chat", action="store_true", help="apply the model's chat template to --prompt")
    run.add_argument("--output-len", type=positive_int, default=64)
    run.add_argument("--batch", type=positive_int, default=1)
    kv_flags(run)
    from backend.cli.flags import spec_flags
    spec_flags(run)
    simulate_flag(run)

    from backend.cli.load import add_load_parser
    add_load_parser(sub, model_flags)

    models = sub.add_parser("models", help="list the known models: sizes and where each comes from")
    models.add_argument("--local", action="store_true",
                        help="the models already on this disk: the Hugging Face cache, LM Studio, Ollama, llama.cpp's "
                        "cache and the folders added with --add-folder; whether each runs here, and if not why")
    models.add_argument("--add-folder", metavar="DIR", help="remember DIR as a place to look for models (with --local)")
    sub.add_parser("doctor", help="check this machine: Python, torch and its devices, C kernels, Qt and the "
                   "display, the bundled model, the GPU profile (exit 1 if the window cannot run)")
    from backend.cli.tools import add_tool_parsers
    add_tool_parsers(sub, model_flags)
    from backend.cli.compare import add_compare_parser
    add_compare_parser(sub)
    from backend.cli.example import add_example_parser
    add_example_parser(sub)
    from backend.cli.plan import add_plan_parser
    add_plan_parser(sub)
    from backend.cli.import_results import add_import_parser
    add_import_parser(sub)
    return parser


def main(argv: list[str] | None = None, open_window: Callable[..., int] | None = None,
         render_plots: RenderPlots | None = None, desktop_entry: Callable[[bool], int] | None = None) -> int:
    """The exit status. `open_window(model=, profile=, autostart=)` opens the window when no
    sub-command is given (gui.app passes it; without it, that is a usage error).
    `desktop_entry(install)` does --install-desktop-entry / --uninstall-desktop-entry (gui.app passes it).
    `render_plots(plots, folder) -> written paths` draws `compare --out`'s PNGs (backend.results.plots:
    the window's libraries draw them; without it, compare writes its CSV only and says so)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.install_desktop_entry or args.uninstall_desktop_entry:
            if desktop_entry is None or args.command is not None:
                parser.error("--install-desktop-entry and --uninstall-desktop-entry stand alone "
                             "(from main.py or the phasescope command)")
            return desktop_entry(args.install_desktop_entry)
        if args.command is None:
            if open_window is None:
                parser.error("give a sub-command (the window opens from main.py or the phasescope command)")
            from backend.cli.display_check import check_display
            if check_display():   # before Qt loads: a missing library or display would abort the process
                return 2
            return open_window(model=args.model, profile=args.profile, autostart=args.autostart,
                               threads=args.window_threads)
        if args.command == "models":
            return report.print_local_models(args.add_folder) if args.local or args.add_folder else report.print_models()
        if args.command == "doctor":
            from backend.cli.doctor import run_doctor
            return run_doctor()
        if args.command == "run":
            return run_headless(run_config(args))
        if args.command == "load":
            from backend.cli.load import load_config
            return run_headless(load_config(args), definitions=args.definitions)
        if args.command == "profiles":
            from backend.cli.tools import print_profiles
            return print_profiles()
        if args.command == "calibrate":
            from backend.cli.tools import run_calibrate
            return run_calibrate(args)
        if args.command == "sweep":
            from backend.cli.tools import sweep_config
            return run_headless(sweep_config(args))
        if args.command == "example":
            from backend.cli.example import run_example
            return run_example(args)
        if args.command == "compare":
            from backend.cli.compare import run_compare
            return run_compare(args, render_plots)
        if args.command == "plan":
            from backend.cli.plan import run_plan
            return run_plan(args)
        if args.command == "import":
            from backend.cli.import_results import run_import
            return run_import(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    parser.error(f"unknown command {args.command}")   # exits with status 2


def run_config(args) -> RunConfig:
    config = common_config(args, RunKind.BATCH)
    config.batch = BatchRun(prompt=args.prompt, chat=args.chat, prompt_len=args.prompt_len,
                            output_len=args.output_len, batch=args.batch)
    config.engine = EngineConfig(policy="static", max_batch=args.batch)
    from backend.cli.flags import apply_kv_flags
    apply_kv_flags(args, config.engine)
    return config


def run_headless(config: RunConfig, definitions: bool = False) -> int:
    """Run with Ctrl+C as a stop request: the records measured so far are still written."""
    from backend.session import execute
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    progress = report.LiveProgress(enabled=config.mode == RunKind.LOAD)
    sweep = None
    if config.sweep is not None:
        from backend.cli.tools import SweepPrinter
        sweep = progress.sweep = SweepPrinter(config.sweep.kind)
    try:
        finished = execute(config, progress.on_event, stop.is_set, retain_records=False)
    finally:
        signal.signal(signal.SIGINT, previous)
        progress.close()
    repeats = finished.repeats
    shown = config   # with repeats: the last repeat's summary, with its own folder
    if repeats is not None and config.out_dir:
        from backend.results.repeats import repeat_folder
        last = repeats.num_done + (1 if finished.error or finished.stopped else 0)
        shown = replace(config, out_dir=str(repeat_folder(config.out_dir, last)))
    if sweep is not None:
        sweep.finish(finished, shown)
    else:
        report.print_run(shown, finished, definitions=definitions)
    if repeats is not None:
        from backend.cli.repeats import print_repeats
        print_repeats(repeats, config.mode, config.out_dir)
    if finished.error:
        print(f"error: {finished.error}", file=sys.stderr)
        return 1
    return 130 if finished.stopped else 0
