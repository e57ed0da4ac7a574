"""The wire protocol: every message survives its framing, and a side that says what it may not is stopped at once."""
import asyncio
import socket
from multiprocessing.connection import Connection

import numpy as np
import pytest

from backend import protocol as p
from backend.config import RunConfig, SamplingConfig
from backend.events import ModelLoaded, Progress, RunFinished
from backend.models.shapes import SHAPES
from backend.records import RecordBatch, TokenRecord
from backend.workload.arrivals import RequestSpec

LOADED = ModelLoaded("smollm2-135m", "cpu", "a CPU", "q4_1", "bundled", False, 134_515_008, 85_000_000, 1024,
                     SHAPES["smollm2-135m"])

SPEC = RequestSpec(request_id=7, arrival_ms=1.5, prompt_ids=[3, 4, 5], prompt_text="", max_new_tokens=4)


def sample(cls) -> p.Message:
    """One filled-in message of each kind, its payloads as the channels carry them."""
    batch = RecordBatch(tokens=[TokenRecord(request_id=7, index=0, time_ms=2.0)])
    return {
        p.UseTarget: p.UseTarget(None),
        p.Run: p.Run(RunConfig()),
        p.Warm: p.Warm(RunConfig()),
        p.Calibrate: p.Calibrate("cpu"),
        p.Fit: p.Fit("runs", "cpu", 2),
        p.Stop: p.Stop(),
        p.Quit: p.Quit(),
        p.Events: p.Events([Progress("loading", 0.5), batch]),
        p.Finished: p.Finished(RunFinished("run-1", {"ttft_ms": 1.0})),
        p.Calibrated: p.Calibrated({"name": "cpu"}),
        p.Fitted: p.Fitted({"terms": [1.0, 2.0]}),
        p.Warmed: p.Warmed(),
        p.InputFailed: p.InputFailed("--batch must be positive"),
        p.Failed: p.Failed("out of memory"),
        p.Ready: p.Ready(p.WorkerFigures(12, 2, [0, 1], 4, 1024, None, LOADED)),
        p.Done: p.Done(),
        p.Init: p.Init({"role": "prefill"}),
        p.Start: p.Start(123.25),
        p.Dispatch: p.Dispatch(SPEC, 1),
        p.Cancel: p.Cancel([7, 8]),
        p.WorkerRecords: p.WorkerRecords(batch, [(7, 3.5)], [8]),
        p.KVHandoff: p.KVHandoff(SPEC, 1.0, 2.0, "prefill-0", 3, ("block", 16)),
        p.Freed: p.Freed(3),
        p.Job: p.Job("http://127.0.0.1:1", "m", "completions", "sk-secret", 30.0, SamplingConfig(seed=4)),
        p.Go: p.Go(5.0),
        p.Users: p.Users(2, [0.0, 10.0], 5.0),
        p.Send: p.Send(7, None, [1001, 1002], 16),
        p.End: p.End(),
        p.Abort: p.Abort("every request failed"),
        p.ClientRecords: p.ClientRecords([[7, 1.0]], [p.RequestRow(7, "finished", "", "stop", 1.0, 2.0, 3.0, 3.5, 2,
                                                                   3, 2, "hi", 0.25)], [[7, 0, 2.0]], {7: "hi"}),
        p.Stats: p.Stats([0.1, 0.2], 1.0, 2.0, 3, 40, 1, ["top_p"]),
        p.Crashed: p.Crashed([7], "client worker 0 exited with status 1"),
        p.Lost: p.Lost([7], "client worker 0 on h was lost"),
    }[cls]


@pytest.mark.parametrize("cls", list(p.MESSAGES.values()), ids=lambda cls: cls.__name__)
def test_every_message_comes_back_from_its_frame_as_it_went(cls):
    message = sample(cls)
    back = p.decode(p.encode(message))
    assert type(back) is cls and back == message


def test_every_op_has_one_message_and_a_side_that_may_send_it():
    assert set(p.MESSAGES) == set(p.Op)
    sent = {op for sides in p.CHANNELS.values() for ops in sides.values() for op in ops}
    assert sent == set(p.Op)
    for (channel, side), peer in p.PEERS.items():   # every channel's two sides read each other
        assert p.PEERS[channel, peer] is side


