"""The one wire protocol of every process channel backend opens: what is said, how it travels, who may say it.

Four channels, each between two sides:

- ENGINE: the window and its engine process (backend/engine/process.py);
- WORKER: the disaggregated coordinator and each of its prefill and decode workers
  (backend/targets/disaggregated/);
- KV: a prefill worker and a decode worker, the link their KV hand-offs take;
- CLIENT: the remote run's coordinator and each client worker, a local process or a Ray actor
  (backend/targets/remote/).

Every message is a typed record below, tagged by its `Op`. `CHANNELS` is the one place that says
which side of which channel may send which message: `Port.send` (a multiprocessing Connection's
end) and `frame` (a stream's or an actor's) refuse anything else with ProtocolError, and what comes
in is checked against the peer's row, so a message on the wrong channel fails where it is sent or
read, named, instead of being dropped or misread far away.

One framing for all of them: `encode` turns a message into one self-delimiting frame (a 4-byte
length, then the pickle of its op and fields), `decode` turns a frame back; `read_message` and
`split_frames` find the frames in a byte stream. A KV block's bytes never go through it: under
the pipe transport they follow their header as one raw frame (`Port.send_payload`, read straight
into the decode side's buffer), and under shm they stay in the shared arena; only the header is
pickled, so a hand-off costs no copy more than the transport's own.
"""
from __future__ import annotations

import asyncio
import pickle
import struct
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import TYPE_CHECKING, ClassVar, NamedTuple

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from backend.config import RunConfig, SamplingConfig
    from backend.events import ModelLoaded, RunFinished
    from backend.records import RecordBatch
    from backend.workload.arrivals import RequestSpec


class ProtocolError(RuntimeError):
    """A message a side may not send on a channel, or bytes that are not a frame: a bug, never the user's input."""


class Channel(Enum):
    ENGINE = "engine process"
    WORKER = "disaggregated worker"
    KV = "KV link"
    CLIENT = "client worker"


class Side(Enum):
    WINDOW = "window"
    ENGINE = "engine"
    COORDINATOR = "coordinator"
    WORKER = "worker"
    PREFILL = "prefill"
    DECODE = "decode"
    CLIENT = "client"
    POOL = "pool"   # the coordinator's reader of a client worker, speaking for one that ended without a word


class Op(Enum):
    # the engine process
    TARGET = "target"
    RUN = "run"
    WARM = "warm"
    CALIBRATE = "calibrate"
    FIT = "fit"
    QUIT = "quit"
    EVENTS = "events"
    FINISHED = "finished"
    CALIBRATED = "calibrated"
    FITTED = "fitted"
    WARMED = "warmed"
    INPUT_ERROR = "input-error"
    # shared by several channels
    STOP = "stop"
    ERROR = "error"
    READY = "ready"
    DONE = "done"
    # the disaggregated workers
    INIT = "init"
    START = "start"
    REQUEST = "request"
    CANCEL = "cancel"
    RECORDS = "records"
    # the KV link
    KV = "kv"
    FREED = "freed"
    # the client workers
    JOB = "job"
    GO = "go"
    USERS = "users"
    SEND = "req"
    END = "end"
    ABORT = "abort"
    CLIENT_RECORDS = "rec"
    STATS = "stats"
    CRASHED = "crashed"
    LOST = "lost"


# ---- the messages -------------------------------------------------------------------------------

@dataclass(slots=True)
class UseTarget:
    """The engine process's first message: the run function to call (None: session.execute on a model cache)."""

    op: ClassVar[Op] = Op.TARGET
    run: object = None   # a picklable callable with session.execute's signature, or None


@dataclass(slots=True)
class Run:
    op: ClassVar[Op] = Op.RUN
    config: RunConfig


@dataclass(slots=True)
class Warm:
    """Load the config's model now; its stages come back as Events, then Warmed (a model that fails
    here fails again, with its reason, in the run)."""

    op: ClassVar[Op] = Op.WARM
    config: RunConfig


