"""The client workers as Ray actors on a running Ray cluster (`load --endpoint URL --ray HOST:PORT`).

When one host's cores cannot hold the streams, the same workers (backend.targets.remote.worker,
unchanged: one event loop and its own connection pools each) run as actors spread over the
cluster's nodes, one core each. The coordinator keeps the workload's arrival schedule and talks
to each actor in the worker protocol's own frames (backend.protocol's CLIENT channel): commands go in
numbered batches (an async actor may start calls out of order; the actor feeds them to its worker in
number order), and a long poll brings back what the worker wrote.

Clocks. Another host's monotonic clock has another origin, so before the run each actor's offset
to the coordinator's clock is measured NTP-style: a few round trips, keeping the one with the
least round-trip time; the offset is the midpoint of that trip minus the actor's reading, and it
is certain to within half that trip. The actor's worker is then started at the coordinator's t0
on its own clock, so every time it sends back is already on the coordinator's clock.

A lost actor (killed, its node gone) ends its long poll with an error: its requests in flight and
those it held fail with the reason, and the run goes on with the others.
"""
from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

from backend.errors import InputError, RunError, one_line
from backend.protocol import Channel, Go, Job, Lost, Message, Side, Stats, check, frame, split_frames
from backend.targets.remote.pool import Dispatching

CLOCK_ROUNDS = 8      # round trips per actor to measure its clock offset
DRAIN_S = 0.2         # an actor's long poll returns after this long with nothing to say
START_TIMEOUT_S = 120.0
MAX_REASON = 200


def connect(address: str) -> None:
    """Join the Ray cluster at HOST:PORT as a driver; InputError with one line if that cannot be."""
    try:
        import ray
    except ImportError:
        raise InputError("--ray needs Ray: pip install 'phasescope[ray]'") from None
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"--ray {address!r}: expected the head's HOST:PORT, e.g. 10.0.0.1:6379")
    try:   # ray.init retries an unreachable address for a long time: ask the port first
        socket.create_connection((host, int(port)), timeout=5.0).close()
    except OSError as exc:
        raise InputError(f"--ray {address}: cannot reach a Ray cluster there ({exc.strerror or exc})") from None
    import backend
    try:
        # the workers run this very backend: shipped to the cluster, so other hosts need only Ray and the deps
        ray.init(address=address, logging_level="ERROR", log_to_driver=False, configure_logging=False,
                 runtime_env={"py_modules": [str(Path(backend.__file__).parent)]})
    except Exception as exc:   # ConnectionError, or a version mismatch with the cluster
        raise InputError(f"--ray {address}: {one_line(exc, limit=MAX_REASON)}") from None


def disconnect() -> None:
    import ray
    ray.shutdown()


def cluster_cpus() -> int:
    import ray
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


class _Outbox:
    """The worker's stdout inside an actor: its frames wait here for the coordinator's next poll."""

    def __init__(self):
        self.parts: list[bytes] = []
        self.ready = asyncio.Event()

    def write(self, data: bytes) -> None:
        self.parts.append(data)
        self.ready.set()

    def flush(self) -> None:
        pass


class ClientActor:
    """One client worker in a Ray actor (async: its methods share the worker's event loop)."""

    def __init__(self):
        self.outbox: _Outbox | None = None
        self.reader: asyncio.StreamReader | None = None
        self.task: asyncio.Task | None = None
        self.next_seq = 0
        self.held: dict[int, bytes] = {}

    async def clock(self) -> float:
        return time.perf_counter()

    async def where(self) -> str:
        return socket.gethostname()

    async def start(self, job: Job) -> None:
        from backend.targets.remote.worker import Worker
        self.outbox = _Outbox()
        self.reader = asyncio.StreamReader(limit=1 << 26)
        self.task = asyncio.get_running_loop().create_task(Worker(job, self.outbox).run(self.reader))

    async def command(self, seq: int, lines: bytes) -> None:
        self.held[seq] = lines
        while self.next_seq in self.held:
            data = self.held.pop(self.next_seq)
            self.next_seq += 1
            if data:
                self.reader.feed_data(data)
            else:   # the coordinator is done with this worker
                self.reader.feed_eof()

    async def drain(self) -> bytes:
        """What the worker wrote since the last call; waits up to DRAIN_S for something."""
        if not self.outbox.parts:
            if self.task.done():
                self.task.result()   # its failure, if it failed
                return b""
            try:
                await asyncio.wait_for(self.outbox.ready.wait(), DRAIN_S)
            except asyncio.TimeoutError:
                pass
        self.outbox.ready.clear()
        data, self.outbox.parts = b"".join(self.outbox.parts), []
        return data


def measure_offset(read_clock, rounds: int = CLOCK_ROUNDS) -> tuple[float, float, float]:
    """(offset s, uncertainty s, least round trip s) of the clock `read_clock` reads remotely, such
    that our clock = theirs + offset, with the true offset within offset +- uncertainty."""
    best = None
    for _ in range(rounds):
        t1 = time.perf_counter()
        theirs = read_clock()
        t4 = time.perf_counter()
        if best is None or t4 - t1 < best[0]:
            best = (t4 - t1, (t1 + t4) / 2.0 - theirs)
    rtt, offset = best
    return offset, rtt / 2.0, rtt


