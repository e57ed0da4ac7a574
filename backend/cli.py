"""The command line: no sub-command opens the window; sub-commands run headless.

Exit status: 0 success, 1 a failure during the run, 2 bad input, 130 stopped by Ctrl+C.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

from .config import BatchRun, EngineConfig, ModelChoice, RunConfig, SamplingConfig
from .errors import InputError, RunError
from .events import ModelLoaded, Progress, RequestsArrived
from .records import RecordBatch
from . import report


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


class _Parser(argparse.ArgumentParser):
    """A bad flag is one line on stderr (exit 2), not the whole usage block above it."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="smollm2-135m", help="a known name (see `models`), a HF folder, a .gguf file or a hub id")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda[:N] | mps")
    p.add_argument("--dtype", default="auto", help="auto | float32 | bfloat16 | float16")
    p.add_argument("--seed", type=int, help="seeds sampling and synthetic prompts (default 0; for load, the workload's)")
    p.add_argument("--temperature", type=_number, default=0.0, help="0 (the default) is greedy")
    p.add_argument("--top-p", type=_number, default=1.0)
    p.add_argument("--ignore-eos", action="store_true", help="always generate the full output length")
    p.add_argument("--out", help="write steps.csv, requests.csv, tokens.csv, summary.csv, run.json, trace.json here")
    p.add_argument("--profile", help="GPU profile name or TOML path (see `profiles`)")
    threads_flag(p)


def threads_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=_positive_int, help="CPU threads, pinned to as many cores (default: all cores; "
                   "the window's engine takes all but one)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="main.py", description="See prefill and decode, measured on your hardware. "
                     "With no sub-command, opens the window.")
    parser.add_argument("--model", help="(window) model to select")
    parser.add_argument("--profile", help="(window) GPU profile to select")
    parser.add_argument("--autostart", action="store_true", help="(window) start a run as soon as it opens")
    sub = parser.add_subparsers(dest="command")

    run = sub.add_parser("run", help="one batch: one prefill pass, then one decode step per token")
    _model_flags(run)
    run.add_argument("--prompt", help="prompt text (every request in the batch gets it)")
    run.add_argument("--prompt-len", type=_positive_int, default=128, help="synthetic prompt tokens when no --prompt")
    run.add_argument("--chat", action="store_true", help="apply the model's chat template to --prompt")
    run.add_argument("--output-len", type=_positive_int, default=64)
    run.add_argument("--batch", type=_positive_int, default=1)

    from .load_cli import add_load_parser
    add_load_parser(sub, _model_flags)

    sub.add_parser("models", help="list the known models: sizes and where each comes from")
    sub.add_parser("doctor", help="check this machine: Python, torch and its devices, C kernels, Qt and the "
                   "display, the bundled model, the GPU profile (exit 1 if the window cannot run)")
    from .tools_cli import add_tool_parsers
    add_tool_parsers(sub, _model_flags)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command is None:
            from .display_check import check_display
            if check_display():   # before Qt loads: a missing library or display would abort the process
                return 2
            from gui.main_window import run_app
            return run_app(model=args.model, profile=args.profile, autostart=args.autostart)
        if args.command == "models":
            return report.print_models()
        if args.command == "doctor":
            from .doctor import run_doctor
            return run_doctor()
        if args.command == "run":
            return run_headless(run_config(args))
        if args.command == "load":
            from .load_cli import load_config
            return run_headless(load_config(args))
        if args.command == "profiles":
            from .tools_cli import print_profiles
            return print_profiles()
        if args.command == "calibrate":
            from .tools_cli import run_calibrate
            return run_calibrate(args)
        if args.command == "sweep":
            from .tools_cli import sweep_config
            return run_headless(sweep_config(args))
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    parser.error(f"unknown command {args.command}")   # exits with status 2


def common_config(args, mode: str) -> RunConfig:
    return RunConfig(mode=mode, model=ModelChoice(args.model, args.device, args.dtype),
                     sampling=SamplingConfig(args.temperature, args.top_p, args.seed or 0, args.ignore_eos),
                     profile=args.profile, out_dir=args.out, threads=args.threads)


def run_config(args) -> RunConfig:
    config = common_config(args, "batch")
    config.batch = BatchRun(prompt=args.prompt, chat=args.chat, prompt_len=args.prompt_len,
                            output_len=args.output_len, batch=args.batch)
    config.engine = EngineConfig(policy="static", max_batch=args.batch)
    return config


def run_headless(config: RunConfig) -> int:
    """Run with Ctrl+C as a stop request: the records measured so far are still written."""
    from .session import execute
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    progress = report.LiveProgress(enabled=config.mode == "load")
    sweep = None
    if config.sweep is not None:
        from .tools_cli import SweepPrinter
        sweep = progress.sweep = SweepPrinter(config.sweep.kind)
    try:
        finished = execute(config, progress.on_event, stop.is_set, retain_records=False)
    finally:
        signal.signal(signal.SIGINT, previous)
        progress.close()
    if sweep is not None:
        sweep.finish(finished, config)
    else:
        report.print_run(config, finished)
    if finished.error:
        print(f"error: {finished.error}", file=sys.stderr)
        return 1
    return 130 if finished.stopped else 0