@dataclass(slots=True)
class Warmed:
    """A Warm's end (loaded or not): the stages it sent before are over, not those of the next job."""

    op: ClassVar[Op] = Op.WARMED


@dataclass(slots=True)
class Calibrate:
    op: ClassVar[Op] = Op.CALIBRATE
    device: str


@dataclass(slots=True)
class Fit:
    op: ClassVar[Op] = Op.FIT
    runs_dir: str
    device: str
    threads: int | None


@dataclass(slots=True)
class Stop:
    """Stop at the next step boundary (the engine process, a disaggregated worker, a client worker)."""

    op: ClassVar[Op] = Op.STOP


@dataclass(slots=True)
class Quit:
    op: ClassVar[Op] = Op.QUIT


@dataclass(slots=True)
class Events:
    """A run's events, merged (backend.events.coalesce): at most Throttle.HZ of these a second."""

    op: ClassVar[Op] = Op.EVENTS
    events: list


@dataclass(slots=True)
class Finished:
    op: ClassVar[Op] = Op.FINISHED
    finished: RunFinished


@dataclass(slots=True)
class Calibrated:
    op: ClassVar[Op] = Op.CALIBRATED
    profile: object   # backend.roofline.profiles.GpuProfile


@dataclass(slots=True)
class Fitted:
    op: ClassVar[Op] = Op.FITTED
    report: object    # backend.fitting.FitReport


@dataclass(slots=True)
class InputFailed:
    """The job refused its input (raised as InputError on the other side)."""

    op: ClassVar[Op] = Op.INPUT_ERROR
    line: str


@dataclass(slots=True)
class Failed:
    """The job (the engine process's) or the worker (a disaggregated one's) failed: why, in one line."""

    op: ClassVar[Op] = Op.ERROR
    line: str


@dataclass(slots=True)
class Ready:
    """Loaded and warmed up (a disaggregated worker: its figures) or started (a client worker: info None)."""

    op: ClassVar[Op] = Op.READY
    info: WorkerFigures | None = None


@dataclass(slots=True)
class WorkerFigures:
    """What a disaggregated worker tells the coordinator once it is ready: its process, threads and
    cache (run.json's layout records them) and the model it loaded."""

    pid: int
    threads: int
    affinity: list[int]
    num_slots: int
    kv_capacity: int
    matmul: dict | None
    loaded: ModelLoaded


@dataclass(slots=True)
class Done:
    """A worker's last message: every record it had is sent."""

    op: ClassVar[Op] = Op.DONE


@dataclass(slots=True)
class Init:
    op: ClassVar[Op] = Op.INIT
    spec: object      # backend.targets.disaggregated.worker_base.WorkerSpec


@dataclass(slots=True)
class Start:
    """The run's clock starts: t0 on CLOCK_MONOTONIC, which every process of this machine reads."""

    op: ClassVar[Op] = Op.START
    t0: float


@dataclass(slots=True)
class Dispatch:
    """A request for a prefill worker, and the decode worker its KV goes to."""

    op: ClassVar[Op] = Op.REQUEST
    spec: RequestSpec
    decode_index: int


@dataclass(slots=True)
class Cancel:
    op: ClassVar[Op] = Op.CANCEL
    request_ids: list[int]


@dataclass(slots=True)
class WorkerRecords:
    op: ClassVar[Op] = Op.RECORDS
    batch: RecordBatch
    handed: list[tuple[int, float]]   # (request id, ms) of the KV hand-offs sent (a prefill worker)
    received: list[int]               # request ids whose KV arrived (a decode worker)


@dataclass(slots=True)
class KVHandoff:
    """The header of one prompt's KV, prefill to decode; its bytes are in arena buffer `buffer` (shm), or
    follow as one raw frame when `buffer` is None (pipe)."""

    op: ClassVar[Op] = Op.KV
    spec: RequestSpec
    scheduled_ms: float
    prefill_done_ms: float
    prefill_worker: str
    buffer: int | None
    block: object     # backend.engine.kv_transfer.KVBlock
    cached_tokens: int = 0   # of the block's tokens, those the prefill worker's prefix cache held (not computed)


