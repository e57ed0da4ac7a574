"""The runs controller alone, on a stand-in worker (no thread, no engine): what it hands the worker,
what it keeps in the store, and the order its signals come in, which the window and Compare
policies depend on (gui/controllers/runs.py)."""
from tests.fakes.gui_fixtures import two_request_run

from PySide6 import QtCore

from backend.config import ModelChoice, RunConfig
from backend.events import Progress, RepeatStarted, RunFinished
from backend.summary import Summary
from gui.controllers.runs import RunsController
from gui.state.run_store import RunStore


class StandInWorker(QtCore.QObject):
    """RunWorker's signals and its thread-safe calls, recording what the controller asked of it."""

    event = QtCore.Signal(object)
    records = QtCore.Signal(object)
    finished = QtCore.Signal(object)
    recorded = QtCore.Signal(str)
    calibrated = QtCore.Signal(object, str)
    fitted = QtCore.Signal(object)
    failed = QtCore.Signal(str)

    def __init__(self):
        super().__init__()
        self.asked: list = []
        self.stop_requested = False

    def run(self, config):
        self.asked.append(("run", config.model.name))

    def calibrate(self, device):
        self.asked.append(("calibrate", device))

    def fit(self, runs_dir, device, threads):
        self.asked.append(("fit", device, threads))

    def warm(self, config):
        self.asked.append(("warm", config.model.name))

    def request_stop(self):
        self.stop_requested = True

    def clear_stop(self):
        self.stop_requested = False

    def should_stop(self):
        return self.stop_requested


def controller():
    worker = StandInWorker()
    runs = RunsController(RunStore(), worker)
    heard = []
    for name in ("launched", "runningChanged", "repeatStarted", "event", "finished", "failed", "ended", "message",
                 "error"):
        getattr(runs, name).connect(lambda *args, name=name: heard.append((name, *args)))
    return runs, worker, heard


def test_a_launch_resets_the_store_and_hands_the_settings_to_the_worker():
    runs, worker, heard = controller()
    runs.store.add_event(two_request_run()[0])
    assert runs.launch(RunConfig(model=ModelChoice("tiny")), "a test")
    assert runs.running and worker.asked == [("run", "tiny")]
    assert runs.store.config["model"]["name"] == "tiny" and runs.store.num_requests == 0
    names = [h[0] for h in heard]
    assert names == ["launched", "runningChanged", "message"] and heard[1] == ("runningChanged", True)
    assert "a test" in heard[2][1]
    assert not runs.launch(RunConfig(model=ModelChoice("tiny")))   # one run at a time
    assert worker.asked == [("run", "tiny")]
    runs.warm(RunConfig(model=ModelChoice("tiny")))
    assert worker.asked == [("run", "tiny")]   # no engine warmed under a run


def test_events_and_records_go_to_the_store_and_the_end_comes_in_order():
    runs, worker, heard = controller()
    runs.launch(RunConfig(model=ModelChoice("tiny")))
    heard.clear()
    for item in two_request_run():
        (worker.event if not hasattr(item, "steps") else worker.records).emit(item)
    worker.event.emit(Progress("note: a prompt was cut", None))
    assert runs.store.num_requests == 2 and runs.store.num_steps == 5
    assert [h[0] for h in heard] == ["event"]   # a Progress is shown; arrivals and records only stored
    worker.finished.emit(RunFinished("r", Summary(num_finished=2, num_requests=2, output_tokens_per_s=10.0)))
    names = [h[0] for h in heard[1:]]
    assert names == ["runningChanged", "message", "finished", "ended"]
    assert not runs.running and "note: a prompt was cut" in heard[2][1]


def test_a_failure_says_so_and_ends_with_none():
    runs, worker, heard = controller()
    runs.launch(RunConfig(model=ModelChoice("tiny")))
    heard.clear()
    worker.failed.emit("device lost")
    assert heard == [("runningChanged", False), ("error", "device lost"), ("failed", "device lost"), ("ended", None)]


def test_a_repeat_keeps_the_settings_and_starts_the_records_over():
    runs, worker, heard = controller()
    runs.launch(RunConfig(model=ModelChoice("tiny")))
    for item in two_request_run():
        (worker.event if not hasattr(item, "steps") else worker.records).emit(item)
    heard.clear()
    worker.event.emit(RepeatStarted(2, 3))
    assert runs.store.num_steps == 0 and runs.store.config["model"]["name"] == "tiny"
    assert [h[0] for h in heard] == ["repeatStarted", "message"] and "repeat 2 of 3" in heard[1][1]


def test_stop_calibrate_and_fit_reach_the_worker_only_when_nothing_runs():
    runs, worker, heard = controller()
    runs.stop()
    assert not worker.stop_requested   # nothing to stop
    runs.calibrate("cpu")
    assert worker.asked == [("calibrate", "cpu")] and runs.running
    assert not runs.fit("/tmp/runs", "cpu", 2)
    runs.stop()
    assert worker.stop_requested
    worker.calibrated.emit(object(), "/tmp/profile.toml")
    assert not runs.running and runs.fit("/tmp/runs", "cpu", 2) and worker.asked[-1] == ("fit", "cpu", 2)
