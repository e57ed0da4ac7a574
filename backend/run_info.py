"""What a run records about itself: run.json's `info`, typed.

On disk `info` is one flat JSON object (the format every earlier version wrote); in memory it is a
`RunInfo` whose fields every target shares, and one typed sub-record for what only some targets
know: `local` (the machine the steps ran on), `simulated` (the cost model), `remote` (the server and
the client), `disaggregated` (the prefill/decode layout), `replicas` (how the model was spread) and
`sweep` (a sweep's points). `target` says which target ran, as an Enum: no reader infers it from the
absence of a key. `to_json` and `from_json` are the one way between the two; `docs/run-folder.md`
lists every field (tests/results/test_run_folder_doc.py keeps the page and this module together).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any

CREATED_FORMAT = "%Y-%m-%dT%H:%M:%S%z"


def now_created() -> str:
    """`created` of a run finishing now: local time with its UTC offset, e.g. 2026-12-03T18:12:31+0000."""
    return time.strftime(CREATED_FORMAT)


class TargetKind(str, Enum):
    """Which target executed the run's requests."""

    LOCAL = "local"                   # the engine in this process, or in the window's engine process
    SIMULATED = "simulated"           # every step priced by the cost model on a GPU profile
    REMOTE = "remote"                 # an OpenAI-compatible server
    DISAGGREGATED = "disaggregated"   # prefill and decode engine processes on this machine
    IMPORTED = "imported"             # another tool's result file, read by `import` (backend.results.importers)


@dataclass(slots=True)
class LocalInfo:
    """The machine the steps ran on (local and disaggregated runs)."""

    threads: int | None = None            # torch threads (a disaggregated run: every worker's together)
    affinity: list[int] | None = None     # the cores they were pinned to
    kernels: str | None = None            # which kernels ran the quantized matrices
    matmul: dict | None = None            # the matrix unit chosen for prefill (backend.results.matmul)
    matmul_steps: dict | None = None      # steps by the unit that ran them
    engine_pid: int | None = None         # the window's engine process


@dataclass(slots=True)
class SimulatedInfo:
    """How a simulated run's steps were priced."""

    profile_name: str | None = None       # the GPU profile's device name
    cost_model: dict | None = None        # the cost model's terms (backend.sim.step_time)
    cost_model_source: str | None = None  # where the terms come from
    virtual_s: float | None = None        # simulated seconds
    serving_engine: str | None = None     # the engine family whose host costs the simulated steps paid (--engine)


@dataclass(slots=True)
class RemoteInfo:
    """The server a remote run drove, and how well the client kept up."""

    endpoint: str = ""                    # the base URL, without credentials
    served_model: str | None = None
    api: str | None = None                # completions | chat
    server_metrics: dict | None = None    # what the server's /metrics published ({} for none)
    note: str | None = None
    client: dict | None = None            # the client workers' own load (backend.targets.remote.honesty)
    warnings: list[str] = field(default_factory=list)   # what the run knows is wrong with its own figures
    tokenizer: str | None = None          # what counted the prompt tokens
    connections_opened: int | None = None
    token_counts: dict | None = None      # where the token counts came from: server, tokenizer, estimate
    ray: dict | None = None               # the Ray cluster's address and its workers' clocks


@dataclass(slots=True)
class DisaggregatedInfo:
    """The prefill/decode layout (run.json's `layout`): real worker processes or simulated devices."""

    prefill_workers: int = 0
    decode_workers: int = 0
    kv_transport: str = ""                # shm | pipe | simulated link
    kv_buffers: int | None = None         # shm: the hand-off buffers
    kv_link: dict | None = None           # simulated: the link's name, GB/s and latency
    workers: list[dict] = field(default_factory=list)   # each worker: name, role, cores or devices, ...
    shared_cores: bool | None = None      # real: workers pinned to overlapping cores


@dataclass(slots=True)
class ReplicasInfo:
    """How a simulated model was spread (run.json's `deployment`): parallel layout and replicas."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    router: str = "round-robin"
    devices: int = 1
    link: dict | None = None
    kv_dtype: str | None = None
    prefill_tp: int | None = None         # disaggregated: each prefill device group's tp
    decode_tp: int | None = None


@dataclass(slots=True)
class SweepInfo:
    """A sweep's folder: its kind and its points."""

    sweep_kind: str | None = None         # batch, prompt, precision, rate, concurrency, pd-ratio, depth
    points: list[str] | None = None       # the points' sub-folders, in order
    dtypes: list[str] | None = None       # precision: every precision run, in order
    local_profile: str | None = None      # the profile of the machine that measured it
    nonce_seed: int | None = None         # depth: what drew each request's unique start (backend/sweeps/depth.py)


@dataclass(slots=True)
class ImportedInfo:
    """Another tool's result file that `import` turned into this folder (run.json's `imported`)."""

    tool: str = ""                        # vllm-bench-serve, aiperf, guidellm, llama-bench
    version: str | None = None            # the tool's version or schema version, as the file names it
    file: str = ""                        # the file (or files) read
    notes: list[str] = field(default_factory=list)   # where its figures and this tool's differ, and why