@dataclass(slots=True)
class Freed:
    """Arena buffer `buffer` is copied out: the prefill worker may fill it again."""

    op: ClassVar[Op] = Op.FREED
    buffer: int


@dataclass(slots=True)
class Job:
    """A client worker's first message: the endpoint and sampling (the key goes here, never on a command line)."""

    op: ClassVar[Op] = Op.JOB
    url: str
    model: str
    api: str
    api_key: str | None = field(repr=False)
    timeout_s: float
    sampling: SamplingConfig


@dataclass(slots=True)
class Go:
    """The run's clock starts: t0 on the worker's own time.perf_counter."""

    op: ClassVar[Op] = Op.GO
    t0: float


@dataclass(slots=True)
class Users:
    """A closed loop: n users on this worker, first sending at `starts` ms, waiting think_ms after each answer."""

    op: ClassVar[Op] = Op.USERS
    n: int
    starts: list[float]
    think_ms: float


@dataclass(slots=True)
class Send:
    """Send a request at `at_ms` (now if past); at None: a closed loop's next, sent the moment a user is free."""

    op: ClassVar[Op] = Op.SEND
    request_id: int
    at_ms: float | None
    prompt: str | list[int]
    max_tokens: int


@dataclass(slots=True)
class End:
    """No more requests will come: finish those in flight."""

    op: ClassVar[Op] = Op.END


@dataclass(slots=True)
class Abort:
    op: ClassVar[Op] = Op.ABORT
    why: str


class RequestRow(NamedTuple):
    """One request as a client worker saw it end (a tuple on the wire: a thousand streams' traffic stays small)."""

    request_id: int
    status: str                   # finished | error | decoding | prefilling | waiting (cancelled before it went)
    kind: str                     # the error's kind ("" unless status is error)
    reason: str                   # the finish reason, or the error's kind and detail
    sent_ms: float | None         # when it went out (its arrival, as the server saw it)
    first_token_ms: float | None
    last_token_ms: float | None
    finish_ms: float
    num_indexed: int              # tokens counted from the stream's events
    usage_prompt: int | None      # the server's own counts, where it sent them
    usage_output: int | None
    text: str
    late_ms: float | None         # sent minus when it could have gone out (None: never sent)
    usage_cached: int | None = None   # prompt tokens the server said it found in its prefix cache
    first_chunk_ms: float | None = None   # the stream's first event, of any kind (backend.results.definitions)
    first_chunk: str = ""                 # what it held: content, role or empty
    wait_ms: float | None = None          # a closed loop's next request: from its user being free to the request
                                          # reaching the worker (the coordinator makes it once the previous ends);
                                          # late_ms counts from the later of the two (0 for planned arrivals)


@dataclass(slots=True)
class ClientRecords:
    """What a client worker saw since its last: rows, not records, to keep a thousand streams' traffic small."""

    op: ClassVar[Op] = Op.CLIENT_RECORDS
    sent: list[list]            # [request id, sent ms]
    requests: list[RequestRow]
    tokens: list[list]          # [request id, token index, ms, the chunk's characters when the server sent no count]
    text: dict[int, str]        # request id -> text since the last


@dataclass(slots=True)
class Stats:
    """A client worker's measure of itself, at its end (backend.targets.remote.honesty)."""

    op: ClassVar[Op] = Op.STATS
    lag: list[float]        # how late its loop woke from a short sleep, ms
    cpu_s: float
    wall_s: float
    connections: int
    tokens: int
    clumped: int            # tokens read in the same read as their stream's previous one
    rejected: list[str]     # request fields the server refused


