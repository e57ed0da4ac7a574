"""The Compare-policies folders under the cache stay within their bound (gui/controllers/compare_cache.py)."""
import os
import time

from tests.fakes.gui_fixtures import two_request_run

import pytest
from PySide6 import QtGui

from gui.controllers.compare_cache import cache_limit, clear_series, compare_root, prune_series, series_folders
from tests.fakes.cache_home import private_cache_home


def make_series(root, name: str, size: int, age_s: float):
    folder = root / name
    (folder / "1-static").mkdir(parents=True)
    (folder / "1-static" / "steps.csv").write_bytes(b"x" * size)
    stamp = time.time() - age_s
    os.utime(folder, (stamp, stamp))
    return folder


def test_the_oldest_go_first_until_the_rest_fit(tmp_path):
    old = make_series(tmp_path, "20260101-000000-a", 600, 300)
    mid = make_series(tmp_path, "20260102-000000-b", 600, 200)
    new = make_series(tmp_path, "20260103-000000-c", 600, 100)
    assert series_folders(tmp_path) == [old, mid, new]
    removed = prune_series(tmp_path, limit=1300)
    assert removed == [old] and not old.exists() and mid.exists() and new.exists()
    assert prune_series(tmp_path, limit=1300) == []   # already within the bound


def test_a_folder_in_use_stays_whatever_its_size(tmp_path):
    old = make_series(tmp_path, "a", 5000, 300)
    new = make_series(tmp_path, "b", 100, 100)
    assert prune_series(tmp_path, limit=1000, keep=(old,)) == [new]
    assert old.exists()
    assert clear_series(tmp_path, keep=(old,)) == (0, 0)
    assert clear_series(tmp_path) == (1, 5000) and not old.exists()


def test_the_bound_can_be_set(monkeypatch):
    monkeypatch.setenv("PHASESCOPE_COMPARE_CACHE_MB", "3")
    assert cache_limit() == 3 * 1024 * 1024
    monkeypatch.setenv("PHASESCOPE_COMPARE_CACHE_MB", "lots")
    assert cache_limit() == 512 * 1024 * 1024


@pytest.fixture
def cache(tmp_path, monkeypatch):
    private_cache_home(monkeypatch, tmp_path / "cache")
    return compare_root()


def test_the_menu_item_clears_all_but_the_series_shown_as_references(qtbot, window, cache):
    make_series(cache, "20260101-000000-a", 100, 300)
    make_series(cache, "20260102-000000-b", 100, 200)
    shown = cache / "20260103-000000-c"
    for event in two_request_run():
        window.store.add_event(event)
    assert window.files.export_csv(str(shown / "1-static")) and window.reference_runs.add(str(shown / "1-static"))
    (action,) = [a for a in window.findChildren(QtGui.QAction) if a.objectName() == "clearCacheAction"]
    action.trigger()
    assert series_folders(cache) == [shown]
    message = window.statusBar().currentMessage()
    assert "Removed 2 Compare-policies folders" in message and "in use as references are kept" in message