@dataclass(slots=True)
class RunInfo:
    """run.json's info: what ran, on what, when."""

    target: TargetKind = TargetKind.LOCAL
    model: str = ""
    source: str = ""                      # where the weights came from (or "simulated on ...")
    random_weights: bool = False
    arch: str | None = None
    num_params: int = 0
    weight_bytes: int = 0
    shape: dict | None = None             # the ModelShape as a dict
    device: str = ""                      # cpu, cuda:0, "simulated h100-sxm", "remote"
    device_name: str = ""
    dtype: str = ""                       # the precision's name (backend.precision); a precision sweep: "a,b,c"
    weight_bits: float | None = None
    activation_dtype: str | None = None
    kv_dtype: str | None = None
    kv_capacity: int | None = None        # KV cache tokens
    kv_slots: int | None = None
    max_len: int | None = None
    versions: dict | None = None          # library versions
    created: str = ""                     # CREATED_FORMAT
    profile: str | None = None            # the GPU profile priced on / judged against
    priced_on: str | None = None          # what the cost figures were priced at
    price_source: str | None = None
    wall_s: float | None = None           # wall-clock seconds (simulated and disaggregated runs)
    local: LocalInfo | None = None
    simulated: SimulatedInfo | None = None
    remote: RemoteInfo | None = None
    disaggregated: DisaggregatedInfo | None = None
    replicas: ReplicasInfo | None = None
    sweep: SweepInfo | None = None
    imported: ImportedInfo | None = None
    extra: dict[str, Any] = field(default_factory=dict)   # keys this version does not know: kept, written back

    @property
    def is_local(self) -> bool:
        return self.target is TargetKind.LOCAL

    @property
    def is_simulated(self) -> bool:
        return self.target is TargetKind.SIMULATED

    @property
    def is_remote(self) -> bool:
        return self.target is TargetKind.REMOTE

    @property
    def is_imported(self) -> bool:
        return self.target is TargetKind.IMPORTED

    @property
    def created_minute(self) -> str:
        """`created` as "2026-12-03 18:12" ("" when unknown): the label of a run in lists."""
        return self.created[:16].replace("T", " ")

    @property
    def host(self) -> LocalInfo:
        """The machine's record; an empty one for targets that ran nowhere here."""
        return self.local if self.local is not None else LocalInfo()

    @property
    def warnings(self) -> list[str]:
        return self.remote.warnings if self.remote is not None else []

    def to_json(self) -> dict:
        """The flat object run.json holds: sub-records' fields beside the shared ones, None left out."""
        out: dict[str, Any] = {"target": self.target.value}
        for f in fields(self):
            if f.name in ("target", "extra") or f.name in _SUB_RECORDS:
                continue
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = value
        for name in _FLAT_SUB_RECORDS:
            record = getattr(self, name)
            if record is not None:
                out.update({k: v for k, v in asdict(record).items() if v is not None})
        if self.disaggregated is not None:
            out["layout"] = {k: v for k, v in asdict(self.disaggregated).items() if v is not None}
        if self.replicas is not None:
            out["deployment"] = {k: v for k, v in asdict(self.replicas).items() if v is not None}
        if self.imported is not None:
            out["imported"] = {k: v for k, v in asdict(self.imported).items() if v is not None}
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, data: dict) -> RunInfo:
        """The typed info of run.json's (upgraded: backend.results.run_folder.upgrade) flat object."""
        rest = dict(data)
        target = TargetKind(rest.pop("target", TargetKind.LOCAL.value))
        subs: dict[str, Any] = {}
        for name, record in _FLAT_SUB_RECORDS.items():
            taken = _take(record, rest)
            wanted = _TARGET_RECORD.get(target) == name
            subs[name] = record(**taken) if taken or wanted else None
        if isinstance(rest.get("layout"), dict):
            subs["disaggregated"] = DisaggregatedInfo(**_take(DisaggregatedInfo, rest.pop("layout")))
        if isinstance(rest.get("deployment"), dict):
            subs["replicas"] = ReplicasInfo(**_take(ReplicasInfo, rest.pop("deployment")))
        if isinstance(rest.get("imported"), dict):
            subs["imported"] = ImportedInfo(**_take(ImportedInfo, rest.pop("imported")))
        shared = _take(cls, rest)
        return cls(target=target, **shared, **subs, extra=rest)


# the sub-records whose fields lie flat in info, and the target whose run always has one
_FLAT_SUB_RECORDS = {"local": LocalInfo, "simulated": SimulatedInfo, "remote": RemoteInfo, "sweep": SweepInfo}
_SUB_RECORDS = {*_FLAT_SUB_RECORDS, "disaggregated", "replicas", "imported"}
_TARGET_RECORD = {TargetKind.LOCAL: "local", TargetKind.DISAGGREGATED: "local", TargetKind.SIMULATED: "simulated",
                  TargetKind.REMOTE: "remote"}


def _take(record, data: dict) -> dict:
    """Remove from `data` the keys that are fields of `record` (its sub-records excepted) and return them."""
    names = [f.name for f in fields(record) if f.name not in _SUB_RECORDS and f.name not in ("target", "extra")]
    return {name: data.pop(name) for name in names if name in data}


def sweep_info(last: RunInfo | None, points: list[str]) -> RunInfo:
    """A load or pd-ratio sweep's info: its last point's (the model, the device, the target), with the
    points' folders and the sweep's own date (its kind is set where the folder is written)."""
    from dataclasses import replace
    base = last if last is not None else RunInfo()
    return replace(base, sweep=SweepInfo(points=points), created=now_created())