@dataclass(slots=True)
class Crashed:
    """A local client worker ended without its report: its requests in flight fail, and the run ends."""

    op: ClassVar[Op] = Op.CRASHED
    request_ids: list[int]
    why: str


@dataclass(slots=True)
class Lost:
    """A Ray actor (or its node) was lost: its requests in flight fail, the others go on."""

    op: ClassVar[Op] = Op.LOST
    request_ids: list[int]
    why: str


Message = (UseTarget | Run | Warm | Calibrate | Fit | Stop | Quit | Events | Finished | Calibrated | Fitted
           | Warmed | InputFailed | Failed | Ready | Done | Init | Start | Dispatch | Cancel | WorkerRecords | KVHandoff
           | Freed | Job | Go | Users | Send | End | Abort | ClientRecords | Stats | Crashed | Lost)

MESSAGES: dict[Op, type] = {cls.op: cls for cls in Message.__args__}
_FIELDS: dict[type, tuple[str, ...]] = {cls: tuple(f.name for f in fields(cls)) for cls in MESSAGES.values()}


# ---- who may say what ---------------------------------------------------------------------------

CHANNELS: dict[Channel, dict[Side, frozenset[Op]]] = {
    Channel.ENGINE: {
        Side.WINDOW: frozenset({Op.TARGET, Op.RUN, Op.WARM, Op.CALIBRATE, Op.FIT, Op.STOP, Op.QUIT}),
        Side.ENGINE: frozenset({Op.EVENTS, Op.FINISHED, Op.CALIBRATED, Op.FITTED, Op.WARMED, Op.INPUT_ERROR,
                                Op.ERROR}),
    },
    Channel.WORKER: {
        Side.COORDINATOR: frozenset({Op.INIT, Op.START, Op.REQUEST, Op.CANCEL, Op.STOP}),
        Side.WORKER: frozenset({Op.READY, Op.RECORDS, Op.ERROR, Op.DONE}),
    },
    Channel.KV: {
        Side.PREFILL: frozenset({Op.KV}),
        Side.DECODE: frozenset({Op.FREED}),
    },
    Channel.CLIENT: {
        Side.COORDINATOR: frozenset({Op.JOB, Op.GO, Op.USERS, Op.SEND, Op.END, Op.STOP, Op.ABORT}),
        Side.CLIENT: frozenset({Op.READY, Op.CLIENT_RECORDS, Op.STATS, Op.DONE}),
        Side.POOL: frozenset({Op.CRASHED, Op.LOST}),   # never on the wire: the pool's own word to its coordinator
    },
}

# the side a message read from a channel comes from, by the side that reads it
PEERS: dict[tuple[Channel, Side], Side] = {
    (Channel.ENGINE, Side.WINDOW): Side.ENGINE, (Channel.ENGINE, Side.ENGINE): Side.WINDOW,
    (Channel.WORKER, Side.COORDINATOR): Side.WORKER, (Channel.WORKER, Side.WORKER): Side.COORDINATOR,
    (Channel.KV, Side.PREFILL): Side.DECODE, (Channel.KV, Side.DECODE): Side.PREFILL,
    (Channel.CLIENT, Side.COORDINATOR): Side.CLIENT, (Channel.CLIENT, Side.CLIENT): Side.COORDINATOR,
}


def check(channel: Channel, sender: Side, message: Message) -> Message:
    """The message, if `sender` may send it on `channel`; ProtocolError naming what it may send if not."""
    allowed = CHANNELS[channel].get(sender)
    if allowed is None:
        raise ProtocolError(f"the {channel.value} channel has no {sender.value} side")
    op = getattr(message, "op", None)
    if op not in allowed:
        what = f"'{op.value}'" if isinstance(op, Op) else f"a {type(message).__name__}"
        raise ProtocolError(f"the {sender.value} side of the {channel.value} channel may not send {what} "
                            f"(it sends: {', '.join(sorted(o.value for o in allowed))})")
    return message


# ---- the framing --------------------------------------------------------------------------------

