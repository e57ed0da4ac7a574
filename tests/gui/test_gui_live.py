"""A live window fed steps from a timer for about three seconds.

PySide6 6.12.0 on Python 3.11 crashes (`none_dealloc`) within seconds of a pyqtgraph plot
being updated from a timer; this test is what makes a bad binding version fail CI instead
of a user's session.
"""
from tests.fakes.gui_fixtures import step

import time

from PySide6 import QtCore

from backend.events import RequestsArrived
from backend.records import Phase, RecordBatch, TokenRecord
from gui.main_window import MainWindow

FEED_MS = 5                 # a feed tick every 5 ms ...
STEPS_PER_TICK = 25         # ... of 25 steps: 5,000 steps a second, as a small model on a GPU makes them
LIVE_S = 3.0                # how long the plots stay live (wall clock: the point is time under updates)
REQUESTS = 16


def test_live_plots_repaint_from_a_timer_for_seconds(qtbot):
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    window.timeline.set_running(True)
    window.lanes.set_running(True)
    window.runs.take_event(RequestsArrived(list(range(REQUESTS)), [0.0] * REQUESTS, [64] * REQUESTS))
    state = {"ticks": 0, "step": 0, "repaints": 0}

    def feed():
        batch = RecordBatch()
        for _ in range(STEPS_PER_TICK):
            i = state["step"]
            t = i * 0.2
            phase = Phase.PREFILL if i % 50 == 0 else Phase.DECODE
            batch.steps.append(step(i, phase, t, 0.2, prefill=64 if phase is Phase.PREFILL else 0,
                                    decode=0 if phase is Phase.PREFILL else REQUESTS, running=REQUESTS))
            rid = i % REQUESTS
            batch.tokens.append(TokenRecord(rid, i // REQUESTS, t + 0.2))
            batch.text[rid] = "x"
            state["step"] += 1
        window.runs.take_records(batch)
        state["ticks"] += 1

    window.repaint_timer.timeout.connect(lambda: state.__setitem__("repaints", state["repaints"] + 1))
    feeder = QtCore.QTimer()
    feeder.setInterval(FEED_MS)
    feeder.timeout.connect(feed)
    feeder.start()
    start = time.monotonic()
    qtbot.waitUntil(lambda: time.monotonic() - start >= LIVE_S, timeout=int(LIVE_S * 1000) + 10_000)
    feeder.stop()
    window.timeline.set_running(False)
    window.lanes.set_running(False)
    window.repaint_views()

    assert len(window.store.steps) == state["ticks"] * STEPS_PER_TICK > 0
    assert state["repaints"] > 10     # the repaint timer kept firing while records poured in
    # the last step made it into the plot
    assert window.timeline.bars[Phase.DECODE].shown[1][-1] == window.store.bars.column("end")[-1]
    assert window.table.model().rowCount() == REQUESTS
    assert window.metrics.values["load"].text() == f"{REQUESTS} / 0"
