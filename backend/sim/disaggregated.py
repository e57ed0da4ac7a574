"""The disaggregated policy simulated: P prefill devices and D decode devices of a GPU profile, a KV
link between them, every step priced by the simulator's cost model on one virtual timeline.

The same split as the real policy (backend/targets/disaggregated/coordinator.py): a prefill device runs the
real chunked scheduler over each prompt but its last token (with prefix caching, the default, only what
its own cache lacks: the step is priced by the tokens it computes); the prompt's whole KV, cached part
included, then crosses the link, `--kv-link-us` of latency plus its bytes at `--kv-link-gbs` (a prefill device's hand-offs
go one after another over its link), and lands in the decode device's memory; the decode device
admits it at its next step boundary (decode_batch.DecodeBatch: whole sequences reserved, never a
prefill) and its first decode step samples the first token. Requests go to the prefill device
with the fewest prompt tokens queued and to the decode device with the fewest requests.

Discrete events in time order: an arrival, or the next step of the device whose step starts
first (ties: arrivals, then prefill devices, then decode devices, each in index order), so a run
is deterministic from its seed. The records are the real target's: steps with their `worker`,
requests with the TTFT split (kv_transfer_ms here is the link's time, queueing on it included).

Speculation (backend/sim/spec.py) happens on the decode devices, as on the real policy's decode workers:
each has its own speculator and runner (its kept-guess draws seeded with the run's seed + its index), the
guessing moves its step start on by the draft's priced time, and a verification is priced as its rows.
"""
from __future__ import annotations

import heapq
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

from backend.config import RunConfig
from backend.errors import InputError
from backend.events import Emit, ModelLoaded, Progress, RequestsArrived, RunFinished
from backend.targets.disaggregated.summary import fill_split
from backend.records import RecordBatch, RequestRecord, StepRecord
from backend.run_info import DisaggregatedInfo
from backend.sim.links import KVLink, resolve_link

@dataclass(slots=True)
class _Handoff:
    ready_ms: float
    request_id: int
    spec: object
    scheduled_ms: float | None
    prefill_done_ms: float
    kv_bytes: int
    cached_tokens: int = 0   # prompt tokens the prefill device found in its prefix cache (they still cross the link)


@dataclass(slots=True)
class _Device:
    name: str
    index: int
    free_ms: float = 0.0          # when its current step ends
    link_free_ms: float = 0.0     # prefill: when its link is free for the next hand-off
    queued_tokens: int = 0
    assigned: int = 0
    pending: list = field(default_factory=list)   # decode: a heap of (ready_ms, request_id, _Handoff)


