"""Events a run emits while it goes, besides the RecordBatch of each step.

The CLI prints them; the window's worker forwards them as Qt signals. `Target` is the one
interface of everything that runs a workload (the local engine, a sweep, a remote server, the
engine process): settings in, these events out through `emit`, a RunFinished back.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from backend.config import RunConfig, SweepKind
from backend.precision import Precision, from_info
from backend.records import RecordBatch, RepeatsSummary, RunData, merge_batches
from backend.shape import ModelShape
from backend.run_info import LocalInfo, RunInfo
from backend.summary import Summary

Emit = Callable[[object], None]


class Target(Protocol):
    """Runs `config` to the end or until should_stop() (checked at every step boundary), emitting
    events as they happen; InputError for settings it refuses before it starts."""

    def __call__(self, config: RunConfig, emit: Emit, should_stop: Callable[[], bool]) -> RunFinished: ...


@dataclass(slots=True)
class Progress:
    """Long work under way: loading weights, warm-up, a sweep."""

    message: str
    fraction: float | None = None   # 0..1, or None when unknown


@dataclass(slots=True)
class ModelLoaded:
    name: str
    device: str          # e.g. "cpu", "cuda:0"
    device_name: str     # e.g. "NVIDIA H100 80GB HBM3" or the CPU model
    dtype: str           # the weights' precision, e.g. "float32", "q4_1" (backend.precision)
    source: str          # where the weights came from
    random_weights: bool
    num_params: int
    weight_bytes: int
    kv_capacity: int     # KV cache capacity in tokens
    shape: ModelShape    # for the roofline
    reused: bool = False # already in memory from an earlier run (the engine process keeps it)
    weight_bits: float | None = None   # bits per matrix weight, scales included (None: the dtype's own)
    activation_dtype: str = ""         # activations and KV cache ("" : the dtype itself)
    matmul: dict | None = None         # the products' arithmetic, run.json's "matmul" (None: not chosen)

    def info(self) -> RunInfo:
        """The model's part of run.json's info, for a run known only by its events."""
        return RunInfo(model=self.name, source=self.source, device=self.device, device_name=self.device_name,
                       dtype=self.dtype, weight_bits=self.weight_bits, activation_dtype=self.activation_dtype,
                       random_weights=self.random_weights, num_params=self.num_params,
                       weight_bytes=self.weight_bytes, kv_capacity=self.kv_capacity,
                       local=LocalInfo(matmul=self.matmul) if self.matmul is not None else None)

    @property
    def precision(self) -> Precision | None:
        return from_info(self.info())


@dataclass(slots=True)
class RepeatStarted:
    """Repeat `index` of `count` (from 1) of a run of --repeats N begins: its times start at 0 again."""

    index: int
    count: int


@dataclass(slots=True)
class RequestsArrived:
    """Requests that just arrived (queued), so lanes can start drawing their queue segment."""

    request_ids: list[int]
    arrival_ms: list[float]
    prompt_tokens: list[int]


# a KvMap cell's owner when no request holds it (a request's id otherwise): defined here, with the event,
# so a run folder's reader (backend/results/kv_file.py) needs no engine module
KV_CACHED_FREE = -1   # a block no request holds, with a prefix a later request can reuse
KV_FREE = -2          # a block holding nothing
KV_RESERVED = -3      # slots: a cell of a request's slot that it has not written


@dataclass(slots=True)
class KvMap:
    """A snapshot of the KV cache, block by block (backend/engine/kv_watch.py takes it a few times a second
    and at the end of a run): each cell's owner as int32 bytes, a request id or one of kv_watch's states
    (CACHED_FREE, FREE, RESERVED: a slot's room its request has not written), the tokens each cell holds
    (uint16 bytes), and what was reused since the last snapshot. Bytes, not lists: a big cache has tens of
    thousands of cells, and they cross a process boundary."""

    time_ms: float              # the run's clock when taken
    layout: str                 # "paged" or "slots"
    block_size: int             # tokens a cell holds
    cells_per_row: int          # slots: one row per slot; paged: 0 (the view picks a width)
    owners: bytes               # int32 per cell
    tokens: bytes               # uint16 per cell
    reused: bytes = b""         # int32 block ids found cached by the requests admitted since the last snapshot
    cached_tokens: dict[int, int] = field(default_factory=dict)   # those requests' cached prompt tokens
    final: bool = False         # the run's last snapshot

    @property
    def num_cells(self) -> int:
        return len(self.owners) // 4


@dataclass(slots=True)
class PrecisionPoint:
    """One precision of a precision sweep: the same model and step shapes, other bytes per weight."""

    dtype: str                         # the precision's name (backend.precision)
    weight_bytes: int                  # what a step reads of the weights
    weight_bits: float                 # per matrix weight, scales included
    ttft_ms: float                     # median prefill step of the batch's prompts
    tpot_ms: float                     # median decode step
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    predicted_ttft_ms: float | None    # the selected profile's roofline
    predicted_tpot_ms: float | None
    predicted_local_ttft_ms: float | None   # this machine's profile
    predicted_local_tpot_ms: float | None
    simulated_ttft_ms: float | None = None  # the cost model's prices on this machine's profile
    simulated_tpot_ms: float | None = None


@dataclass(slots=True)
class SweepPoint:
    """One measured point of a batch-size or prompt-length sweep."""

    kind: SweepKind           # BATCH or PROMPT
    x: int                    # batch size or prompt length
    step_ms: float            # median decode step (batch) or prefill time (prompt)
    tokens_per_s: float
    flops: float
    bytes: float
    mfu: float | None
    mbu: float | None
    predicted_ms: float | None        # for the selected profile
    predicted_local_ms: float | None  # for this machine's calibrated or generic profile
    bound: str                        # "compute" or "memory" (for the selected profile)
    simulated_ms: float | None = None  # the cost model's price of the point on this machine's profile
    # weights one step reads: measured (the median of the timed steps' weight_bytes; None where
    # the steps do not say, e.g. simulated ones) and the roofline's (an MoE: the expected touched experts)
    weight_bytes: float | None = None
    predicted_weight_bytes: float | None = None


@dataclass(slots=True)
class LoadPoint:
    """One rate (or concurrency) of a load sweep (backend/sweeps/load.py)."""

    kind: SweepKind                 # RATE or CONCURRENCY
    x: float                        # arrivals per second, or closed-loop users
    num_finished: int
    num_rejected: int
    duration_s: float
    requests_per_s: float
    tokens_per_s_per_device: float  # output tokens/s over the run, per device
    tokens_per_s_per_user: float    # 1000 / TPOT p50: a decoding request's own rate
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    itl_p99_ms: float
    goodput_requests_per_s: float   # NaN without SLOs
    slo_attainment: float
    cost_per_m_output_usd: float    # NaN without a price
    pareto: bool = False            # no other point has both more throughput per device and per user
    best_goodput: bool = False
    # a simulated point's band (backend.sim.bands): both rates at the band's low edge (every step slower)
    # and at its high one; NaN for a measured point
    per_device_low: float = float("nan")
    per_device_high: float = float("nan")
    per_user_low: float = float("nan")
    per_user_high: float = float("nan")


@dataclass(slots=True)
class PDPoint:
    """One prefill:decode split of a `sweep pd-ratio` (backend/sweeps/pd_ratio.py), simulated."""

    prefill_devices: int
    decode_devices: int
    num_finished: int
    goodput_rps: float              # NaN without SLOs
    slo_attainment: float           # NaN without SLOs
    output_tokens_per_s: float
    tokens_per_s_per_device: float
    goodput_per_device: float       # NaN without SLOs
    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p50_ms: float
    itl_p99_ms: float
    kv_transfer_mean_ms: float
    best: bool = False
    # speculative decoding on the decode devices (--spec): tokens a verification emitted; None without
    spec_mean_acceptance_length: float | None = None
    # TPOT p50 (a request's decode time over its tokens after the first): what a speculating split's
    # decode costs a token, where its ITL p50 reads 0 (a verification's kept tokens arrive together);
    # NaN in files written before it
    tpot_p50_ms: float = float("nan")

    @property
    def split(self) -> str:
        return f"{self.prefill_devices}P:{self.decode_devices}D"


@dataclass(slots=True)
class DepthPoint:
    """One context depth of a `sweep depth` (backend/sweeps/depth.py): llama-bench's pp and tg at depth d."""

    depth: int                      # tokens already in the context (after the request's unique prefix)
    prompt_len: int                 # pp: the tokens whose prefill is timed at that depth
    output_len: int                 # tg: the decode steps timed at that depth
    num_measured: int               # repetitions that finished (each a pair of requests)
    prefill_tokens_per_s: float     # prompt_len / prefill_ms; NaN when the difference was not positive
    decode_tokens_per_s: float      # median over repetitions of decode tokens / their time
    prefill_ms: float               # median over pairs of TTFT(depth + pp) - TTFT(depth)
    ttft_ms: float                  # median TTFT of the request of depth tokens (the decode request)
    ttft_with_prompt_ms: float      # median TTFT of the request of depth + pp tokens
    tpot_ms: float                  # median over repetitions of the decode request's time per output token
    cached_tokens: int | None = None   # prompt tokens its requests said came from a cache (None: none said)


@dataclass(slots=True)
class EngineStatus:
    """The engine process as it reports itself, at a run's start and about once a second."""

    pid: int
    threads: int             # torch's (and the C kernels') thread count
    affinity: list[int]      # the cores it may run on
    cpu_s: float             # the process's CPU time so far
    clock_s: float           # its monotonic clock then (shared with the window's on one machine)
    imports_qt: bool         # it must not: the engine process owns no window

    def cpu_share_since(self, earlier: EngineStatus) -> float | None:
        """Its CPU use between an earlier report and this one, as a share of one core (None if not comparable)."""
        if earlier.pid != self.pid or self.clock_s <= earlier.clock_s:
            return None
        return (self.cpu_s - earlier.cpu_s) / (self.clock_s - earlier.clock_s)


@dataclass(slots=True)
class RunFinished:
    run_id: str
    summary: Summary = field(default_factory=Summary)
    stopped: bool = False     # stopped by the user before the end
    error: str | None = None  # one-line message when the run failed part way
    data: RunData | None = None   # every record of the run
    repeats: RepeatsSummary | None = None   # a run of --repeats N > 1: every repeat's figures; the rest is the last's


class Throttle:
    """How often a child process sends its records: at most `hz` messages a second (a fast GPU makes
    thousands of steps a second), one rate for the engine process and the disaggregated workers."""

    HZ = 60

    def __init__(self, hz: float = HZ):
        self.interval_s = 1.0 / hz
        self.last = float("-inf")

    def due(self) -> bool:
        return time.monotonic() - self.last >= self.interval_s

    def sent(self) -> None:
        self.last = time.monotonic()


def coalesce(pending: list) -> tuple[RequestsArrived | None, RecordBatch | None, list]:
    """What piled up since the last send, as (the arrivals merged, the RecordBatches merged, every
    other event in order); None where there was none. Arrivals go first, so their lanes exist
    when the records that fill them arrive."""
    arrivals = [e for e in pending if isinstance(e, RequestsArrived)]
    batches = [e for e in pending if isinstance(e, RecordBatch)]
    others = [e for e in pending if not isinstance(e, (RequestsArrived, RecordBatch))]
    return (merge_arrivals(arrivals) if arrivals else None, merge_batches(batches) if batches else None, others)


def merge_arrivals(events: list[RequestsArrived]) -> RequestsArrived:
    """One event for several, in arrival order."""
    if len(events) == 1:
        return events[0]
    return RequestsArrived([i for e in events for i in e.request_ids], [t for e in events for t in e.arrival_ms],
                           [n for e in events for n in e.prompt_tokens])
