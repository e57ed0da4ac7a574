"""The engine in a child process, so that watching a run does not change what it measures.

In the window's own process the engine's Python glue waits for the GIL while the views paint,
its threads compete with painting for the cores, and a crash in a C kernel, a CUDA fault or an
out-of-memory kill takes the window down with it. So the window's runs execute here: a fresh
interpreter (never a fork: torch and Qt do not survive one) that imports no Qt and owns the
model, the KV cache and the engine loop. It is started by backend.launcher, with one socket
for the pipe. It stays alive between runs with the model loaded; a run on another model,
device or dtype starts a fresh one.

`EngineProcess.execute` has `session.execute`'s signature, so the window's worker calls it in
its place; the headless CLI keeps running in its own process (it is the reference). The wire
is one socket of backend.protocol's ENGINE channel:

    window -> engine   UseTarget (first) | Run | Warm | Calibrate | Fit | Stop | Quit
    engine -> window   Events (records merged, at most Throttle.HZ sends a second)
                       | Finished | Calibrated | Fitted | Warmed | InputFailed | Failed

Warm is sent before the window is built (backend/engine/preload.py), when it opens and when the
model changes, so that the process is up and the model loaded before the first Run (a model that
fails to load here fails again, with its reason, when the run asks for it). Nobody waits for it:
its stages (compiling, loading, probing) come back as Events and its end as Warmed, read when the
next job starts. A job sent while a Warm is still under way waits for it in the child, so the
window's side hands that job the stage the Warm is in and the stages after it, and drops those of
a Warm already over.

Stop is certain: the engine stops at its next step boundary, and one that has not answered
within STOP_GRACE_S (a long prefill, a hung kernel) is ended; the records so far are kept.

A CUDA fault (a device-side assert, an illegal address: errors.is_device_fault) leaves the
child's CUDA context unusable, every later call failing the same way: the child answers the job
with the error and exits, and the window's side ends it too, so the next run starts a fresh one.
"""
from __future__ import annotations

import os
import sys
import time
import weakref
from dataclasses import dataclass
from dataclasses import replace
from functools import partial
from multiprocessing.connection import Connection
from typing import Callable

from backend.launcher import Child, child_started, describe_exit, end_process, start_child, wait_for
from backend.errors import InputError, RunError, is_device_fault, one_line
from backend.events import EngineStatus, ModelLoaded, Progress, RequestsArrived, RunFinished, Throttle, coalesce
from backend.protocol import (Calibrate, Calibrated, Channel, Events, Failed, Finished, Fit, Fitted, InputFailed,
                              Port, ProtocolError, Quit, Run, Side, Stop, UseTarget, Warm, Warmed)
from backend.records import RecordBatch
from backend.run_info import RunInfo

STATUS_EVERY_S = 1.0   # the engine's CPU use, for the window's status bar
STOP_GRACE_S = 2.0     # after Stop, how long the engine has to reach a step boundary
POLL_S = 0.05          # how often the window's side looks at Stop and at the child's health
QUIT_WAIT_S = 2.0
RESTART_NOTE = "note: a CUDA error leaves the engine process's device unusable; the next run starts a fresh one"

_live: weakref.WeakSet[EngineProcess] = weakref.WeakSet()


def live_engines() -> list[int]:
    """Pids of the engine processes still running (tests fail when one outlives them)."""
    return [e.pid for e in list(_live) if e.is_alive()]