class DisaggregatedSim:
    """One simulated run; `run()` streams its record batches through `emit` (a RunRecorder's)."""

    def __init__(self, config: RunConfig, shape, prec, profile, cost_model, link: KVLink, emit: Emit, run_id: str,
                 should_stop: Callable[[], bool] = lambda: False):
        from backend.engine.decode_batch import DecodeBatch
        from backend.sim.model import kv_bytes_per_token
        from backend.targets.engine_run import kv_capacity_of, longest_sequence
        from backend.engine.paged_scheduler import scheduler_for
        from backend.engine.scheduler import SchedulerConfig
        from backend.sim.runner import SimRunner, VirtualClock
        from backend.workload.arrivals import WorkloadSource
        e = config.engine
        self.config, self.link, self.emit, self.should_stop = config, link, emit, should_stop
        self.shape, self.prec, self.profile, self.cost_model = shape, prec, profile, cost_model
        spec = replace(config.workload, prompt_source="synthetic")   # no tokenizer: synthetic ids of the same lengths
        from backend.sim.runner import sim_vocab
        from backend.targets.engine_run import kv_settings
        self.kv = kv = kv_settings(config)
        self.source = WorkloadSource(spec, tokenize=None, vocab_size=sim_vocab(shape, kv.prefix_caching),
                                     max_prompt_len=shape.max_position)
        self.max_len = min(e.max_len or longest_sequence(config.workload), shape.max_position)
        self.kv_capacity = kv_capacity_of(config, e.max_batch, self.max_len)
        self.kv_per_token = int(kv_bytes_per_token(shape, prec))
        self.layouts = pool_layouts(config, profile)   # (prefill, decode): each pool's devices' tp and link
        self.prefill_pricer = SimRunner(shape, prec, profile, cost_model, VirtualClock(), self.layouts[0])
        # a decode device's runner: its own clock, which only its proposer's guessing moves (steps are timed here)
        self.decode_runners = [SimRunner(shape, prec, profile, cost_model, VirtualClock(), self.layouts[1])
                               for _ in range(e.decode_workers)]
        self.speculators = [None] * e.decode_workers
        if config.spec.is_on:
            from backend.sim.spec import build_sim_speculator, sim_spec_of
            sim = self.sim_spec = sim_spec_of(config.spec, config.sampling.seed)
            self.speculators = [build_sim_speculator(config, replace(sim, seed=sim.seed + d), runner, shape, profile,
                                                     cost_model, self.layouts[1], None)
                                for d, runner in enumerate(self.decode_runners)]
        self.prefill = [_Device(f"prefill-{i}", i) for i in range(e.prefill_workers)]
        self.decode = [_Device(f"decode-{i}", i) for i in range(e.decode_workers)]
        self.schedulers = [scheduler_for(SchedulerConfig(policy="chunked", max_batch=e.max_batch,
                                                         kv_capacity=self.kv_capacity, max_len=self.max_len,
                                                         chunk_tokens=e.chunk_tokens, kv_layout=kv.kv_layout,
                                                         block_size=kv.block_size, prefix_caching=kv.prefix_caching))
                           for _ in self.prefill]
        # the decode side reserves whole sequences (it never preempts) and caches no prefixes: its KV arrives whole
        self.batches = [DecodeBatch(e.max_batch, self.kv_capacity, self.max_len, kv.kv_layout, kv.block_size)
                        for _ in self.decode]
        self.run_id = run_id
        self.specs: dict[int, tuple] = {}        # request_id -> (spec, decode index)
        self.meta: dict[int, _Handoff] = {}
        self.live: dict[int, object] = {}        # request_id -> the decode side's Request
        self.step_index = 0
        self.stopped = False
        self.now_ms = 0.0

    # ---- the event loop ---------------------------------------------------------------------------

    def run(self) -> None:
        events = 0
        while True:
            events += 1
            if events % 64 == 0 and self.should_stop():
                self.stopped = True
                break
            moments = []
            nxt = self.source.next_arrival_ms()
            if nxt is not None:
                moments.append((nxt, 0, 0))
            for p, device in enumerate(self.prefill):
                if self.schedulers[p].has_work:
                    moments.append((device.free_ms, 1, p))
            for d, device in enumerate(self.decode):
                if self.batches[d].num_running:
                    moments.append((device.free_ms, 2, d))
                elif device.pending:
                    moments.append((max(device.free_ms, device.pending[0][0]), 2, d))
            if not moments:
                break
            at, kind, index = min(moments)
            self.now_ms = at
            if kind == 0:
                self.arrive(at)
            elif kind == 1:
                self.prefill_step(index, at)
            else:
                self.decode_step(index, at)
        self.record_unfinished("stopped by user" if self.stopped else "unfinished")

    def arrive(self, now: float) -> None:
        arrived = self.source.due(now)
        if arrived:
            self.emit(RequestsArrived([s.request_id for s in arrived], [s.arrival_ms for s in arrived],
                                      [len(s.prompt_ids) for s in arrived]))
        from backend.engine.request import Request, rejected_record, rejection
        for spec in arrived:
            reason = rejection(len(spec.prompt_ids), spec.max_new_tokens, self.max_len, self.kv_capacity,
                               "a decode device's cache")
            if reason:
                self.emit(RecordBatch(requests=[rejected_record(spec, reason)]))
                self.source.on_finish(now, spec.request_id, [])
                continue
            p = min(range(len(self.prefill)), key=lambda i: (self.prefill[i].queued_tokens, i))
            d = min(range(len(self.decode)), key=lambda i: (self.decode[i].assigned, i))
            self.prefill[p].queued_tokens += len(spec.prompt_ids)
            self.decode[d].assigned += 1
            self.specs[spec.request_id] = (spec, d)
            if not self.schedulers[p].has_work:
                self.prefill[p].free_ms = max(self.prefill[p].free_ms, now)
            if len(spec.prompt_ids) == 1:   # nothing to prefill: straight to the decode device
                self.hand_off(p, spec.request_id, now, now, 0)
                continue
            self.schedulers[p].add(Request(spec.request_id, spec.prompt_ids[:-1], 1, spec.arrival_ms))

    def prefill_step(self, p: int, start: float) -> None:
        from backend.sim.runner import SIM_TOKEN
        scheduler, device = self.schedulers[p], self.prefill[p]
        out = scheduler.schedule(start)
        batch = RecordBatch()
        for chunk in out.prefill:
            if chunk.start == 0:
                batch.scheduled[chunk.request.request_id] = chunk.request.scheduled_ms
        contexts = [c.request.num_computed + c.num_tokens for c in out.prefill]
        kv_tokens = scheduler.kv_tokens_after(out)
        end = start + self.prefill_pricer.price(out) * 1000.0
        sampled = {c.request.request_id: SIM_TOKEN for c in out.prefill if c.samples}
        finished = scheduler.update(out, sampled, end)
        device.free_ms = end
        batch.steps.append(self.step_record(device.name, out, contexts, kv_tokens, start, end,
                                            scheduler.num_waiting, scheduler.num_running))
        self.emit(batch)
        for request in finished:
            self.hand_off(p, request.request_id, request.scheduled_ms, end, request.num_computed,
                          request.num_cached_tokens)

    def hand_off(self, p: int, rid: int, scheduled_ms: float | None, done_ms: float, num_tokens: int,
                 cached_tokens: int = 0) -> None:
        spec, d = self.specs[rid]
        device = self.prefill[p]
        device.queued_tokens -= len(spec.prompt_ids)
        nbytes = num_tokens * self.kv_per_token
        leaves = max(done_ms, device.link_free_ms)
        ready = leaves + self.link.seconds(nbytes) * 1000.0
        device.link_free_ms = ready
        handoff = _Handoff(ready, rid, spec, scheduled_ms, done_ms, nbytes, cached_tokens)
        heapq.heappush(self.decode[d].pending, (ready, rid, handoff))

    def decode_step(self, d: int, start: float) -> None:
        from backend.engine.loop import token_records
        from backend.engine.request import Request
        device, batch_state = self.decode[d], self.batches[d]
        runner, speculator = self.decode_runners[d], self.speculators[d]
        while device.pending and device.pending[0][0] <= start:
            handoff = device.pending[0][2]
            request = Request.from_spec(handoff.spec)
            if not batch_state.can_admit(request):
                break
            heapq.heappop(device.pending)
            batch_state.admit(request, max(0, len(handoff.spec.prompt_ids) - 1))
            request.scheduled_ms = handoff.scheduled_ms
            request.num_cached_tokens = handoff.cached_tokens
            self.live[handoff.request_id] = request
            self.meta[handoff.request_id] = handoff
        draft_ms = 0.0
        if speculator is not None and batch_state.num_running:
            begun = runner.clock.seconds   # the guesses come before the step: it starts after their priced time
            speculator.propose(batch_state.running)
            draft_ms = (runner.clock.seconds - begun) * 1000.0
            start += draft_ms
        out = batch_state.schedule()
        if out.is_empty:   # nothing running: what is pending lands later (an idle device has room for any request)
            device.free_ms = device.pending[0][0] if device.pending else start
            return
        contexts = [r.num_computed + 1 + len(r.spec_ids) for r in out.decode]
        kv_tokens = batch_state.kv_tokens_after(out)
        end = start + runner.price(out) * 1000.0
        sampled = runner.sample(out)   # with guesses: how many each verification keeps, into out.accepted
        finished = batch_state.update(out, sampled, end)
        device.free_ms = end
        batch = RecordBatch()
        record = self.step_record(device.name, out, contexts, kv_tokens, start, end, len(device.pending),
                                  batch_state.num_running, draft_ms)
        batch.steps.append(record)
        if speculator is not None:
            speculator.observe(record)   # its cost ratio: when guessing pays
        batch.tokens = token_records(sampled, self.live, end, out.emitted)
        for request in finished:
            batch.requests.append(self.record_of(request))
            device.assigned -= 1
        self.emit(batch)
        for request in finished:
            self.source.on_finish(end, request.request_id, request.output_ids)

    def record_of(self, request) -> RequestRecord:
        handoff = self.meta.pop(request.request_id)
        self.live.pop(request.request_id, None)
        self.specs.pop(request.request_id, None)
        record = request.to_record()
        fill_split(record, handoff.kv_bytes, handoff.scheduled_ms, handoff.prefill_done_ms, handoff.ready_ms)
        return record

    def record_unfinished(self, reason: str) -> None:
        from backend.engine.request import Request
        batch = RecordBatch()
        for rid, (spec, _d) in sorted(self.specs.items()):
            request = self.live.get(rid) or Request.from_spec(spec)
            request.finish_reason = reason
            batch.requests.append(request.to_record())
        if batch.requests:
            self.emit(batch)

    def step_record(self, worker: str, out, contexts, kv_tokens, start, end, waiting, running,
                    draft_ms: float = 0.0) -> StepRecord:
        record = StepRecord.measured(
            run_id=self.run_id, step=self.step_index, phase=out.phase, prefill_tokens=[c.num_tokens for c in out.prefill],
            num_decode=len(out.decode), contexts=contexts, start_ms=start, duration_ms=end - start, kv_tokens=kv_tokens,
            kv_capacity=self.kv_capacity, num_waiting=waiting, num_running=running, worker=worker,
            num_reused_tokens=out.num_reused_tokens, num_evictions=out.num_evictions,
            num_proposed_tokens=out.num_draft_tokens, num_accepted_tokens=sum(out.accepted.values()),
            draft_ms=draft_ms)
        self.step_index += 1
        return record