_HEADER = struct.Struct("!I")   # the pickle's length: a frame is at most 4 GiB (a KV block never goes in one)
HEADER_BYTES = _HEADER.size


def encode(message: Message) -> bytes:
    """One frame: the body's length, then the pickle of (op, fields...) (the op's value, not the class, on the wire)."""
    body = pickle.dumps((message.op.value, *[getattr(message, name) for name in _FIELDS[type(message)]]),
                        protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(body)) + body


def decode(frame: bytes | bytearray | memoryview) -> Message:
    """The message of one whole frame (as `encode` made it); ProtocolError for anything else."""
    view = memoryview(frame)
    if len(view) < HEADER_BYTES or _HEADER.unpack_from(view)[0] != len(view) - HEADER_BYTES:
        raise ProtocolError(f"not one whole frame ({len(view)} bytes)")
    op, *values = pickle.loads(view[HEADER_BYTES:])
    try:
        cls = MESSAGES[Op(op)]
    except ValueError:
        raise ProtocolError(f"unknown message {op!r}") from None
    return cls(*values)


def frame_length(header: bytes) -> int:
    """The whole frame's length, from its first HEADER_BYTES."""
    return HEADER_BYTES + _HEADER.unpack_from(header)[0]


def split_frames(buffer: bytes) -> tuple[list[Message], bytes]:
    """The messages of the whole frames at the start of `buffer`, and what is left of it (a frame's start)."""
    messages, at = [], 0
    view = memoryview(buffer)
    while len(view) - at >= HEADER_BYTES:
        end = at + frame_length(view[at:at + HEADER_BYTES])
        if end > len(view):
            break
        messages.append(decode(view[at:end]))
        at = end
    return messages, bytes(view[at:])


def frame(channel: Channel, sender: Side, message: Message) -> bytes:
    """The frame of a message `sender` may send on `channel` (for a stream or an actor call)."""
    return encode(check(channel, sender, message))


async def read_message(reader: asyncio.StreamReader, channel: Channel, reader_side: Side) -> Message | None:
    """The next message from a stream, checked as the peer's; None at the end of the stream."""
    try:
        header = await reader.readexactly(HEADER_BYTES)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise ProtocolError(f"the {channel.value} stream ended inside a frame") from None
        return None
    try:
        body = await reader.readexactly(frame_length(header) - HEADER_BYTES)
    except asyncio.IncompleteReadError:
        raise ProtocolError(f"the {channel.value} stream ended inside a frame") from None
    return check(channel, PEERS[channel, reader_side], decode(header + body))


class Port:
    """One side's end of a channel over a multiprocessing Connection: sends what this side may send,
    reads what the peer may send. Has `fileno`, so multiprocessing.connection.wait takes it."""

    __slots__ = ("conn", "channel", "side", "peer")

    def __init__(self, conn: Connection, channel: Channel, side: Side):
        self.conn, self.channel, self.side = conn, channel, side
        self.peer = PEERS[channel, side]

    def send(self, message: Message) -> None:
        self.conn.send_bytes(encode(check(self.channel, self.side, message)))

    def recv(self) -> Message:
        """The next message (blocks); EOFError when the other end has closed."""
        return check(self.channel, self.peer, decode(self.conn.recv_bytes()))

    def poll(self, timeout: float | None = 0.0) -> bool:
        return self.conn.poll(timeout)

    def fileno(self) -> int:
        return self.conn.fileno()

    def close(self) -> None:
        self.conn.close()

    # a KV block's bytes under the pipe transport: one raw frame after their header, never pickled
    def send_payload(self, data) -> None:
        self.conn.send_bytes(data)

    def recv_payload_into(self, buffer: bytearray) -> None:
        """The raw frame that follows a KVHandoff, read straight into `buffer` (its block's nbytes; empty: skipped)."""
        if len(buffer):
            self.conn.recv_bytes_into(buffer)
        else:
            self.conn.recv_bytes()
