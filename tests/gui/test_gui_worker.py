"""The worker thread: coalesced records, events in order, failures as one line, stop, calibration."""
from tests.fakes.gui_fixtures import step

import os
import threading

import pytest
from PySide6 import QtCore

from backend.errors import InputError
from backend.summary import Summary
from backend.events import Progress, RequestsArrived, RunFinished
from backend.results.export import read_run
from backend.roofline.profiles import LOCAL_KEY, GpuProfile, find_profile
from backend.records import Phase, RecordBatch, RequestRecord, RequestStatus, RunData, TokenRecord
from backend.records import merge_batches
from gui.worker import RunWorker, WorkerThread, running_threads


class Collector(QtCore.QObject):
    """Lives in the test's thread: the worker's signals reach it queued, as they reach the window."""

    got_finished = QtCore.Signal(object)
    got_failed = QtCore.Signal(str)
    got_records = QtCore.Signal()
    got_calibrated = QtCore.Signal(object, str)
    got_recorded = QtCore.Signal(str)

    def __init__(self, worker: RunWorker):
        super().__init__()
        self.received = []
        self.threads = set()    # the threads the slots ran in
        worker.event.connect(self.on_event)
        worker.records.connect(self.on_records)
        worker.failed.connect(self.on_failed)
        worker.finished.connect(self.on_finished)
        worker.calibrated.connect(self.on_calibrated)
        worker.recorded.connect(self.on_recorded)

    def _note(self, kind, item):
        self.threads.add(threading.get_ident())
        self.received.append((kind, item))

    @QtCore.Slot(object)
    def on_event(self, e):
        self._note("event", e)

    @QtCore.Slot(object)
    def on_records(self, b):
        self._note("records", b)
        self.got_records.emit()

    @QtCore.Slot(str)
    def on_failed(self, m):
        self._note("failed", m)
        self.got_failed.emit(m)

    @QtCore.Slot(object)
    def on_finished(self, r):
        self._note("finished", r)
        self.got_finished.emit(r)

    @QtCore.Slot(str)
    def on_recorded(self, folder):
        self._note("recorded", folder)
        self.got_recorded.emit(folder)

    @QtCore.Slot(object, str)
    def on_calibrated(self, profile, path):
        self._note("calibrated", profile)
        self.got_calibrated.emit(profile, path)


class Starter(QtCore.QObject):
    """Starts jobs in the worker's thread the way the window does: through queued signals."""

    run = QtCore.Signal(object)
    calibrate = QtCore.Signal(str)


@pytest.fixture
def start_worker(qtbot):
    started = []

    def start(run=None, measure=None, flush_hz=None):
        kwargs = {k: v for k, v in (("run", run), ("measure", measure), ("flush_hz", flush_hz)) if v is not None}
        wt = WorkerThread(RunWorker(**kwargs))
        wt.starter = Starter()
        wt.starter.run.connect(wt.worker.run)
        wt.starter.calibrate.connect(wt.worker.calibrate)
        wt.collector = Collector(wt.worker)
        started.append(wt)
        return wt
    yield start
    for wt in started:
        wt.stop_and_join()
    assert not running_threads()


def test_merge_batches_keeps_order_and_joins_text():
    a = RecordBatch(steps=[step(0, Phase.PREFILL, 0, 1, prefill=4)], text={1: "he"})
    b = RecordBatch(steps=[step(1, Phase.DECODE, 1, 1, decode=1)], text={1: "llo", 2: "x"})
    merged = merge_batches([a, b])
    assert [s.step for s in merged.steps] == [0, 1]
    assert merged.text == {1: "hello", 2: "x"}


def test_thousands_of_steps_arrive_coalesced_in_order_and_off_the_gui_thread(qtbot, start_worker):
    n = 20_000
    run_threads = set()

    def fast_run(config, emit, should_stop):
        run_threads.add(threading.get_ident())
        for i in range(n):
            emit(RecordBatch(steps=[step(i, Phase.DECODE, float(i), 0.001, decode=1)]))
        return RunFinished("fast")

    wt = start_worker(fast_run)
    with qtbot.waitSignal(wt.collector.got_finished, timeout=60_000):
        wt.starter.run.emit(None)
    batches = [b for kind, b in wt.collector.received if kind == "records"]
    assert [s.step for b in batches for s in b.steps] == list(range(n))
    assert len(batches) < n // 10    # merged: far fewer signals than steps
    assert run_threads.isdisjoint({threading.get_ident()})
    assert wt.collector.threads == {threading.get_ident()}


