"""`compare RUN_A RUN_B [RUN_C ...] [--out DIR]`: saved runs side by side, each change against the
first run with whether it is larger than the noise (backend.results.compare), and overlaid plots."""
from __future__ import annotations

import sys
from pathlib import Path

from backend.config import RunKind
from backend.errors import InputError
from backend.results.compare import TESTS, Cell, Row, Side, compare, compare_csv, plots_of, side_of
from backend.results.plots import RenderPlots
from backend.run_info import RunInfo

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def add_compare_parser(sub) -> None:
    p = sub.add_parser("compare", help="saved runs side by side: metrics, changes against the first run, "
                       "and whether each change is larger than the noise")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run folders (`--out` of run, load, sweep; a "
                   "--repeats folder counts as one run whose metrics carry their intervals)")
    p.add_argument("--out", help="write compare.csv and one PNG per overlaid plot here")
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="the bootstrap's seed")


def load_side(path: str, letter: str) -> Side:
    """One run folder or repeats folder as a column; InputError naming the folder if it is neither."""
    from backend.sweeps.points import read_points
    from backend.results.export import read_run
    from backend.results.figures import figures_of
    from backend.results.repeats import is_repeats_folder, read_repeats_index
    folder = Path(path)
    if not folder.is_dir():
        raise InputError(f"{folder} is not a folder")
    folders = read_repeats_index(folder)[1] if is_repeats_folder(folder) else [folder]
    figures, run = [], None
    for f in folders:
        run = read_run(f)
        figures.append(figures_of(run, read_points(f)[1]))
    label = f"{letter}: {run_label(run.info, run.config)}" + (f" x{len(folders)} repeats" if len(folders) > 1 else "")
    return side_of(label, str(folder), figures)


def run_label(info: RunInfo, config: dict) -> str:
    """model, device, dtype, policy (or what ran), date: from run.json."""
    mode = str(config.get("mode", ""))
    if info.is_remote:
        what = f"remote {info.remote.endpoint}".strip()
    elif info.is_imported and info.imported is not None:
        what = f"imported from {info.imported.tool} {info.imported.version or ''}".strip()
    elif mode == RunKind.LOAD:
        what = (config.get("engine") or {}).get("policy", "")
    else:
        what = {RunKind.BATCH: "run (static)"}.get(mode, mode)
    device = None if info.is_remote or info.is_imported else info.device   # "remote", or another tool's
    parts = [info.model, device, info.dtype, what, info.created_minute]
    return " / ".join(str(p) for p in parts if p)


def number(value: float) -> str:
    a = abs(value)
    if a >= 100:
        return f"{value:,.1f}"
    if a >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _value_text(c: Cell) -> str:
    if c.value is None:
        return f"n/a ({c.missing})"
    if c.low is not None:
        return f"{number(c.value)} ± {number((c.high - c.low) / 2)}"
    return number(c.value)


def _change_text(c: Cell) -> tuple[str, str]:
    if c.value is None or not c.test:
        return "", ""
    change = "" if c.change_pct is None else f"{c.change_pct:+.1f}%"
    mark = {"ci": "CI", "bootstrap": "boot", "none": ""}[c.test]
    sig = "-" if c.significant is None else ("yes" if c.significant else "no")
    return change, f"{sig} ({mark})" if mark else sig


def table_rows(rows: list[Row], sides: list[Side]) -> list[tuple]:
    letters = [s.label.split(":", 1)[0] for s in sides]
    header = ["metric", letters[0]]
    for letter in letters[1:]:
        header += [letter, f"{letter} vs {letters[0]}", "noise?"]
    out = [tuple(header)]
    for row in rows:
        line = [row.metric.label, _value_text(row.cells[0])]
        for c in row.cells[1:]:
            line += [_value_text(c), *_change_text(c)]
        out.append(tuple(line))
    return out


def run_compare(args, render_plots: RenderPlots | None = None, out=None) -> int:
    from backend.cli.report import print_table
    out = out or sys.stdout
    if len(args.runs) < 2:
        raise InputError("compare needs at least two run folders")
    if args.resamples < 100:
        raise InputError(f"--resamples must be at least 100, got {args.resamples}")
    sides = []
    for i, path in enumerate(args.runs):
        try:
            sides.append(load_side(path, LETTERS[i % len(LETTERS)]))
        except InputError as exc:
            where = f" (run {i + 1} of {len(args.runs)})" if len(args.runs) > 2 else ""
            raise InputError(f"{path} is not a run folder{where}: {exc}") from None
    rows = compare(sides, args.resamples, args.seed)
    for s in sides:
        print(f"{s.label}  ({s.path})", file=out)
    print("", file=out)
    print_table(table_rows(rows, sides), out)
    used = sorted({c.test for r in rows for c in r.cells if c.test})
    print("", file=out)
    print("noise? yes: the change is larger than the noise; no: it is within it. " +
          "; ".join(f"{'CI' if t == 'ci' else 'boot' if t == 'bootstrap' else '-'}: {TESTS[t]}" for t in used),
          file=out)
    if any(s.num_repeats > 1 for s in sides):
        print("a repeats run shows mean ± the 95% t half-width over its repeats; its bootstrap pools "
              "the repeats' requests", file=out)
    if args.out:
        write_compare(args.out, rows, sides, render_plots, out)
    return 0


def write_compare(folder: str, rows: list[Row], sides: list[Side], render_plots: RenderPlots | None, out) -> None:
    from backend.files import write_files
    from backend.results.export import ensure_writable
    path = ensure_writable(folder)
    write_files(path, {"compare.csv": compare_csv(rows, sides)})
    print(f"written to {path}/compare.csv", file=out)
    plots = plots_of(sides, [s.label for s in sides])
    if not plots:
        return
    if render_plots is None:
        print(f"plots not drawn ({', '.join(p.file_name for p in plots)}): the PNGs need the window's "
              f"libraries (PySide6, pyqtgraph) and no renderer for them was passed in", file=out)
        return
    try:
        written = render_plots(plots, path)
    except OSError as exc:   # compare.csv is written: say why the pictures are not, in one line
        print(f"plots not drawn: {exc}", file=out)
        return
    print(f"plots: {', '.join(str(Path(p).name) for p in written)}", file=out)
