"""Every command the README and the manual in docs/ show is one the command line accepts.

Parse only: each `python main.py ...` / `phasescope ...` line (and `make run ARGS='...'`) is read
out of the Markdown, in code blocks and inline code, and handed to the CLI's own parser. Nothing
runs, so a renamed flag or sub-command fails here in a second instead of in a reader's terminal.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from backend.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# `$ python main.py`, `.venv/bin/python main.py`, `phasescope`; group 1 is what the parser gets.
COMMAND = re.compile(r"^(?:\$\s+)?(?:\S*python3?\s+main\.py|phasescope)(?=\s|$)(.*)$")
MAKE_RUN = re.compile(r"^(?:\$\s+)?make run ARGS=(.*)$")
INLINE = re.compile(r"`([^`\n]+)`")


@dataclass(frozen=True, slots=True)
class Command:
    page: str
    line: int
    text: str       # as the page shows it (continuation lines joined)
    argv: tuple[str, ...]


def _argv(text: str) -> tuple[str, ...] | None:
    """The parser's argv for one shown command, or None when the text is not a command of ours."""
    make = MAKE_RUN.match(text)
    if make:
        return tuple(shlex.split(shlex.split(make.group(1))[0]))
    match = COMMAND.match(text)
    if match is None:
        return None
    return tuple(shlex.split(match.group(1), comments=True))


def _block_lines(text: str):
    """(line number, command text) for each line inside fenced or indented code blocks, with the
    lines a trailing backslash continues joined on."""
    lines = text.splitlines()
    in_fence = False
    pending, start = "", 0
    for number, line in enumerate(lines, start=1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        indented = not in_fence and line.startswith("    ") and not line.lstrip().startswith(("-", "*"))
        if not (in_fence or indented or pending):
            continue
        body = line.strip()
        if not pending:
            start = number
        if body.endswith("\\"):
            pending += body[:-1] + " "
            continue
        yield start, pending + body
        pending = ""


def commands() -> list[Command]:
    found: list[Command] = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(ROOT).as_posix()
        for number, line in _block_lines(text):
            argv = _argv(line)
            if argv is not None:
                found.append(Command(name, number, line, argv))
        for number, line in enumerate(text.splitlines(), start=1):
            for span in INLINE.findall(line):
                argv = _argv(span.strip())
                if argv is not None:
                    found.append(Command(name, number, span.strip(), argv))
    return found


COMMANDS = commands()


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: f"{c.page}:{c.line}")
def test_the_parser_accepts_every_command_the_docs_show(command, capsys):
    parser = build_parser()
    try:
        parser.parse_args(list(command.argv))
    except SystemExit as exc:   # the parser's one-line error, or --help's exit 0
        if exc.code not in (0, None):
            pytest.fail(f"{command.page}:{command.line}: `{command.text}` is refused: {capsys.readouterr().err.strip()}")


def test_the_docs_show_every_sub_command():
    """The extraction finds the commands (not an empty list that passes), and no sub-command is
    left without an example."""
    parser = build_parser()
    sub = next(action for action in parser._actions if action.dest == "command")
    shown = {command.argv[0] for command in COMMANDS if command.argv and not command.argv[0].startswith("-")}
    assert set(sub.choices) <= shown, f"no example of: {sorted(set(sub.choices) - shown)}"
    assert len(COMMANDS) >= 30


def test_the_extraction_joins_continued_lines_and_drops_comments():
    text = "```\n$ python main.py load --simulate \\\n      --rate 8   # the rate\n```\n"
    assert [argv for _, line in _block_lines(text) if (argv := _argv(line))] == \
        [("load", "--simulate", "--rate", "8")]
    assert _argv("make run ARGS='--model llama-1b --autostart'") == ("--model", "llama-1b", "--autostart")
    assert _argv("python tools/llama_cpp_peer.py --print") is None


def test_a_flag_the_parser_lacks_is_refused(capsys):
    """What the parametrized test relies on: a renamed flag makes the parser exit with status 2."""
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(list(_argv("python main.py load --no-such-flag 3")))
    assert exc.value.code == 2
    assert "--no-such-flag" in capsys.readouterr().err