class EngineProcess:
    """The window's side: starts the child, sends it runs, turns its messages back into events.

    `target` replaces the child's run function (a picklable callable with execute's signature,
    e.g. a benchmark's synthetic engine); by default the child runs session.execute with a
    ModelCache, so a second run on the same model does not reload it.
    """

    def __init__(self, target: Callable | None = None):
        self._target = target
        self._process: Child | None = None
        self._port: Port | None = None
        self._key: tuple | None = None   # model, device, dtype of the model the child holds
        _live.add(self)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self.is_alive() else None

    def is_alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # ---- runs ---------------------------------------------------------------------------------

    def execute(self, config, emit: Callable[[object], None], should_stop: Callable[[], bool]) -> RunFinished:
        """Run config in the child, emitting its events here; returns its RunFinished.

        A child that dies part way gives a RunFinished with the error in one line and the
        records received so far; InputError and RunError from the child are raised here."""
        key = self._model_key(config)
        if self.is_alive() and key is not None and self._key is not None and key != self._key:
            self.close()   # another model: a fresh process gives its memory back whole
        self._ensure_started()
        if key is not None:
            self._key = key
        if (stage := self._warm_stage()) is not None:
            emit(stage)   # the run waits for that Warm to end: say what it is doing
        received = _Received(config)
        self._send(Run(config))
        answer = self._receive(emit, should_stop, received)
        if isinstance(answer, Finished):
            if is_device_fault(answer.finished.error):
                emit(Progress(RESTART_NOTE))
                self.close()
            return answer.finished
        if answer.stopped:
            emit(Progress(f"note: the engine did not stop within {STOP_GRACE_S:.0f} s; its process was ended "
                          "and the next run starts a fresh one"))
            return received.finished(stopped=True)
        return received.finished(error=f"engine process {answer.how} after {received.where()}")

    def start(self) -> None:
        """Start the child now (it imports torch and the engine) without loading anything."""
        self._ensure_started()

    def warm(self, config) -> None:
        """Start the child now, with the config's model loaded in it, so that a run of it starts at
        once; another model's child is ended first (as execute does). Returns without waiting."""
        key = self._model_key(config)
        if self.is_alive() and key is not None and self._key is not None and key != self._key:
            self.close()
        self._ensure_started()
        if key is not None:
            self._key = key
        self._send(Warm(config))

    @staticmethod
    def _model_key(config) -> tuple | None:
        """What a child's loaded model is known by: None for a remote server (no model here)."""
        return None if config.endpoint is not None else (config.model.name, config.model.device, config.model.dtype)

    def calibrate(self, device: str, progress: Callable[[str, float], None]):
        """calibrate.calibrate in the child, on all its cores; progress as it goes."""
        self._ensure_started()
        self._warm_stage()
        self._send(Calibrate(device))

        def forward(event) -> None:
            if isinstance(event, Progress):
                progress(event.message, event.fraction or 0.0)
        answer = self._receive(forward, lambda: False, None)
        if not isinstance(answer, Calibrated):
            raise RunError(f"engine process {answer.how} during calibration")
        return answer.profile

    def fit(self, runs_dir: str, device: str, threads: int | None, progress: Callable[[str, float], None],
            should_stop: Callable[[], bool]):
        """`calibrate --fit` in the child (backend/fitting.py): the standard runs measured into
        runs_dir, the cost model fitted and written into this machine's profile; its FitReport."""
        self._ensure_started()
        self._warm_stage()
        self._key = None   # the child's model cache is not used by the standard runs
        self._send(Fit(runs_dir, device, threads))

        def forward(event) -> None:
            if isinstance(event, Progress):
                progress(event.message, event.fraction or 0.0)
        answer = self._receive(forward, should_stop, None)
        if isinstance(answer, _Gone) and answer.stopped:
            raise RunError("stopped: nothing was fitted")
        if not isinstance(answer, Fitted):
            raise RunError(f"engine process {answer.how} while fitting")
        return answer.report

    def _receive(self, emit, should_stop, received: _Received | None) -> Finished | Calibrated | Fitted | _Gone:
        """Until the job's last message: its answer, or _Gone when Stop had to end the process or it died."""
        stop_sent = None
        while True:
            if stop_sent is None and should_stop():
                self._send(Stop())
                stop_sent = time.monotonic()
            if stop_sent is not None and time.monotonic() - stop_sent > STOP_GRACE_S:
                self._end()
                return _Gone(stopped=True)
            try:
                if not self._port.poll(POLL_S):
                    if not self.is_alive():
                        return _Gone(how=self._reap())
                    continue
                message = self._port.recv()
            except (EOFError, OSError):   # the child is gone: its end of the pipe closed
                return _Gone(how=self._reap())
            if isinstance(message, Events):
                for event in message.events:
                    if received is not None:
                        received.see(event)
                    emit(event)
            elif isinstance(message, (Finished, Calibrated, Fitted)):
                return message
            elif isinstance(message, Warmed):
                continue   # the Warm this job waited for is over
            elif isinstance(message, InputFailed):
                raise InputError(message.line)
            else:
                if is_device_fault(message.line):
                    self.close()   # the child is on its way out: the next job starts a fresh one
                    raise RunError(f"{message.line} ({RESTART_NOTE.removeprefix('note: ')})")
                raise RunError(message.line)

    def _warm_stage(self) -> Progress | None:
        """Read, without waiting, what Warms sent since the last job: the stage of one still under way
        (the next job waits for it), or None when every Warm sent has ended."""
        stage = None
        try:
            while self._port.poll(0):
                message = self._port.recv()
                if isinstance(message, Events):
                    stage = next((e for e in reversed(message.events) if isinstance(e, Progress)), stage)
                elif isinstance(message, Warmed):
                    stage = None
        except (EOFError, OSError):
            pass   # the child is gone: the job's receiving loop says how
        return stage

    # ---- the process --------------------------------------------------------------------------

    def _ensure_started(self) -> None:
        if self.is_alive():
            return
        self._reap()
        # the child gets the parent's import path, so that a benchmark's target unpickles there
        self._process, conn = start_child("backend.engine.process", "serve_fd")
        self._port = Port(conn, Channel.ENGINE, Side.WINDOW)
        self._key = None
        self._send(UseTarget(self._target))

    def _send(self, message) -> None:
        try:
            self._port.send(message)
        except OSError:
            pass   # the child is gone; the receiving loop notices

    def _end(self) -> None:
        """Terminate the child, then kill it if it does not go."""
        if self._process is None:
            return
        end_process(self._process)
        self._reap()

    def _reap(self) -> str:
        """Forget the child (it has ended); how it ended, in words."""
        if self._process is None:
            return describe_exit(None)
        wait_for(self._process, 1.0)
        how = describe_exit(self._process.returncode)
        if self._port is not None:
            self._port.close()
        self._process = self._port = self._key = None
        return how

    def close(self) -> None:
        """End the child: asked to quit, then terminated if it does not within QUIT_WAIT_S."""
        if self._process is None:
            return
        if self.is_alive():
            self._send(Quit())
            wait_for(self._process, QUIT_WAIT_S)
        self._end()


