"""The files `make test` should start first, ranked by their time in a JUnit report of a whole run.

pytest-xdist (--dist loadfile) hands whole files to the workers in the order tests/conftest.py gives
them; the longest going first leaves short ones to fill the end, so no worker finishes a long file alone.
Make the report with the suite's own command plus --junitxml, on a quiet machine, then paste the list
this prints over RUN_FIRST in tests/conftest.py:

    make test PYTEST_ARGS=--junitxml=/tmp/suite.xml
    python tools/test_order.py /tmp/suite.xml [--top 20]
"""
from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def file_of(classname: str) -> str | None:
    """tests.models.test_quant (or tests.models.test_quant.TestX) as the test file's path, if it exists."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        path = "/".join(parts[:end]) + ".py"
        if (ROOT / path).is_file():
            return path
    return None


def seconds_by_file(report: Path) -> Counter:
    """Each test file's total time (setup, call and teardown of its tests) in the report."""
    totals: Counter = Counter()
    for case in ET.parse(report).iter("testcase"):
        path = file_of(case.get("classname", ""))
        if path:
            totals[path] += float(case.get("time") or 0)
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path, help="a JUnit XML report of the whole suite")
    parser.add_argument("--top", type=int, default=20, help="how many files to rank (default 20)")
    args = parser.parse_args()
    try:
        totals = seconds_by_file(args.report)
    except (OSError, ET.ParseError) as e:
        print(f"test_order: cannot read {args.report}: {e}", file=sys.stderr)
        return 2
    whole = sum(totals.values())
    print(f"# {len(totals)} files, {whole:.0f} s of tests in all; the {args.top} longest:")
    print("RUN_FIRST = [")
    for path, seconds in totals.most_common(args.top):
        print(f'    "{path}",   # {seconds:.0f} s')
    print("]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