@pytest.fixture
def ports():
    a, b = socket.socketpair()
    prefill = p.Port(Connection(a.detach()), p.Channel.KV, p.Side.PREFILL)
    decode = p.Port(Connection(b.detach()), p.Channel.KV, p.Side.DECODE)
    yield prefill, decode
    prefill.close()
    decode.close()


def test_a_side_may_not_send_what_its_channel_gives_the_other_side(ports):
    prefill, decode = ports
    with pytest.raises(p.ProtocolError, match=r"the decode side of the KV link channel may not send 'kv' "
                                              r"\(it sends: freed\)"):
        decode.send(sample(p.KVHandoff))
    with pytest.raises(p.ProtocolError, match="may not send 'run'"):
        prefill.send(p.Run(RunConfig()))   # another channel's message
    assert not prefill.poll(0.05)   # nothing refused went on the wire
    decode.send(p.Freed(2))
    assert prefill.recv() == p.Freed(2)


def test_a_message_the_peer_may_not_send_is_refused_when_read(ports):
    prefill, decode = ports
    decode.conn.send_bytes(p.encode(p.Stop()))   # around the check, as a buggy peer would
    with pytest.raises(p.ProtocolError, match="the decode side of the KV link channel may not send 'stop'"):
        prefill.recv()


def test_a_kv_blocks_bytes_follow_their_header_raw(ports):
    prefill, decode = ports
    block = np.arange(1024, dtype=np.float32)
    prefill.send(sample(p.KVHandoff))
    prefill.send_payload(block.view(np.uint8))
    prefill.send(sample(p.KVHandoff))
    prefill.send_payload(b"")   # an empty prompt's hand-off: an empty frame, skipped
    assert decode.recv().buffer == 3
    into = bytearray(block.nbytes)
    decode.recv_payload_into(into)
    assert np.array_equal(np.frombuffer(into, dtype=np.float32), block)
    decode.recv()
    decode.recv_payload_into(bytearray(0))
    decode.send(p.Freed(3))   # the link still reads frame by frame
    assert prefill.recv() == p.Freed(3)


def test_frames_are_found_in_a_stream_split_anywhere():
    messages = [p.Send(i, float(i), "x" * i, 4) for i in range(5)]
    stream = b"".join(p.encode(m) for m in messages)
    got, rest = [], b""
    for at in range(0, len(stream), 7):   # as an actor's polls bring them: any cut
        found, rest = p.split_frames(rest + stream[at:at + 7])
        got += found
    assert got == messages and rest == b""
    with pytest.raises(p.ProtocolError, match="not one whole frame"):
        p.decode(p.encode(messages[1])[:-1])


def test_a_stream_reads_its_messages_checked_and_ends_cleanly_or_says_it_was_cut():
    async def read(data: bytes, side=p.Side.CLIENT) -> list:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        out = []
        while (message := await p.read_message(reader, p.Channel.CLIENT, side)) is not None:
            out.append(message)
        return out

    frames = p.frame(p.Channel.CLIENT, p.Side.COORDINATOR, p.Go(1.0)) + \
        p.frame(p.Channel.CLIENT, p.Side.COORDINATOR, p.End())
    assert asyncio.run(read(frames)) == [p.Go(1.0), p.End()]
    with pytest.raises(p.ProtocolError, match="ended inside a frame"):
        asyncio.run(read(frames[:-2]))
    with pytest.raises(p.ProtocolError, match="the client side of the client worker channel may not send 'go'"):
        asyncio.run(read(frames, side=p.Side.COORDINATOR))   # the coordinator reading its own commands back


def test_the_api_key_is_not_in_a_jobs_repr():
    job = sample(p.Job)
    assert "sk-secret" not in repr(job) and p.decode(p.encode(job)).api_key == "sk-secret"


def test_a_client_workers_request_rows_come_back_named():
    back = p.decode(p.encode(sample(p.ClientRecords)))
    row = back.requests[0]
    assert isinstance(row, p.RequestRow) and row.sent_ms == 1.0 and row.late_ms == 0.25
