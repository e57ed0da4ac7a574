"""The disaggregated policy on the real engine: the KV hand-off moves exactly the prefilled entries,
decode workers never prefill, the records carry the split, and a killed worker fails only its requests."""
import os
import signal
import socket
import threading
from multiprocessing.connection import Connection

import pytest
import torch

from backend.config import EngineConfig, ModelChoice, RunConfig, SamplingConfig
from backend.engine.decode_batch import DecodeBatch
from backend.targets.disaggregated import coordinator
from backend.targets.disaggregated.coordinator import plan_layout, run_disaggregated, worker_devices
from tests.fakes.paged import row_keys, scramble
from backend.engine.kv_transfer import Arena, block_of, kv_bytes_per_token, new_memfd, pack, unpack, view_of
from backend.targets.disaggregated.events import WorkerLayout
from backend.engine.request import Request
from backend.errors import InputError
from backend.results.export import read_run
from backend.models import make_step_batch
from backend.protocol import Channel, KVHandoff, Port, Side
from backend.records import Phase, RecordBatch, RequestStatus, token_ids_by_request
from backend.session import execute
from backend.workload.arrivals import RequestSpec
from backend.workload.spec import apply_overrides, load_workload


def workload(**overrides):
    return apply_overrides(load_workload("mixed-lengths"), **{"num_requests": 6, "arrival": "burst",
                                                             "prompt_len": "20:60", "output_len": "6:10", **overrides})


def config(policy="disaggregated", model="tiny", tmp_path=None, **overrides) -> RunConfig:
    return RunConfig(mode="load", model=ModelChoice(model, "cpu", "float32"), sampling=SamplingConfig(ignore_eos=True),
                     engine=EngineConfig(policy=policy, max_batch=4, chunk_tokens=32), workload=workload(**overrides),
                     out_dir=str(tmp_path) if tmp_path else None)


def tokens_by_request(data) -> dict[int, list[int]]:
    return token_ids_by_request(data.tokens)


# ---- the hand-off itself, in one process ----------------------------------------------------------

def _prefill(runner, slot: int, ids: list[int]) -> None:
    with torch.inference_mode():
        runner.model(make_step_batch([(slot, 0, ids)], [], "cpu"), runner.cache)


def _decode(runner, slot: int, position: int, token: int) -> torch.Tensor:
    with torch.inference_mode():
        return runner.model(make_step_batch([], [(slot, position, token)], "cpu"), runner.cache)[0].clone()


@pytest.fixture(scope="module")
def smollm2():
    """The bundled model loaded for this module alone: its runners pack the weights in place, which
    would change the session's shared copy under the tests that read it as loaded."""
    from backend.loaders.weights import load_model
    return load_model("smollm2-135m", device="cpu", dtype="float32")