def pool_layouts(config: RunConfig, profile):
    """The prefill pool's and the decode pool's replica layouts: --prefill-tp and --decode-tp (default --tp)."""
    from backend.sim.parallel import Layout
    d = config.deployment
    return (Layout.of(d, profile, d.prefill_tp or d.tp), Layout.of(d, profile, d.decode_tp or d.tp))


def pool_devices(config: RunConfig, layouts) -> int:
    e = config.engine
    return e.prefill_workers * layouts[0].devices + e.decode_workers * layouts[1].devices


def prepare(config: RunConfig, cost_model=None):
    """(shape, precision, profile, cost model, link) of a simulated disaggregated run, each refused in one line."""
    from backend.targets.engine_run import kv_capacity_of, longest_sequence, shared_settings, validate, validate_disaggregated
    from backend.sim.model import check_memory, resolve_model, resolve_precision
    from backend.sim.step_time import CostModel
    from backend.roofline.profiles import find_profile
    if not config.profile:
        raise InputError("--simulate needs --profile NAME (see `profiles`), the device whose steps are priced")
    validate_disaggregated(config)
    validate(shared_settings(config))
    from backend.sim import parallel
    profile = find_profile(config.profile)
    shape = resolve_model(config.model.name)
    if config.deployment.dp > 1:
        raise InputError("--dp: the disaggregated policy's replicas are its pools; use --prefill-workers and "
                         "--decode-workers")
    parallel.validate(config.deployment, shape, config.model.name)
    prec = resolve_precision(config.model.dtype, profile, config.deployment.kv_dtype)
    model = cost_model or CostModel.for_profile(profile, prec, config.deployment.engine)
    model.validate()
    max_len = min(config.engine.max_len or longest_sequence(config.workload), shape.max_position)
    for layout in pool_layouts(config, profile):
        check_memory(shape, prec, profile, kv_capacity_of(config, config.engine.max_batch, max_len), layout)
    return shape, prec, profile, model, resolve_link(config, profile)