def test_events_flush_pending_records_first(qtbot, start_worker):
    def run(config, emit, should_stop):
        emit(Progress("loading", None))
        emit(RecordBatch(steps=[step(0, Phase.PREFILL, 0, 1, prefill=3)]))
        emit(RecordBatch(steps=[step(1, Phase.DECODE, 1, 1, decode=1)]))
        emit(Progress("sweep point 2", 0.5))
        emit(RecordBatch(steps=[step(2, Phase.DECODE, 2, 1, decode=1)]))
        return RunFinished("ordered")

    wt = start_worker(run)
    with qtbot.waitSignal(wt.collector.got_finished, timeout=10_000):
        wt.starter.run.emit(None)
    received = wt.collector.received
    kinds = [k for k, _ in received]
    assert kinds[0] == "event" and kinds[-1] == "finished"
    arrived = kinds.index("event", 1)
    before = [s.step for k, b in received[:arrived] if k == "records" for s in b.steps]
    after = [s.step for k, b in received[arrived:] if k == "records" for s in b.steps]
    assert before == [0, 1] and after == [2]


def test_arrivals_travel_with_the_records_and_come_before_them(qtbot, start_worker):
    def run(config, emit, should_stop):
        for i in range(50):   # a fast engine: arrivals among thousands of steps
            emit(RequestsArrived([i], [float(i)], [8]))
            emit(RecordBatch(steps=[step(i, Phase.PREFILL, i, 1, prefill=8)], scheduled={i: float(i)}))
        return RunFinished("arrivals")

    wt = start_worker(run, flush_hz=0.001)   # the first item goes at once, the rest at the end
    with qtbot.waitSignal(wt.collector.got_finished, timeout=10_000):
        wt.starter.run.emit(None)
    received = wt.collector.received[:-2]    # before "recorded" and "finished"
    assert len(received) <= 3                # a few signals, not a hundred
    arrived_at, stepped_at = {}, {}
    for position, (kind, item) in enumerate(received):
        if kind == "event":
            arrived_at.update({rid: position for rid in item.request_ids})
        else:
            stepped_at.update({s.step: position for s in item.steps})
    assert sorted(arrived_at) == sorted(stepped_at) == list(range(50))
    assert all(arrived_at[i] < stepped_at[i] for i in range(50))   # a lane exists before its first step


def test_a_failure_is_one_line_and_the_thread_runs_the_next_job(qtbot, start_worker):
    calls = []

    def run(config, emit, should_stop):
        calls.append(config)
        if config == "bad":
            emit(RecordBatch(steps=[step(0, Phase.PREFILL, 0, 1, prefill=3)]))
            raise InputError("unknown model 'nope'\nsecond line")
        return RunFinished("ok")

    wt = start_worker(run)
    with qtbot.waitSignal(wt.collector.got_failed, timeout=10_000) as failed:
        wt.starter.run.emit("bad")
    assert failed.args == ["unknown model 'nope'"]
    assert wt.collector.received[0][0] == "records"      # the partial records still came out
    with qtbot.waitSignal(wt.collector.got_finished, timeout=10_000) as finished:
        wt.starter.run.emit("good")
    assert finished.args[0].run_id == "ok" and calls == ["bad", "good"]


def test_stop_ends_a_run_at_the_next_step_boundary(qtbot, start_worker):
    def endless(config, emit, should_stop):
        i = 0
        while not should_stop():
            emit(RecordBatch(steps=[step(i, Phase.DECODE, float(i), 1.0, decode=1)]))
            i += 1
        return RunFinished("endless", stopped=True)

    wt = start_worker(endless)
    with qtbot.waitSignal(wt.collector.got_records, timeout=10_000):
        wt.starter.run.emit(None)
    with qtbot.waitSignal(wt.collector.got_finished, timeout=5_000) as finished:
        wt.worker.request_stop()
    assert finished.args[0].stopped


