"""The cycle collector runs on the window's thread only while a window is open (gui/collector.py)."""
import gc

from gui.collector import MainThreadCollector
from gui.main_window import MainWindow


class Node:
    def __init__(self):
        self.me = self   # a cycle: only the cyclic collector frees it


def test_a_window_turns_the_automatic_collector_off_until_it_shuts_down(qtbot):
    assert gc.isenabled()
    w = MainWindow()
    qtbot.addWidget(w)
    assert not gc.isenabled()
    second = MainWindow()   # a second window: the collector stays off until the last one goes
    qtbot.addWidget(second)
    w.shut_down()
    assert not gc.isenabled()
    second.shut_down()
    assert gc.isenabled()
    w.shut_down()   # again: nothing more
    assert gc.isenabled()


def test_the_timer_collects_cycles_on_the_window_thread(qtbot):
    w = MainWindow()
    qtbot.addWidget(w)
    try:
        gc.collect()
        for _ in range(gc.get_threshold()[0] + 10):
            Node()
        assert gc.get_count()[0] > gc.get_threshold()[0]   # past the threshold, and nothing collected them
        qtbot.waitUntil(lambda: gc.get_count()[0] < gc.get_threshold()[0], timeout=5000)
    finally:
        w.shut_down()


def test_collect_picks_the_oldest_generation_past_its_threshold():
    gc.disable()
    try:
        gc.collect()
        assert MainThreadCollector.collect() == 0   # nothing past any threshold
        nodes = [Node() for _ in range(gc.get_threshold()[0] + 10)]
        del nodes
        assert MainThreadCollector.collect() >= gc.get_threshold()[0]   # the young generation's cycles freed
    finally:
        gc.enable()
