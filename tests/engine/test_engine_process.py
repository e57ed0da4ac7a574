"""The engine in its own process: the same records as a headless run, the model kept loaded,
crashes and a stop that does not answer reported in one line with the records so far."""
import os
import signal
import time

import pytest

from backend.config import BatchRun, EngineConfig, ModelChoice, RunConfig
from backend.engine import preload
from backend.engine.process import STOP_GRACE_S, EngineProcess, describe_exit
from backend.errors import InputError, RunError
from backend.events import EngineStatus, ModelLoaded, Progress
from backend.protocol import Events, Warmed
from backend.records import RecordBatch
from backend.session import execute


def batch_config(model="tiny", prompt_len=16, output_len=6, batch=2, threads=1) -> RunConfig:
    return RunConfig(mode="batch", model=ModelChoice(model, "cpu", "float32"),
                     batch=BatchRun(prompt_len=prompt_len, output_len=output_len, batch=batch),
                     engine=EngineConfig(policy="static", max_batch=batch), threads=threads)


@pytest.fixture(autouse=True)
def own_config(tmp_path, monkeypatch):
    """What the engine process keeps for the app's next start goes to this test's folder, not the user's."""
    monkeypatch.setenv("PHASESCOPE_CONFIG_DIR", str(tmp_path / "config"))


@pytest.fixture
def engine():
    process = EngineProcess()
    yield process
    process.close()
    assert not process.is_alive()


def steps_of(events) -> list:
    return [s for e in events if isinstance(e, RecordBatch) for s in e.steps]


def test_a_run_in_the_engine_process_gives_the_records_of_a_headless_run(engine):
    config = batch_config()
    events = []
    result = engine.execute(config, events.append, lambda: False)
    assert result.error is None and not result.stopped
    status = [e for e in events if isinstance(e, EngineStatus)]
    assert status and status[0].pid != os.getpid() and not status[0].imports_qt
    assert status[0].threads == 1 and len(status[0].affinity) == 1

    headless = []
    config.threads = None   # in this process: leave the test's own cores alone
    reference = execute(config, headless.append, lambda: False)
    ours, theirs = steps_of(events), steps_of(headless)
    assert [(s.phase, s.num_tokens, s.num_requests) for s in ours] == \
        [(s.phase, s.num_tokens, s.num_requests) for s in theirs]
    tokens = sum(len(e.tokens) for e in events if isinstance(e, RecordBatch))
    assert tokens == sum(len(e.tokens) for e in headless if isinstance(e, RecordBatch)) == 2 * 6
    assert result.summary.num_finished == reference.summary.num_finished == 2
    assert result.data.info.host.threads == 1 and result.data.info.host.affinity == status[0].affinity


def test_a_second_run_on_the_same_model_does_not_reload_it(engine):
    first, second = [], []
    engine.execute(batch_config(), first.append, lambda: False)
    pid = engine.pid
    engine.execute(batch_config(output_len=3), second.append, lambda: False)
    assert engine.pid == pid
    assert [e.reused for e in first if isinstance(e, ModelLoaded)] == [False]
    assert [e.reused for e in second if isinstance(e, ModelLoaded)] == [True]
    assert not any(isinstance(e, Progress) and e.message.startswith("loading") for e in second)


def test_a_run_sent_during_a_warm_is_told_its_stages_and_finds_the_model_loaded(engine):
    engine.warm(batch_config())   # the child is still starting: the run waits for the Warm in it
    events = []
    result = engine.execute(batch_config(), events.append, lambda: False)
    assert result.error is None
    stages = [e.message for e in events if isinstance(e, Progress)]
    assert stages.count("loading tiny") == 1   # the Warm's, handed on: the run itself loads nothing
    assert [e.reused for e in events if isinstance(e, ModelLoaded)] == [True]
    assert stages.index("loading tiny") < stages.index("warming up")


def test_the_model_a_run_loaded_is_what_the_next_start_preloads(engine):
    assert preload.recall().model.name == "smollm2-135m"   # nothing kept yet: the window's defaults
    engine.execute(batch_config(threads=1), lambda e: None, lambda: False)
    kept = preload.recall()
    assert (kept.model.name, kept.model.device, kept.model.dtype, kept.threads) == ("tiny", "cpu", "float32", 1)
    with pytest.raises(InputError):
        engine.execute(batch_config(model="no-such-model"), lambda e: None, lambda: False)
    assert preload.recall() is None   # a model that did not load is not tried again at the next start


class FakePort:
    """What a child sent and the window's side has not read yet."""

    def __init__(self, messages):
        self.messages = list(messages)

    def poll(self, timeout=0.0):
        return bool(self.messages)

    def recv(self):
        return self.messages.pop(0)


@pytest.mark.parametrize("sent, stage", [
    ([], None),
    ([Events([Progress("compiling")]), Events([Progress("loading tiny")])], "loading tiny"),
    ([Events([Progress("loading tiny")]), Warmed()], None),   # over: not the next job's stage
    ([Events([Progress("loading a")]), Warmed(), Events([Progress("loading b")])], "loading b"),
])
def test_a_job_is_handed_the_stage_of_a_warm_still_under_way_only(sent, stage):
    engine = EngineProcess()
    engine._port = FakePort(sent)
    found = engine._warm_stage()
    assert (found.message if found else None) == stage and not engine._port.messages


