"""The worker thread: coalesced records, events in order, failures as one line, stop, calibration."""
from gui_fixtures import config_dir, no_thread_left, step  # noqa: F401

import pytest
from PySide6 import QtCore

from backend.errors import InputError
from backend.events import Progress, RequestsArrived, RunFinished
from backend.profiles import GpuProfile, LOCAL_KEY, find_profile
from backend.records import Phase, RecordBatch
from gui.worker import RunWorker, WorkerThread, merge_batches, running_threads


@pytest.fixture
def start_worker(qtbot):
    threads = []

    def start(run=None, measure=None):
        kwargs = {k: v for k, v in (("run", run), ("measure", measure)) if v is not None}
        wt = WorkerThread(RunWorker(**kwargs))
        wt.starter = Starter()
        wt.starter.run.connect(wt.worker.run)
        wt.starter.calibrate.connect(wt.worker.calibrate)
        threads.append(wt)
        received = []
        wt.worker.event.connect(lambda e: received.append(("event", e)))
        wt.worker.records.connect(lambda b: received.append(("records", b)))
        wt.worker.failed.connect(lambda m: received.append(("failed", m)))
        wt.worker.finished.connect(lambda r: received.append(("finished", r)))
        return wt, received
    yield start
    for wt in threads:
        wt.stop_and_join()
    assert not running_threads()


class Starter(QtCore.QObject):
    """Starts jobs in the worker's thread the way the window does: through queued signals."""

    run = QtCore.Signal(object)
    calibrate = QtCore.Signal(str)


def call_run(wt, config):
    wt.starter.run.emit(config)


def test_merge_batches_keeps_order_and_joins_text():
    a = RecordBatch(steps=[step(0, Phase.PREFILL, 0, 1, prefill=4)], text={1: "he"})
    b = RecordBatch(steps=[step(1, Phase.DECODE, 1, 1, decode=1)], text={1: "llo", 2: "x"})
    merged = merge_batches([a, b])
    assert [s.step for s in merged.steps] == [0, 1]
    assert merged.text == {1: "hello", 2: "x"}


def test_thousands_of_steps_arrive_coalesced_and_in_order(qtbot, start_worker):
    n = 20_000

    def fast_run(config, emit, should_stop):
        for i in range(n):
            emit(RecordBatch(steps=[step(i, Phase.DECODE, float(i), 0.001, decode=1)]))
        return RunFinished("fast")

    wt, received = start_worker(fast_run)
    with qtbot.waitSignal(wt.worker.finished, timeout=60_000):
        call_run(wt, None)
    batches = [b for kind, b in received if kind == "records"]
    steps = [s.step for b in batches for s in b.steps]
    assert steps == list(range(n))
    assert len(batches) < n // 10    # merged: far fewer signals than steps


def test_events_flush_pending_records_first(qtbot, start_worker):
    def run(config, emit, should_stop):
        emit(Progress("loading", None))
        emit(RecordBatch(steps=[step(0, Phase.PREFILL, 0, 1, prefill=3)]))
        emit(RecordBatch(steps=[step(1, Phase.DECODE, 1, 1, decode=1)]))
        emit(RequestsArrived([7], [2.0], [5]))
        emit(RecordBatch(steps=[step(2, Phase.DECODE, 2, 1, decode=1)]))
        return RunFinished("ordered")

    wt, received = start_worker(run)
    with qtbot.waitSignal(wt.worker.finished, timeout=10_000):
        call_run(wt, None)
    kinds = [k for k, _ in received]
    assert kinds[0] == "event" and kinds[-1] == "finished"
    arrived = kinds.index("event", 1)
    before = [s.step for k, b in received[:arrived] if k == "records" for s in b.steps]
    after = [s.step for k, b in received[arrived:] if k == "records" for s in b.steps]
    assert before == [0, 1] and after == [2]


def test_a_failure_is_one_line_and_the_thread_runs_the_next_job(qtbot, start_worker):
    calls = []

    def run(config, emit, should_stop):
        calls.append(config)
        if config == "bad":
            emit(RecordBatch(steps=[step(0, Phase.PREFILL, 0, 1, prefill=3)]))
            raise InputError("unknown model 'nope'\nsecond line")
        return RunFinished("ok")

    wt, received = start_worker(run)
    with qtbot.waitSignal(wt.worker.failed, timeout=10_000) as failed:
        call_run(wt, "bad")
    assert failed.args == ["unknown model 'nope'"]
    assert received[0][0] == "records"      # the partial records still came out
    with qtbot.waitSignal(wt.worker.finished, timeout=10_000) as finished:
        call_run(wt, "good")
    assert finished.args[0].run_id == "ok" and calls == ["bad", "good"]


def test_stop_ends_a_run_at_the_next_step_boundary(qtbot, start_worker):
    def endless(config, emit, should_stop):
        i = 0
        while not should_stop():
            emit(RecordBatch(steps=[step(i, Phase.DECODE, float(i), 1.0, decode=1)]))
            i += 1
        return RunFinished("endless", stopped=True)

    wt, received = start_worker(endless)
    with qtbot.waitSignal(wt.worker.records, timeout=10_000):
        call_run(wt, None)
    with qtbot.waitSignal(wt.worker.finished, timeout=5_000) as finished:
        wt.worker.request_stop()
    assert finished.args[0].stopped


def test_calibration_writes_this_machines_profile(qtbot, start_worker):
    def measure(device, progress):
        progress("matrix multiply, fp32", 0.5)
        return GpuProfile(key=LOCAL_KEY, name="Test CPU", vendor="test", memory_gb=8.0, bandwidth_gbs=20.0,
                          tflops={"fp32": 0.5}, source="measured in a test", measured=True)

    wt, received = start_worker(measure=measure)
    with qtbot.waitSignal(wt.worker.calibrated, timeout=10_000) as done:
        wt.starter.calibrate.emit("cpu")
    profile, path = done.args
    assert profile.name == "Test CPU" and path.endswith(".toml")
    assert find_profile(LOCAL_KEY).bandwidth_gbs == 20.0
    assert received[0][0] == "event" and received[0][1].fraction == 0.5
