"""The coordinator's side of the client workers: start them, hand out requests, merge what they send.

Each worker (backend.targets.remote.worker) is a fresh interpreter started as a plain subprocess, with
one event loop and connection pools of its own; requests go to the worker with the fewest in
flight. Messages from all workers come back through one callback, in the order they are read,
which is the run's one merged record stream. The messages are backend.protocol's CLIENT channel's,
framed by it on the worker's stdin and stdout.
"""
from __future__ import annotations

import asyncio
import os
from collections import deque
from typing import Callable

from backend.errors import RunError
from backend.launcher import start_piped_child
from backend.protocol import Channel, Crashed, Done, Go, Job, Message, Ready, Send, Side, Stats, frame, read_message

START_TIMEOUT_S = 60.0
STDERR_LINES = 20


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Dispatching:
    """Which worker takes a request, for a pool of local processes and one of Ray actors alike. The pool
    has num_workers, exited (an Event a worker), crashes, inflight (a set of ids a worker), stats, _ready (an
    Event a worker), _next, on_message and send(k, msg); ALL_GONE says how its workers went."""

    ALL_GONE = "every client worker has exited"

    def dispatch(self, request_id: int, at_ms: float, prompt, max_tokens: int, prefer: int | None = None) -> int:
        """Send one request to `prefer` (a closed loop's user stays on its worker, and so on its pooled
        connection) or else the least busy live worker; the worker's index."""
        live = [k for k in range(self.num_workers) if not self.exited[k].is_set()]
        if not live:
            raise RunError(f"{self.ALL_GONE}: {self.crashes[0] if self.crashes else '?'}")
        if prefer in live:
            k = prefer
        else:
            k = min(live, key=lambda i: (len(self.inflight[i]), (i - self._next) % self.num_workers))
            self._next = (k + 1) % self.num_workers
        self.inflight[k].add(request_id)
        self.send(k, Send(request_id, at_ms, prompt, max_tokens))
        return k

    def finished(self, k: int, request_id: int) -> None:
        self.inflight[k].discard(request_id)

    def broadcast(self, msg: Message) -> None:
        for k in range(self.num_workers):
            self.send(k, msg)

    def receive(self, k: int, msg: Message) -> bool:
        """One message from worker k, however it came: True at its last (Done, not passed on)."""
        if isinstance(msg, Ready):
            self._ready[k].set()
        elif isinstance(msg, Stats):
            self.stats[k] = msg
        elif isinstance(msg, Done):
            return True
        self.on_message(k, msg)
        return False


class WorkerPool(Dispatching):
    def __init__(self, num_workers: int, job: Job, on_message: Callable[[int, Message], None]):
        self.num_workers = num_workers
        self.job = job
        self.on_message = on_message
        self.procs: list[asyncio.subprocess.Process] = []
        self.inflight: list[set[int]] = [set() for _ in range(num_workers)]
        self.stats: list[Stats | None] = [None] * num_workers
        self.exited: list[asyncio.Event] = []
        self.crashes: list[str] = []
        self._ready: list[asyncio.Event] = []
        self._stderr: list[deque[str]] = []
        self._readers: list[asyncio.Task] = []
        self._next = 0

    async def start(self) -> None:
        for k in range(self.num_workers):
            proc = await start_piped_child("backend.targets.remote.worker", "main", stream_limit=1 << 26)
            self.procs.append(proc)
            self._ready.append(asyncio.Event())
            self.exited.append(asyncio.Event())
            self._stderr.append(deque(maxlen=STDERR_LINES))
            self._readers.append(asyncio.create_task(self._read(k, proc)))
            self._readers.append(asyncio.create_task(self._read_stderr(k, proc)))
            self.send(k, self.job)
        waits = [asyncio.create_task(e.wait()) for e in self._ready]
        exits = [asyncio.create_task(e.wait()) for e in self.exited]
        try:
            pending = set(waits)
            while pending:
                done, _ = await asyncio.wait(pending | set(exits), timeout=START_TIMEOUT_S,
                                             return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    raise RunError(f"the client workers did not start within {START_TIMEOUT_S:.0f} s")
                if any(e.is_set() for e in self.exited):
                    raise RunError(f"a client worker failed to start: {self.crashes[0] if self.crashes else '?'}")
                pending -= done
        finally:
            for task in waits + exits:
                task.cancel()

    def go(self, t0: float) -> None:
        for k in range(self.num_workers):
            self.send(k, Go(t0))

    def send(self, k: int, msg: Message) -> None:
        stdin = self.procs[k].stdin
        if self.exited[k].is_set() or stdin is None or stdin.is_closing():
            return
        stdin.write(frame(Channel.CLIENT, Side.COORDINATOR, msg))

    async def wait_all(self) -> None:
        await asyncio.gather(*(e.wait() for e in self.exited))

    async def close(self) -> None:
        """End every worker (they have normally said done already); reap them."""
        for proc in self.procs:
            if proc.stdin is not None and not proc.stdin.is_closing():
                proc.stdin.close()
        for proc in self.procs:
            try:
                await asyncio.wait_for(proc.wait(), 5.0)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
        for task in self._readers:
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)

    async def _read(self, k: int, proc: asyncio.subprocess.Process) -> None:
        try:
            while True:
                msg = await read_message(proc.stdout, Channel.CLIENT, Side.COORDINATOR)
                if msg is None or self.receive(k, msg):
                    break
        finally:
            if self.stats[k] is None:   # ended without its report: it crashed
                code = await proc.wait()
                last = next((ln for ln in reversed(self._stderr[k]) if ln.strip()), "")
                self.crashes.append(f"client worker {k} exited with status {code}" + (f": {last}" if last else ""))
                self.on_message(k, Crashed(sorted(self.inflight[k]), self.crashes[-1]))
                self.inflight[k].clear()
            self.exited[k].set()

    async def _read_stderr(self, k: int, proc: asyncio.subprocess.Process) -> None:
        while True:
            line = await proc.stderr.readline()
            if not line:
                return
            self._stderr[k].append(line.decode("utf-8", "replace").rstrip())