@dataclass(slots=True)
class _Gone:
    """A job that ended without its answer: Stop had to end the process, or it died (how, in words)."""

    stopped: bool = False
    how: str = ""


class _Received:
    """What the window's side has seen of a run, to report it if the child dies or is ended."""

    def __init__(self, config):
        from backend.results.summary import RunAccumulator
        self.config = config
        self.accumulator = RunAccumulator()
        self.run_id = ""
        self.last_step: int | None = None
        self.info = RunInfo()

    def see(self, event) -> None:
        if isinstance(event, RecordBatch):
            self.accumulator.add(event)
            if event.steps:
                self.last_step = event.steps[-1].step
                self.run_id = self.run_id or event.steps[0].run_id
        elif isinstance(event, ModelLoaded):
            host = self.info.local   # the process's threads, if its status came first
            self.info = event.info()
            if host is not None:
                self.info.local = replace(self.info.host, engine_pid=host.engine_pid, threads=host.threads,
                                          affinity=host.affinity)
        elif isinstance(event, EngineStatus):
            self.info.local = replace(self.info.host, engine_pid=event.pid, threads=event.threads,
                                      affinity=event.affinity)

    def where(self) -> str:
        return "before its first step" if self.last_step is None else f"step {self.last_step}"

    def finished(self, stopped: bool = False, error: str | None = None) -> RunFinished:
        from backend.records import RunData
        from backend.config import config_dict
        from backend.records import new_run_id
        run_id = self.run_id or new_run_id()
        summary = self.accumulator.summary(self.config.slo_ttft_ms, self.config.slo_tpot_ms)
        data = RunData(run_id=run_id, config=config_dict(self.config), info=self.info,
                       requests=list(self.accumulator.requests), summary=summary)
        return RunFinished(run_id, summary, stopped, error, data)


# ---- the child --------------------------------------------------------------------------------

def serve_fd(fd: str) -> None:
    """The child's entry point (backend.launcher): its end of the socket's file descriptor, then the
    run function (UseTarget: a callable or None)."""
    port = Port(Connection(int(fd)), Channel.ENGINE, Side.ENGINE)
    try:
        first = port.recv()
    except (EOFError, OSError):
        return
    if not isinstance(first, UseTarget):
        raise ProtocolError(f"the engine process's first message must be 'target', not '{first.op.value}'")
    serve(port, first.run)


def serve(port: Port, target: Callable | None) -> None:
    """The child's main loop: one job at a time until Quit or the window's end of the pipe closes."""
    child_started()
    models = None
    if target is None:
        from backend.loaders.cache import ModelCache
        from backend.session import execute
        models = ModelCache()
        target = partial(execute, retain_records=False, models=models)
    while True:
        try:
            message = port.recv()
        except (EOFError, OSError):
            return
        if isinstance(message, Quit):
            return
        if isinstance(message, Warm):
            _warm(port, models, message.config)
            continue
        job = _Job(port)
        if isinstance(message, Run):
            job.run(target, message.config, models)
        elif isinstance(message, Calibrate):
            job.calibrate(message.device)
        elif isinstance(message, Fit):
            job.fit(message.runs_dir, message.device, message.threads)
        # a Stop that came after its run had already finished: nothing to stop
        if job.quit:
            return


