"""`import FILE|DIR [--out DIR]`: another tool's results as a run folder, its headline figures recomputed.

For each headline figure the file states, one row: the file's value, the same figure recomputed from
the file's per-request data under the tool's own definition (equal to the last printed digit when the
file is read right), this tool's figure under its own definition, and, where the two definitions
give different figures, why.
"""
from __future__ import annotations

import sys

from backend.results.importers import Imported, import_path, write_imported


def add_import_parser(sub) -> None:
    p = sub.add_parser("import", help="read another tool's results (vLLM bench serve, AIPerf, GuideLLM, llama-bench) "
                       "into a run folder that compare and the window open; recompute its headline figures")
    p.add_argument("path", metavar="FILE|DIR", help="the result file, or an AIPerf artifacts folder")
    p.add_argument("--out", help="write the run folder here (several: one sub-folder each)")


def run_import(args, out=None) -> int:
    from backend.cli.report import print_table
    out = out or sys.stdout
    runs = import_path(args.path)
    for imported in runs:
        _print_run(imported, out, print_table)
    if args.out:
        for folder in write_imported(runs, args.out):
            print(f"written to {folder}", file=out)
    else:
        print("nothing written: give --out DIR for a run folder that compare and the window open", file=out)
    return 0


def _print_run(imported: Imported, out, print_table) -> None:
    info = imported.run.info
    rec = info.imported
    heading = f"{rec.tool}" + (f" {rec.version}" if rec.version else " (the file names no version)")
    name = f" {imported.name}" if imported.name else ""
    print(f"{heading}{name}: {info.model or 'model not named'}, {len(imported.run.requests)} requests, "
          f"{len(imported.run.tokens)} token times  ({rec.file})", file=out)
    for note in imported.notes:
        print(f"note: {note}", file=out)
    if not imported.checks:
        print("no headline figures to check\n", file=out)
        return
    rows = [("figure", "file", "recomputed", "this tool", "check")]
    for c in imported.checks:
        mark = {True: "same", False: "differs from the file", None: "-"}[c.reproduced]
        rows.append((c.label, c.printed(c.theirs), c.printed(c.recomputed), c.printed(c.ours), mark))
    print_table(rows, out)
    if any(c.recomputed is None and c.theirs is not None for c in imported.checks):
        print("recomputed n/a: the file holds no per-request (or per-repetition) data for it; vLLM saves it "
              "with --save-detailed, llama-bench with -o json", file=out)
    wrong = [c.label for c in imported.checks if c.reproduced is False]
    if wrong:
        print(f"the file's {', '.join(wrong)} differ from what its own per-request data give under the tool's "
              f"definition: a file edited by hand, or a {rec.tool} version that computes them otherwise "
              f"(docs/import.md names the source each definition was read from)", file=out)
    seen = set()
    for c in imported.checks:
        if c.definitions_differ and c.why and c.why not in seen:
            seen.add(c.why)
            print(f"why {c.label} differs: {c.why}", file=out)
    print("", file=out)
