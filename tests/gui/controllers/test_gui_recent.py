"""File > Recent runs: the runs opened, exported or kept at shutdown, remembered between sessions."""
import shutil

from tests.fakes.gui_fixtures import two_request_run

from gui.controllers.recent import MAX_RECENT, add_recent, recent_runs
from gui.main_window import MainWindow


def exported(w, folder) -> str:
    """A small run written by the window's Export CSV."""
    for event in two_request_run():
        w.store.add_event(event)
    assert w.files.export_csv(str(folder)), w.last_error
    return str(folder.resolve())


def listed(w) -> list[str]:
    w.recent.fill_menu()
    return [a.data() for a in w.recent.menu.actions() if a.data()]


def test_an_exported_run_is_listed_and_opens_from_the_menu(qtbot, window, tmp_path):
    folder = exported(window, tmp_path / "first")
    assert listed(window) == [folder]
    window.store.reset()
    (action,) = [a for a in window.recent.menu.actions() if a.data() == folder]
    action.trigger()
    assert window.store.num_requests == 2
    assert window.statusBar().currentMessage().startswith("Opened run")


def test_the_list_is_kept_for_the_next_session_newest_first(qtbot, window, tmp_path):
    a = exported(window, tmp_path / "a")
    b = exported(window, tmp_path / "b")
    window.files.open_run(a)   # opened again: back to the top, listed once
    window.close()
    again = MainWindow()
    qtbot.addWidget(again)
    assert listed(again) == [a, b]


def test_a_missing_folder_is_dropped_with_a_message(qtbot, window, tmp_path):
    gone = exported(window, tmp_path / "gone")
    kept = exported(window, tmp_path / "kept")
    shutil.rmtree(gone)
    assert not window.recent.open_recent(gone)
    assert "no longer exists" in window.last_error and gone in window.last_error
    assert listed(window) == [kept]


def test_the_list_is_bounded_and_can_be_cleared(qtbot, window, tmp_path):
    for i in range(MAX_RECENT + 3):
        (tmp_path / str(i)).mkdir()
        add_recent(str(tmp_path / str(i)))
    assert len(recent_runs()) == MAX_RECENT
    assert recent_runs()[0] == str((tmp_path / str(MAX_RECENT + 2)).resolve())
    window.recent.clear_recent()
    assert recent_runs() == [] and listed(window) == []
