"""Other tools' result files read into run folders (`import FILE|DIR`): one module per tool.

`import_path` recognises the file by its shape (these tools' files name no format of their own, and
vLLM's none of its version) and refuses anything else with one line naming what it expected;
`write_imported` writes each run as an ordinary run folder (target `imported`), so `compare`, the
overlays and the window open it beside this tool's runs.
"""
from __future__ import annotations

from pathlib import Path

from backend.errors import InputError
from backend.results.importers.aiperf import RECORDS, SUMMARY, is_aiperf_summary, read_aiperf
from backend.results.importers.common import Check, Imported, read_json
from backend.results.importers.guidellm import is_guidellm, read_guidellm
from backend.results.importers.llama_bench import is_llama_bench_rows, read_llama_bench, read_llama_bench_csv
from backend.results.importers.vllm import is_vllm, read_vllm

__all__ = ["Check", "Imported", "EXPECTED", "import_path", "write_imported"]

EXPECTED = ("a vLLM bench serve result JSON, an AIPerf profile_export.jsonl or profile_export_aiperf.json "
            "(or their folder), a GuideLLM benchmarks.json, or llama-bench's -o json / -o csv output")


def import_path(path: str | Path) -> list[Imported]:
    """Every run the file (or an AIPerf artifacts folder, or a GuideLLM folder) holds."""
    path = Path(path)
    if path.is_dir():
        records, summary = path / RECORDS, path / SUMMARY
        if records.is_file() or summary.is_file():
            return [read_aiperf(records if records.is_file() else None, summary if summary.is_file() else None)]
        if (path / "benchmarks.json").is_file():
            return import_path(path / "benchmarks.json")
        raise InputError(f"{path}: a folder without {RECORDS}, {SUMMARY} or benchmarks.json: expected {EXPECTED}")
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    if path.suffix.lower() == ".csv":
        return [read_llama_bench_csv(path)]
    if path.suffix.lower() == ".jsonl":
        summary = path.with_name(SUMMARY)
        return [read_aiperf(path, summary if summary.is_file() else None)]
    data = read_json(path, EXPECTED)
    if is_vllm(data):
        return [read_vllm(data, path)]
    if is_aiperf_summary(data):
        records = path.with_name(RECORDS)
        return [read_aiperf(records if records.is_file() else None, path)]
    if is_guidellm(data):
        return read_guidellm(data, path)
    if is_llama_bench_rows(data):
        return [read_llama_bench(data, path)]
    raise InputError(f"{path}: not a result file this version reads ({_shape(data)}): expected {EXPECTED}")


def _shape(data) -> str:
    if isinstance(data, dict):
        keys = sorted(data)[:6]
        return "an object with " + (", ".join(keys) + (", ..." if len(data) > 6 else "") if keys else "no keys")
    if isinstance(data, list):
        return f"a list of {len(data)}"
    return f"a JSON {type(data).__name__}"


def write_imported(runs: list[Imported], out: str | Path) -> list[Path]:
    """One run folder per run: `out` itself for one, `out/<name>` for each of several."""
    from backend.results.export import write_run
    folders = []
    for imported in runs:
        folder = Path(out) / imported.name if imported.name else Path(out)
        imported.run.info.imported.notes = imported.notes + [f"{c.label}: {c.why}" for c in imported.checks
                                                             if c.definitions_differ and c.why]
        folders.append(write_run(folder, imported.run))
    return folders
