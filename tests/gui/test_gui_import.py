"""The window opens a folder `import` wrote from another tool's results, beside its own runs."""
from pathlib import Path

from backend.results.importers import import_path, write_imported

DATA = Path(__file__).resolve().parents[1] / "data" / "imports"


def test_open_run_shows_an_imported_vllm_result(window, tmp_path):
    folder = write_imported(import_path(DATA / "vllm-bench-serve.json"), tmp_path / "vllm")[0]
    assert window.files.open_run(str(folder))
    window.repaint_views()
    [imported] = import_path(DATA / "vllm-bench-serve.json")
    assert window.table.model().rowCount() == len(imported.run.requests)
    assert window.status.labels["model"].text() == "model: meta-llama/Llama-3.1-8B-Instruct"
    assert "imported from vllm-bench-serve" in window.status.labels["device"].text()