def _warm(port: Port, models, config) -> None:
    """Load the model a run of `config` will ask for (a local model only: a simulation or a remote
    server has none here), its stages sent as they begin, then Warmed; any failure is left for the
    run itself to report."""
    if models is not None and not config.simulate and config.endpoint is None:
        from backend.engine.threads import apply_threads
        try:
            apply_threads(config.threads)
            models.get(config, lambda event: port.send(Events([event])))
        except Exception:   # the run loads it again and says why it cannot
            pass
    _remember(models, config)
    try:
        port.send(Warmed())
    except OSError:
        pass   # the window's end is closed: the loop reads its EOF next and ends


def _remember(models, config) -> None:
    """What the next start of the app preloads (backend/engine/preload.py): this config's model where it
    is the one loaded here, nothing after a simulation, a remote run or a model that did not load."""
    if models is None:
        return   # a benchmark's own run function: nothing the app would start with
    from backend.engine import preload
    preload.remember(config if models.holds(config) else None)


class _Job:
    """One run in the child: its events batched onto the pipe, Stop read from it at step boundaries."""

    def __init__(self, port: Port):
        self.port = port
        self.stopped = False
        self.quit = False
        self.pending: list = []
        self.throttle = Throttle()
        self.last_status = 0.0

    def run(self, target: Callable, config, models=None) -> None:
        def work():
            try:
                return target(config, self.emit, self.should_stop)
            finally:   # kept before the answer: the window may close as soon as it has it
                _remember(models, config)
        self._answer_with(Finished, work)

    def calibrate(self, device: str) -> None:
        from backend.roofline.calibrate import calibrate
        from backend.engine.threads import apply_threads

        def measure():
            apply_threads(None)   # the machine's measure: every core, not the last run's share
            return calibrate(device, lambda message, fraction: self.emit(Progress(message, fraction)))
        self._answer_with(Calibrated, measure)

    def fit(self, runs_dir: str, device: str, threads: int | None) -> None:
        from backend.fitting import measure_and_fit
        self._answer_with(Fitted, lambda: measure_and_fit(runs_dir, device, threads, self.say, self.should_stop))

    def say(self, line: str) -> None:
        """A fit's progress line; the bar moves by the standard run it names (batch, prompt, load, fit)."""
        stages = ("measuring batch ", "measuring prompt ", "measuring load ", "fitting")
        done = next((i for i, stage in enumerate(stages) if line.startswith(stage)), None)
        self.emit(Progress(line, None if done is None else done / len(stages)))

    def _answer_with(self, answer: type[Finished | Calibrated | Fitted], work: Callable[[], object]) -> None:
        """Do the job and send its result as `answer`, or its failure in one line."""
        try:
            result = work()
        except InputError as exc:
            self.answer(InputFailed(str(exc)))
        except Exception as exc:   # one line to the window; the process stays up for the next run
            self.quit = self.quit or is_device_fault(exc)   # but not after a CUDA fault: its context is lost
            self.answer(Failed(one_line(exc, typed=True)))
        else:
            self.quit = self.quit or (isinstance(result, RunFinished) and is_device_fault(result.error))
            self.answer(answer(result))

    def answer(self, message: Finished | Calibrated | Fitted | InputFailed | Failed) -> None:
        self.flush(status=True)   # the last status covers the run's end, however short it was
        self.port.send(message)

    def should_stop(self) -> bool:
        """Called by the engine at every step boundary (and while it idles): Stop, and overdue records."""
        while not self.stopped and self.port.poll():
            message = self.port.recv()
            self.stopped = isinstance(message, (Stop, Quit))
            self.quit = isinstance(message, Quit)
        if self.pending and self.throttle.due():
            self.flush()
        return self.stopped

    def emit(self, event) -> None:
        self.pending.append(event)
        if not isinstance(event, (RecordBatch, RequestsArrived)) or self.throttle.due():
            self.flush()

    def flush(self, status: bool = False) -> None:
        """Send what is pending in one message: arrivals (merged), records (merged), then other events in
        order, and the engine's status when a second has passed since the last (or when asked)."""
        now = time.monotonic()
        arrivals, batch, others = coalesce(self.pending)
        events = [e for e in (arrivals, batch) if e is not None] + others
        if status or now - self.last_status >= STATUS_EVERY_S:
            events.append(engine_status())
            self.last_status = now
        self.pending = []
        self.throttle.sent()
        if events:
            self.port.send(Events(events))


def engine_status() -> EngineStatus:
    from backend.engine.threads import current_affinity
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else 0
    return EngineStatus(os.getpid(), threads, current_affinity(), time.process_time(), time.monotonic(),
                        any(name == "PySide6" or name.startswith("PySide6.") for name in sys.modules))