def run_simulated_disaggregated(config: RunConfig, emit: Emit, should_stop: Callable[[], bool],
                                retain_records: bool = True, cost_model=None) -> RunFinished:
    """`load --policy disaggregated --simulate --profile NAME`."""
    from backend.targets.engine_run import with_kv_settings
    config = with_kv_settings(config)   # the pools' layout; run.json records it
    from backend.targets.disaggregated.events import WorkerLayout
    from backend.targets.disaggregated.summary import disaggregated_figures
    from backend.sim.info import costs_of, deployment_info, simulated_info
    from backend.sim.model import model_bytes
    from backend.results.recorder import RunRecorder
    shape, prec, profile, model, link = prepare(config, cost_model)
    with RunRecorder(config, emit, retain_records) as recorder:
        emit = recorder.emit
        sim = DisaggregatedSim(config, shape, prec, profile, model, link, emit, recorder.run_id, should_stop)
        if sim.kv.prefix_caching:   # the workload's own ceiling beside the measured hit rate (one prefill device's pool)
            from backend.targets.engine_run import ceiling_figures
            recorder.accumulator.prefix_ideal = ceiling_figures(
                sim.source, sim.kv.block_size, sim.schedulers[0].config.num_blocks,
                min(sim.max_len, sim.kv_capacity), prefill_only=True)
        e = config.engine
        pre, dec = sim.layouts
        tps = "" if pre.tp == dec.tp == 1 else f" (prefill tp {pre.tp}, decode tp {dec.tp})"
        device = f"simulated {e.prefill_workers}+{e.decode_workers} x {profile.key}{tps}"
        source_text = (f"simulated on {e.prefill_workers} prefill + {e.decode_workers} decode {profile.key} "
                       f"({profile.name}){tps}, KV over {link.describe()}: step times from a cost model, no weights loaded")
        if config.spec.is_on:   # how the decode devices' guesses are priced
            from backend.sim.spec import describe as describe_spec
            source_text += f"; {describe_spec(config.spec, sim.sim_spec)}"
        emit(ModelLoaded(config.model.name, device, profile.name, prec.name, source_text, False, shape.num_params(),
                         model_bytes(shape, prec), sim.kv_capacity * e.decode_workers, shape, False, prec.weight_bits,
                         prec.activation))
        workers = [{"name": dev.name, "role": dev.name.split("-")[0], "cores": [], "pid": None, "threads": None}
                   for dev in sim.prefill + sim.decode]
        devices = pool_devices(config, sim.layouts)
        emit(WorkerLayout(workers, f"link {link.describe()}"))
        emit(Progress("simulating", None))
        wall_start = time.perf_counter()
        sim.run()
        summary = recorder.summary()
        summary = summary.merged(disaggregated_figures(recorder.accumulator.requests))
        info = simulated_info(
            config, profile, shape, prec, model, device, source_text,
            kv_capacity=sim.kv_capacity * e.decode_workers, kv_slots=e.max_batch, max_len=sim.max_len,
            virtual_s=sim.now_ms / 1000.0, wall_s=time.perf_counter() - wall_start,
            disaggregated=DisaggregatedInfo(
                prefill_workers=e.prefill_workers, decode_workers=e.decode_workers, kv_transport="simulated link",
                kv_link=asdict(link), workers=[{"name": w["name"], "role": w["role"],
                                                "devices": (pre if w["role"] == "prefill" else dec).devices}
                                               for w in workers]),
            replicas=replace(deployment_info(config.deployment, dec, prec, devices), prefill_tp=pre.tp,
                             decode_tp=dec.tp))
        figures, price = costs_of(summary, profile, pre.devices, dec.devices, devices)
        summary = summary.merged(figures)
        # every simulated figure's band: the TP > 1 regime's errors where either pool splits the model
        from backend.sim import bands
        summary = summary.merged(bands.summary_bands(summary, bands.setup_regimes(
            getattr(shape, "num_experts", 0) > 0, max(pre.tp, dec.tp), prec.weight_bits),
            requests=recorder.accumulator.requests))
        if price is not None:
            info.priced_on, info.price_source = price
        return recorder.finish(info, sim.stopped, None, summary)
