"""A request's text survives the CSV round trip whatever bytes a random model decodes to."""
from __future__ import annotations

import csv
import io

from backend.results.export import _Writer


def test_a_lone_carriage_return_or_nul_stays_inside_its_cell():
    buf = io.StringIO()
    writer = _Writer(buf)
    writer.writerow(["id", "text", "n"])
    writer.writerows([[0, "ab\rcd\x00e", 1.5], [1, "plain", 2]])
    rows = list(csv.reader(io.StringIO(buf.getvalue(), newline="")))
    assert rows == [["id", "text", "n"], ["0", "ab\rcd\x00e", "1.5"], ["1", "plain", "2"]]
