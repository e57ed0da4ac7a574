"""docs/run-folder.md lists exactly the columns of the record tables and the fields of run.json's typed
records: a field added to RunInfo, Summary or a record without a line on the page fails here."""
import re
from dataclasses import fields
from pathlib import Path

import pytest

from backend import run_info, summary
from backend.records import RequestRecord, StepRecord, TokenRecord, record_fields
from backend.results.export import RECORD_FILES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "run-folder.md"
RECORDS = [run_info.RunInfo, run_info.LocalInfo, run_info.SimulatedInfo, run_info.RemoteInfo,
           run_info.DisaggregatedInfo, run_info.ReplicasInfo, run_info.SweepInfo, run_info.ImportedInfo,
           summary.Summary, summary.Band, summary.Crossovers, summary.PrecisionGain]


def table_under(heading: str) -> list[str]:
    """The backticked names in the first column of the table that follows `heading` on the page."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(heading + "\n")
    names, in_table = [], False
    for line in text[start:].splitlines()[1:]:
        if line.startswith("|"):
            in_table = True
            names += re.findall(r"`([\w.\-/]+)`", line.split("|")[1])
        elif in_table or line.startswith("#"):
            break
    return names


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_the_page_lists_every_field_of_each_record_in_order(record):
    assert table_under(f"#### `{record.__name__}`") == [f.name for f in fields(record)]


@pytest.mark.parametrize("name", list(RECORD_FILES), ids=str)
def test_the_page_lists_every_column_of_each_record_table(name):
    assert table_under(f"#### `{name}`") == list(record_fields(RECORD_FILES[name]))


def test_every_sub_record_of_run_info_is_on_the_page():
    subs = {f.type.split(" | ")[0] for f in fields(run_info.RunInfo) if f.type.endswith("Info | None")}
    assert subs == {r.__name__ for r in RECORDS} - {"RunInfo", "Summary", "Band", "Crossovers", "PrecisionGain"}


def test_the_files_table_names_every_file_a_run_folder_can_hold():
    assert RECORD_FILES == {"steps.csv": StepRecord, "requests.csv": RequestRecord, "tokens.csv": TokenRecord}
    from backend.results.repeats import INDEX, TABLE
    from backend.targets.remote.server_log import FILE
    from backend.results.kv_file import FILE as KV_FILE
    written = [*RECORD_FILES, "summary.csv", "run.json", "trace.json", FILE, KV_FILE, "sweep.csv", INDEX, TABLE]
    assert set(written) <= set(table_under("## Files"))


def test_the_page_lists_every_key_of_a_kv_map_line_in_order():
    from backend.results.kv_file import KEYS
    assert table_under("#### `kv_map.jsonl`") == list(KEYS)