def test_calibration_writes_this_machines_profile(qtbot, start_worker):
    def measure(device, progress):
        progress("matrix multiply, fp32", 0.5)
        return GpuProfile(key=LOCAL_KEY, name="Test CPU", vendor="test", memory_gb=8.0, bandwidth_gbs=20.0,
                          tflops={"fp32": 0.5}, source="measured in a test", measured=True)

    wt = start_worker(measure=measure)
    with qtbot.waitSignal(wt.collector.got_calibrated, timeout=10_000) as done:
        wt.starter.calibrate.emit("cpu")
    profile, path = done.args
    assert profile.name == "Test CPU" and path.endswith(".toml")
    assert find_profile(LOCAL_KEY).bandwidth_gbs == 20.0
    first = wt.collector.received[0]
    assert first[0] == "event" and first[1].fraction == 0.5


def test_every_record_is_streamed_to_a_run_folder_that_lives_until_the_next_run(qtbot, start_worker):
    done = RequestRecord(0, RequestStatus.FINISHED, 3, 2, arrival_ms=0.0, finish_ms=2.0)

    def run(config, emit, should_stop):
        emit(RecordBatch(steps=[step(0, Phase.PREFILL, 0, 1, prefill=3)], tokens=[TokenRecord(0, 0, 1.0)]))
        emit(RecordBatch(steps=[step(1, Phase.DECODE, 1, 1, decode=1)], tokens=[TokenRecord(0, 1, 2.0)],
                         requests=[done]))
        data = RunData("rec", requests=[done], summary=Summary(num_finished=1))
        return RunFinished("rec", Summary(num_finished=1), data=data)

    wt = start_worker(run)
    with qtbot.waitSignal(wt.collector.got_finished, timeout=10_000):
        wt.starter.run.emit(None)
    kinds = [k for k, _ in wt.collector.received]
    assert kinds.index("recorded") < kinds.index("finished")   # the folder is known before the outcome
    folder = next(f for k, f in wt.collector.received if k == "recorded")
    saved = read_run(folder)
    assert [s.step for s in saved.steps] == [0, 1] and len(saved.tokens) == 2
    assert saved.run_id == "rec" and saved.summary == Summary(num_finished=1)
    with qtbot.waitSignal(wt.collector.got_finished, timeout=10_000):
        wt.starter.run.emit(None)
    second = [f for k, f in wt.collector.received if k == "recorded"][-1]
    assert second != folder and not os.path.exists(folder)      # the last run's folder went with the new run
    wt.stop_and_join()
    assert not os.path.exists(second)                           # and the last one with the thread


def test_a_failed_run_keeps_its_records_on_disk(qtbot, start_worker):
    def run(config, emit, should_stop):
        emit(RecordBatch(steps=[step(0, Phase.PREFILL, 0, 1, prefill=3)]))
        raise RuntimeError("CUDA out of memory")

    wt = start_worker(run)
    with qtbot.waitSignal(wt.collector.got_failed, timeout=10_000):
        wt.starter.run.emit(None)
    folder = next(f for k, f in wt.collector.received if k == "recorded")
    assert len(read_run(folder).steps) == 1


def test_a_recording_that_fails_is_dropped_and_the_run_goes_on(qtbot, start_worker, monkeypatch):
    """A full disk under the temporary folder: the run is not failed for its copy."""
    from backend.errors import RunError
    from backend.results.export import RunWriter
    tried = []

    def full_disk(self, batch):
        tried.append(batch)
        raise RunError(f"cannot write to output folder {self.folder}: No space left on device")

    monkeypatch.setattr(RunWriter, "add", full_disk)

    def run(config, emit, should_stop):
        emit(RecordBatch(steps=[step(0, Phase.PREFILL, 0, 1, prefill=3)]))
        return RunFinished("full")

    wt = start_worker(run)
    with qtbot.waitSignal(wt.collector.got_finished, timeout=10_000) as finished:
        wt.starter.run.emit(None)
    assert finished.args[0].run_id == "full" and tried
    assert [f for k, f in wt.collector.received if k == "recorded"] == [""]   # Export falls back to the window's copy
    assert wt.worker.recording is None