@pytest.fixture(scope="module")
def stopped_after_tiny(tmp_path_factory):
    """A run on tiny, then one on smollm2-135m stopped inside its prefill, on one EngineProcess: the
    second model's start and the stop are both asserted on the one (slow) smollm2 child."""
    events, running, pids = [], [], []

    def emit(event):
        events.append(event)
        if isinstance(event, Progress) and event.message == "running":
            running.append(time.monotonic())
            pids.append(engine.pid)

    def should_stop():   # Stop once the prefill is under way
        return bool(running) and time.monotonic() - running[0] > 0.3
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PHASESCOPE_CONFIG_DIR", str(tmp_path_factory.mktemp("config")))
        engine = EngineProcess()
        try:
            engine.execute(batch_config(), lambda e: None, lambda: False)
            tiny_pid = engine.pid
            # A prefill of 4 x 2,000 tokens on one thread takes far longer than the grace period.
            result = engine.execute(batch_config(model="smollm2-135m", prompt_len=2000, output_len=4, batch=4),
                                    emit, should_stop)
            ended = time.monotonic()
            alive = engine.is_alive()
        finally:
            engine.close()
    return tiny_pid, pids, result, events, running, ended, alive


def test_another_model_starts_a_fresh_process(stopped_after_tiny):
    tiny_pid, pids, *_ = stopped_after_tiny
    assert pids and pids[0] is not None and pids[0] != tiny_pid


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGKILL])
def test_a_crashed_engine_is_reported_in_one_line_with_the_records_so_far(engine, sig):
    events = []
    killed = []

    def emit(event):
        events.append(event)
        if not killed and len(steps_of(events)) >= 5:
            os.kill(engine.pid, sig)
            killed.append(True)
    result = engine.execute(batch_config(output_len=2000, batch=1), emit, lambda: False)
    assert killed
    assert result.error.startswith(f"engine process ended by signal {int(sig)} ({sig.name}")
    assert "after step" in result.error and "\n" not in result.error
    assert len(steps_of(events)) >= 5 and result.data.run_id == steps_of(events)[0].run_id
    assert not engine.is_alive()
    again = engine.execute(batch_config(), lambda e: None, lambda: False)
    assert again.error is None and again.summary.num_finished == 2


def test_stop_ends_an_engine_that_does_not_reach_a_step_boundary(stopped_after_tiny):
    """A prefill of 4 x 2,000 tokens on one thread takes far longer than the grace period."""
    _, _, result, events, running, ended, alive = stopped_after_tiny
    assert running and result.stopped and result.error is None
    assert ended - running[0] < 0.3 + STOP_GRACE_S + 1.0
    assert any(isinstance(e, Progress) and "did not stop" in e.message for e in events)
    assert not steps_of(events)   # the prefill never finished
    assert not alive


def refusing_target(config, emit, should_stop):
    """A run function for the child (picklable: it is imported there): refuses one thread, fails on two."""
    if config.threads == 1:
        raise InputError("--threads 1: refused here")
    raise ValueError("two threads went wrong")


def test_a_jobs_failures_come_back_as_the_errors_they_were_and_the_process_stays_up():
    engine = EngineProcess(refusing_target)
    try:
        with pytest.raises(InputError, match=r"^--threads 1: refused here$"):
            engine.execute(batch_config(threads=1), lambda e: None, lambda: False)
        pid = engine.pid
        with pytest.raises(RunError, match=r"^ValueError: two threads went wrong$"):
            engine.execute(batch_config(threads=2), lambda e: None, lambda: False)
        assert engine.pid == pid   # the same process answers the next job
    finally:
        engine.close()


def test_exit_codes_read_as_words():
    assert describe_exit(-11) == "ended by signal 11 (SIGSEGV)"
    assert describe_exit(-9).startswith("ended by signal 9 (SIGKILL; the system may have run out of memory")
    assert describe_exit(1) == "exited with status 1"


def faulting_target(config, emit, should_stop):
    """A run function for the child: a CUDA fault, simulated -- raised (threads 1) or in the run's result
    (threads 2, as the engine loop reports a step's failure); any other error on three threads."""
    from backend.events import RunFinished
    from backend.summary import Summary
    if config.threads == 1:
        raise RuntimeError("CUDA error: device-side assert triggered\nCompile with TORCH_USE_CUDA_DSA")
    if config.threads == 2:
        return RunFinished("r1", Summary(), False, "AcceleratorError: CUDA error: an illegal memory access was "
                                                    "encountered", None)
    raise ValueError("not the device's fault")


def test_a_cuda_fault_ends_the_engine_process_and_the_next_run_starts_a_fresh_one():
    engine = EngineProcess(faulting_target)
    try:
        with pytest.raises(RunError, match=r"^RuntimeError: CUDA error: device-side assert triggered \(a CUDA "
                                           r"error leaves the engine process's device unusable"):
            engine.execute(batch_config(threads=1), lambda e: None, lambda: False)
        assert not engine.is_alive()
        events = []
        finished = engine.execute(batch_config(threads=2), events.append, lambda: False)
        assert "illegal memory access" in finished.error and not engine.is_alive()
        assert any(isinstance(e, Progress) and "the next run starts a fresh one" in e.message for e in events)
        with pytest.raises(RunError, match="not the device's fault"):
            engine.execute(batch_config(threads=3), lambda e: None, lambda: False)
        assert engine.is_alive()   # any other failure keeps the process for the next run
    finally:
        engine.close()


def test_which_errors_are_device_faults():
    from backend.errors import is_device_fault
    assert is_device_fault("RuntimeError: CUDA error: device-side assert triggered")
    assert is_device_fault(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert not is_device_fault("out of memory: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert not is_device_fault("ValueError: bad value") and not is_device_fault(None)
