"""Data parallelism simulated: `--dp N` replicas of one model (each tp x pp devices, one scheduler and
one KV cache each) behind a router, on one virtual timeline.

The router sends each arriving request to one replica, by its policy:
  * round-robin: replica 0, 1, ..., N - 1, 0, ... in arrival order;
  * least-loaded: the replica with the fewest requests queued or running (ties: the lowest index),
    as a load balancer that tracks outstanding requests does.
Discrete events in time order: an arrival, or the next step of the replica whose step starts first
(ties: arrivals, then replicas in index order), so a run is deterministic from its seed. Each step
is priced by its replica's SimRunner; its record carries the replica in `worker`.

Speculation (backend/sim/spec.py): each replica has its own speculator (its backoff state, its proposer
and its runner's draws of kept guesses); the guessing moves the replica's step start on by the draft's
priced time, as the engine loop's clock does for one replica.

`ReplicaSet.run` has the engine loop's contract (source, emit, should_stop -> EngineResult), so the
simulated target ends a data-parallel run as it ends any other (backend/targets/local.py drive).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from backend.config import ROUTERS
from backend.engine.loop import EngineResult, record_unfinished, token_records
from backend.engine.request import Request
from backend.errors import InputError, one_line
from backend.events import RequestsArrived
from backend.records import RecordBatch, StepRecord


@dataclass(slots=True)
class _Replica:
    index: int
    scheduler: object
    runner: object
    free_ms: float = 0.0     # when its current step ends
    speculator: object = None   # backend/engine/spec/speculator.py over the replica's SimProposer, or None

    @property
    def load(self) -> int:
        return self.scheduler.num_waiting + self.scheduler.num_running


class Router:
    """Which replica an arriving request goes to (module docstring)."""

    def __init__(self, policy: str, replicas: list[_Replica]):
        if policy not in ROUTERS:
            raise InputError(f"--router {policy!r}: use one of {', '.join(ROUTERS)}")
        self.policy, self.replicas, self.turn = policy, replicas, 0

    def choose(self) -> _Replica:
        if self.policy == "round-robin":
            replica = self.replicas[self.turn % len(self.replicas)]
            self.turn += 1
            return replica
        return min(self.replicas, key=lambda r: (r.load, r.index))


class ReplicaSet:
    """N replicas: make_scheduler() and make_runner() build each one's (a runner has `price(out)` in seconds,
    and a clock its proposer's guessing advances); make_speculator(runner, index), when given, its speculator."""

    def __init__(self, num_replicas: int, make_scheduler: Callable[[], object], make_runner: Callable[[], object],
                 router: str, run_id: str, stop_check_every: int = 64,
                 make_speculator: Callable[[object, int], object] | None = None):
        self.replicas = [_Replica(i, make_scheduler(), make_runner()) for i in range(num_replicas)]
        if make_speculator is not None:
            for replica in self.replicas:
                replica.speculator = make_speculator(replica.runner, replica.index)
        self.router = Router(router, self.replicas)
        self.run_id, self.stop_check_every = run_id, stop_check_every
        self.now_ms = 0.0
        self._requests: dict[int, Request] = {}
        self._announced: set[int] = set()   # requests whose admission time was emitted
        self._step = 0

    def run(self, source, emit, should_stop) -> EngineResult:
        result = EngineResult(self.run_id)
        events = 0
        try:
            while True:
                events += 1
                if events % self.stop_check_every == 0 and should_stop():
                    result.stopped = True
                    break
                moments = []
                nxt = source.next_arrival_ms()
                if nxt is not None:
                    moments.append((nxt, 0, 0))
                moments += [(r.free_ms, 1, r.index) for r in self.replicas if r.scheduler.has_work]
                if not moments:
                    if source.is_exhausted():
                        break
                    raise InputError("the request source is waiting on requests it has not scheduled")
                at, kind, index = min(moments)
                self.now_ms = max(self.now_ms, at)
                if kind == 0:
                    self._arrive(source, emit, at)
                else:
                    self._step_replica(self.replicas[index], source, emit, at)
        except Exception as exc:  # noqa: BLE001 -- the partial run is kept; the caller shows the message
            result.error = one_line(exc, typed=True)
        record_unfinished(self._requests, result, emit)
        return result

    def _arrive(self, source, emit, now: float) -> None:
        arrived = source.due(now)
        if not arrived:
            return
        emit(RequestsArrived([s.request_id for s in arrived], [s.arrival_ms for s in arrived],
                             [len(s.prompt_ids) for s in arrived]))
        for spec in arrived:
            request = Request.from_spec(spec)
            self._requests[request.request_id] = request
            replica = self.router.choose()
            if not replica.scheduler.has_work:
                replica.free_ms = max(replica.free_ms, now)
            replica.scheduler.add(request)

    def _step_replica(self, replica: _Replica, source, emit, start: float) -> None:
        scheduler, speculator = replica.scheduler, replica.speculator
        draft_ms = 0.0
        if speculator is not None and scheduler.num_running:
            # the guesses come before the step, priced on the replica's own clock: the step starts after them
            begun = replica.runner.clock.seconds
            speculator.propose(scheduler.running_requests)
            draft_ms = (replica.runner.clock.seconds - begun) * 1000.0
            start += draft_ms
        out = scheduler.schedule(start)
        batch = RecordBatch()
        for chunk in out.prefill:
            if chunk.request.request_id not in self._announced:
                self._announced.add(chunk.request.request_id)
                batch.scheduled[chunk.request.request_id] = chunk.request.scheduled_ms
        self._retire(out.rejected, batch, source, start)
        if out.num_tokens == 0:   # only rejections: a scheduler with room always schedules a queued request
            if not out.rejected:
                raise InputError(f"replica {replica.index} holds requests its scheduler cannot schedule")
            emit(batch)
            return
        contexts = [c.request.num_computed + c.num_tokens for c in out.prefill]
        contexts += [r.num_computed + 1 + len(r.spec_ids) for r in out.decode]
        kv_tokens = scheduler.kv_tokens_after(out)
        sampled = replica.runner.sample(out)
        end = start + replica.runner.price(out) * 1000.0
        finished = scheduler.update(out, sampled, end)
        replica.free_ms = end
        record = StepRecord.measured(
            run_id=self.run_id, step=self._step, phase=out.phase, prefill_tokens=[c.num_tokens for c in out.prefill],
            num_decode=len(out.decode), contexts=contexts, start_ms=start, duration_ms=end - start,
            kv_tokens=kv_tokens, kv_capacity=scheduler.config.kv_capacity, num_waiting=scheduler.num_waiting,
            num_running=scheduler.num_running, worker=f"replica-{replica.index}",
            num_reused_tokens=out.num_reused_tokens, num_evictions=out.num_evictions,
            num_proposed_tokens=out.num_draft_tokens, num_accepted_tokens=sum(out.accepted.values()),
            draft_ms=draft_ms)
        batch.steps.append(record)
        if speculator is not None:
            speculator.observe(record)   # its cost ratio: when guessing pays
        self._step += 1
        batch.tokens = token_records(sampled, self._requests, end, out.emitted)
        self._retire(finished, batch, source, end)
        emit(batch)

    def _retire(self, requests, batch: RecordBatch, source, now: float) -> None:
        for req in requests:
            batch.requests.append(req.to_record())
            source.on_finish(now, req.request_id, req.output_ids)
            self._requests.pop(req.request_id, None)
            self._announced.discard(req.request_id)