class RayWorkerPool(Dispatching):
    """WorkerPool's interface (backend.targets.remote.pool), over Ray actors."""

    ALL_GONE = "every client worker was lost"

    def __init__(self, num_workers: int, job: Job, on_message, name: str = "phasescope"):
        self.name = name   # the actors are named NAME-client-K (seen in `ray list actors`)
        self.num_workers = num_workers
        self.job = job
        self.on_message = on_message
        self.actors: list = []
        self.inflight: list[set[int]] = [set() for _ in range(num_workers)]
        self.stats: list[Stats | None] = [None] * num_workers
        self.exited = [asyncio.Event() for _ in range(num_workers)]
        self.crashes: list[str] = []
        self.clocks: list[dict] = []           # per worker: host, offset, uncertainty (run.json's "ray")
        self._ready = [asyncio.Event() for _ in range(num_workers)]
        self._readers: list[asyncio.Task] = []
        self._outgoing: list[list[bytes]] = [[] for _ in range(num_workers)]
        self._seq = [0] * num_workers
        self._flush_soon = False
        self._next = 0

    async def start(self) -> None:
        import ray
        remote = ray.remote(num_cpus=1, max_restarts=0, scheduling_strategy="SPREAD")(ClientActor)
        self.actors = [remote.options(name=f"{self.name}-client-{k}").remote() for k in range(self.num_workers)]
        loop = asyncio.get_running_loop()
        try:
            hosts = await asyncio.wait_for(asyncio.gather(*(a.where.remote() for a in self.actors)), START_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise RunError(f"the Ray cluster did not place {self.num_workers} client workers within "
                           f"{START_TIMEOUT_S:.0f} s (one CPU each)") from None
        except Exception as exc:
            raise RunError(f"a client worker failed to start on the Ray cluster: {one_line(exc, limit=MAX_REASON)}") \
                from None
        for k, actor in enumerate(self.actors):
            offset, uncertainty, rtt = await loop.run_in_executor(
                None, measure_offset, lambda a=actor: ray.get(a.clock.remote()))
            self.clocks.append({"worker": k, "host": hosts[k], "offset_ms": offset * 1000.0,
                                "uncertainty_ms": uncertainty * 1000.0, "rtt_ms": rtt * 1000.0, "lost": None})
            await actor.start.remote(check(Channel.CLIENT, Side.COORDINATOR, self.job))
            self._readers.append(asyncio.create_task(self._read(k)))
        deadline = loop.time() + START_TIMEOUT_S
        while not all(r.is_set() or e.is_set() for r, e in zip(self._ready, self.exited)):
            if loop.time() > deadline:
                raise RunError(f"the client workers did not start within {START_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.05)
        if any(e.is_set() for e in self.exited):
            raise RunError(f"a client worker failed to start: {self.crashes[0] if self.crashes else '?'}")

    def go(self, t0: float) -> None:
        for k in range(self.num_workers):   # the coordinator's t0 on each actor's own clock
            self.send(k, Go(t0 - self.clocks[k]["offset_ms"] / 1000.0))

    def send(self, k: int, msg: Message) -> None:
        """Queued, and sent once per pass of the loop: one actor call carries every frame of that pass."""
        if self.exited[k].is_set():
            return
        self._outgoing[k].append(frame(Channel.CLIENT, Side.COORDINATOR, msg))
        if not self._flush_soon:
            self._flush_soon = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self, eof: bool = False) -> None:
        self._flush_soon = False
        for k, lines in enumerate(self._outgoing):
            if (lines or eof) and not self.exited[k].is_set():
                self._call(k, b"".join(lines))
                if eof:
                    self._call(k, b"")
            self._outgoing[k] = []

    def _call(self, k: int, data: bytes) -> None:
        self.actors[k].command.remote(self._seq[k], data)   # its failure shows in the actor's long poll
        self._seq[k] += 1

    async def wait_all(self) -> None:
        await asyncio.gather(*(e.wait() for e in self.exited))

    async def close(self) -> None:
        import ray
        if not self.actors:   # none was created
            return
        self._flush(eof=True)
        try:
            await asyncio.wait_for(asyncio.gather(*self._readers, return_exceptions=True), 5.0)
        except asyncio.TimeoutError:
            pass
        for task in self._readers:
            task.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
        for actor in self.actors:
            ray.kill(actor, no_restart=True)

    async def _read(self, k: int) -> None:
        actor, buffer = self.actors[k], b""
        try:
            while True:
                data = await actor.drain.remote()
                if not data and self.stats[k] is not None:
                    break
                messages, buffer = split_frames(buffer + data)
                if any(self.receive(k, check(Channel.CLIENT, Side.CLIENT, msg)) for msg in messages):
                    break
        except asyncio.CancelledError:
            raise
        except Exception as exc:   # the actor died (ray.kill, its process or node lost) or its worker failed
            why = f"client worker {k} on {self.clocks[k]['host']} was lost: {_reason(exc)}"
            self.clocks[k]["lost"] = why
            self.crashes.append(why)
            self.exited[k].set()   # before the message: nothing more is sent to it
            self.on_message(k, Lost(sorted(self.inflight[k]), why))
            self.inflight[k].clear()
        finally:
            self.exited[k].set()


def _reason(exc: BaseException) -> str:
    """Ray's actor errors run to many lines: the one that says why ("... because it was killed by
    `ray.kill`", "... because its node died"), else the first."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    why = next((line for line in lines if "because" in line), None)
    return (why or one_line(exc, typed=True))[:MAX_REASON]