@pytest.mark.parametrize("transport", ["shm", "pipe"])
def test_hand_off_moves_exactly_the_prefilled_kv(smollm2, transport):
    """Prefill prompt[:-1] in one runner, move its KV, decode the last prompt token in another: the
    logits equal a single runner's that prefilled and decoded the same tokens itself, and every
    greedy token after them too. Both sides' block tables are scrambled differently: the hand-off
    moves blocks from wherever the source's row has them to wherever the destination's row has its own."""
    from backend.engine.runner import Runner
    sampling = SamplingConfig()
    prompt = smollm2.tokenizer.encode("The capital of France is Paris. The capital of Italy is")
    n = len(prompt) - 1
    source = Runner(smollm2, num_slots=3, max_len=64, sampling=sampling, use_cuda_graphs=False)
    dest = Runner(smollm2, num_slots=2, max_len=64, sampling=sampling, use_cuda_graphs=False)
    single = Runner(smollm2, num_slots=1, max_len=64, sampling=sampling, use_cuda_graphs=False)
    scramble(source.cache, seed=1)
    scramble(dest.cache, seed=2)
    _prefill(source, 2, prompt[:-1])
    block = block_of(source.cache, n)
    assert block.num_blocks == -(-n // 16)
    assert block.nbytes == kv_bytes_per_token(smollm2.shape, 4) * block.num_blocks * 16
    if transport == "shm":
        arena = Arena(new_memfd("test-kv"), block.nbytes, num_buffers=1, create=True)
        pack(source.cache, 2, block, view_of(block, arena.map))
        peer = Arena.open(os.dup(arena.fd), num_buffers=1)   # the decode side maps the same file
        unpack(dest.cache, 1, view_of(block, peer.map))
        del peer
    else:
        a, b = socket.socketpair()   # the link's two ends, as the workers hold them
        send = Port(Connection(a.detach()), Channel.KV, Side.PREFILL)
        recv = Port(Connection(b.detach()), Channel.KV, Side.DECODE)
        payload = torch.empty(block.shape, dtype=block.torch_dtype)
        pack(source.cache, 2, block, payload)
        spec = RequestSpec(0, 0.0, prompt, "", 1)

        def hand_off():
            send.send(KVHandoff(spec, 0.0, 1.0, "prefill-0", None, block))
            send.send_payload(payload.view(torch.uint8).reshape(-1).numpy())
        sender = threading.Thread(target=hand_off, daemon=True)
        sender.start()   # the block is larger than a socket's buffer: the other end reads while it is sent
        header = recv.recv()
        assert header.buffer is None and header.block == block
        buffer = bytearray(header.block.nbytes)
        recv.recv_payload_into(buffer)
        sender.join()
        unpack(dest.cache, 1, view_of(block, buffer))
        send.close()
        recv.close()
    whole = block.num_blocks * 16
    for layer in range(len(dest.cache.k)):   # the n prefilled positions moved, in whole blocks, nothing past them
        k, v = dest.cache.k[layer], dest.cache.v[layer]
        assert torch.equal(row_keys(k, dest.cache, 1, n), row_keys(source.cache.k[layer], source.cache, 2, n))
        assert torch.equal(row_keys(v, dest.cache, 1, n), row_keys(source.cache.v[layer], source.cache, 2, n))
        assert not row_keys(k, dest.cache, 1)[:, whole:].any() and not row_keys(k, dest.cache, 0).any()
    _prefill(single, 0, prompt[:-1])
    got, want = _decode(dest, 1, n, prompt[-1]), _decode(single, 0, n, prompt[-1])
    assert torch.equal(got, want)
    tokens_got, tokens_want = [], []
    for i in range(6):
        tokens_got.append(int(got.argmax()))
        tokens_want.append(int(want.argmax()))
        got, want = _decode(dest, 1, n + 1 + i, tokens_got[-1]), _decode(single, 0, n + 1 + i, tokens_want[-1])
        assert torch.equal(got, want)
    assert tokens_got == tokens_want
    if transport == "shm":
        arena.close()


# ---- pure pieces ---------------------------------------------------------------------------------

def test_layout_splits_the_cores_and_shares_them_when_too_few():
    assert plan_layout(1, 1, [0, 1]) == [("prefill-0", [0]), ("decode-0", [1])]
    assert plan_layout(1, 2, [0, 1, 2, 3]) == [("prefill-0", [0, 1]), ("decode-0", [2]), ("decode-1", [3])]
    assert plan_layout(2, 2, [5, 6]) == [("prefill-0", [5]), ("prefill-1", [6]), ("decode-0", [5]), ("decode-1", [6])]


def test_decode_batch_reserves_whole_sequences_and_never_prefills():
    batch = DecodeBatch(max_batch=2, kv_capacity=30, max_len=20)
    a = Request(0, list(range(10)), 5, 0.0)
    b = Request(1, list(range(12)), 6, 0.0)
    assert batch.can_admit(a)
    batch.admit(a, 9)
    assert not batch.can_admit(b)                    # 15 reserved + 18 > 30: it waits, nobody is preempted
    out = batch.schedule()
    assert out.phase is Phase.DECODE and not out.prefill and [c.start for c in out.chunks] == [9]
    finished = []
    for step in range(5):
        finished += batch.update(batch.schedule(), {0: 7}, float(step))
    assert finished == [a] and a.output_ids == [7] * 5 and batch.num_running == 0
    assert batch.can_admit(b)


def test_bad_worker_counts_are_refused_in_one_line():
    bad = config()
    bad.engine.prefill_workers = 0
    with pytest.raises(InputError, match="--prefill-workers"):
        execute(bad, lambda e: None, lambda: False)
    batch = config()
    batch.mode = "batch"
    with pytest.raises(InputError, match="load"):
        run_disaggregated(batch, lambda e: None, lambda: False)


def test_cuda_workers_each_get_their_own_gpu_or_are_refused_in_one_line():
    assert worker_devices("cuda", 3, cuda_devices=4) == ["cuda:0", "cuda:1", "cuda:2"]
    assert worker_devices("auto", 2, cuda_devices=2) == ["cuda:0", "cuda:1"]
    assert worker_devices("cuda:1", 1, cuda_devices=2) == ["cuda:1"]
    assert worker_devices("cpu", 2, cuda_devices=2) == ["cpu", "cpu"]   # the cores are split instead
    assert worker_devices("auto", 2, cuda_devices=0) == ["auto", "auto"]
    with pytest.raises(InputError, match=r"puts each of its 2 engine processes on its own GPU, and this machine "
                                         r"has 1: use fewer"):
        worker_devices("cuda", 2, cuda_devices=1)
    with pytest.raises(InputError, match=r"--device cuda:0 names one GPU.*use --device cuda \(cuda:0 to cuda:1\)"):
        worker_devices("cuda:0", 2, cuda_devices=2)


def test_a_cuda_run_on_one_gpu_is_refused_before_any_worker_starts(monkeypatch):
    monkeypatch.setattr(coordinator, "_cuda_devices", lambda device: 1)
    started = []
    monkeypatch.setattr(coordinator.Coordinator, "start_workers", lambda self, slots: started.append(slots))
    on_cuda = config()
    on_cuda.model.device = "cuda"
    with pytest.raises(InputError, match="on its own GPU, and this machine has 1"):
        run_disaggregated(on_cuda, lambda e: None, lambda: False)
    assert started == []


# ---- the engine processes -------------------------------------------------------------------------

def test_disaggregated_run_matches_one_engine_and_decode_workers_never_prefill(tmp_path):
    """Same requests through one engine (continuous) and through 1 prefill + 1 decode process: the same
    tokens; every decode worker step is decode-only; the files carry the worker and the TTFT split."""
    events = []
    finished = execute(config(tmp_path=tmp_path / "pd"), events.append, lambda: False)
    single = execute(config("continuous"), lambda e: None, lambda: False)
    assert finished.error is None and single.error is None
    run = read_run(tmp_path / "pd")
    assert tokens_by_request(run) == tokens_by_request(single.data)
    assert {s.worker for s in run.steps} == {"prefill-0", "decode-0"}
    for s in run.steps:
        if s.worker.startswith("decode"):
            assert s.phase is Phase.DECODE and s.num_prefill_tokens == 0 and s.num_prefill_requests == 0
        else:
            assert s.phase is Phase.PREFILL and s.num_decode_tokens == 0
    assert [s.step for s in run.steps] == list(range(len(run.steps)))
    assert len(run.requests) == 6 and all(r.status is RequestStatus.FINISHED for r in run.requests)
    for r in run.requests:
        # whole blocks of 16 tokens move: the last one's positions past the prompt travel unread
        assert r.kv_bytes == kv_bytes_per_token_of("tiny") * -(-(r.prompt_tokens - 1) // 16) * 16
        parts = r.queue_ms + r.prefill_ms + r.kv_transfer_ms + r.first_decode_ms
        assert parts == pytest.approx(r.ttft_ms, abs=1e-6)
        assert min(r.queue_ms, r.prefill_ms, r.kv_transfer_ms, r.first_decode_ms) >= 0
    layout = run.info.disaggregated
    assert [w["name"] for w in layout.workers] == ["prefill-0", "decode-0"]
    assert all(w["cores"] for w in layout.workers) and layout.kv_transport in ("shm", "pipe")
    assert run.summary.num_handed_off == 6 and run.summary.kv_bytes_total > 0
    shown = [e for e in events if isinstance(e, WorkerLayout)]
    assert len(shown) == 1 and shown[0].names == ["prefill-0", "decode-0"]
    # the workers' arithmetic, and the unit each phase's steps ran on, as a single engine's run says it
    assert run.info.host.matmul["mode"] == "auto" and run.info.host.matmul["fp32_unit"]
    ran = run.info.host.matmul_steps
    assert sum(ran["prefill"].values()) == sum(s.phase is Phase.PREFILL for s in run.steps)
    assert sum(ran["decode"].values()) == sum(s.phase is Phase.DECODE for s in run.steps)


def kv_bytes_per_token_of(name: str) -> int:
    from backend.models import SHAPES
    return kv_bytes_per_token(SHAPES[name], 4)


@pytest.mark.parametrize("transport", ["pipe", "shm"])
def test_two_decode_workers_share_the_requests(transport):
    cfg = config(num_requests=8)
    cfg.engine.decode_workers, cfg.engine.kv_transport = 2, transport
    finished = execute(cfg, lambda e: None, lambda: False)
    single = execute(config("continuous", num_requests=8), lambda e: None, lambda: False)
    assert finished.error is None
    assert tokens_by_request(finished.data) == tokens_by_request(single.data)
    workers = {s.worker for s in finished.data.steps}
    assert workers == {"prefill-0", "decode-0", "decode-1"}
    assert finished.data.info.disaggregated.kv_transport == transport


@pytest.mark.parametrize("victim", ["decode-0", "prefill-0"])
def test_killing_a_worker_fails_its_requests_and_the_run_ends(tmp_path, victim):
    """SIGKILL one worker part way: its requests end as errors naming it, every request has a record,
    the run returns with the error, its files are written, and no process is left."""
    pids: dict[str, int] = {}
    killed = []

    def emit(event):
        if isinstance(event, WorkerLayout):
            pids.update({w["name"]: w["pid"] for w in event.workers})
        elif isinstance(event, RecordBatch) and not killed:
            if any(s.worker == "decode-0" for s in event.steps):   # decodes under way, prompts still queued
                os.kill(pids[victim], signal.SIGKILL)
                killed.append(victim)

    cfg = config(tmp_path=tmp_path, num_requests=10, arrival="constant", rate=20.0, prompt_len="100:200",
                 output_len="40:60")
    finished = execute(cfg, emit, lambda: False)
    assert killed == [victim]
    assert finished.error is not None and victim in finished.error and "signal 9" in finished.error
    run = read_run(tmp_path)
    assert sorted(r.request_id for r in run.requests) == list(range(10))
    failed = [r for r in run.requests if r.status is RequestStatus.ERROR]
    assert failed and all(victim in r.finish_reason for r in failed)
    assert all(r.status in (RequestStatus.FINISHED, RequestStatus.ERROR) for r in run.requests)
    for pid in pids.values():   # every worker is gone (reaped: no zombie, no orphan)
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_stop_ends_every_worker_and_keeps_the_records(tmp_path):
    """Stop after the first decode step: every request that arrived has a record, the unfinished ones
    say why, and the files are written."""
    seen = []

    def emit(event):
        if isinstance(event, RecordBatch) and any(s.worker == "decode-0" for s in event.steps):
            seen.append(event)

    cfg = config(tmp_path=tmp_path, num_requests=6, prompt_len="60:100", output_len="30:40")
    finished = execute(cfg, emit, lambda: bool(seen))
    assert finished.stopped and finished.error is None
    run = read_run(tmp_path)
    assert sorted(r.request_id for r in run.requests) == list(range(6))
    unfinished = [r for r in run.requests if r.status is not RequestStatus.FINISHED]
    assert unfinished and all(r.finish_reason == "stopped by user" for r in unfinished)
