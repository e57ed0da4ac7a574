"""Remote conversations: each turn sends the last turn's prompt, the server's answer and a new message,
after the answer and the think time (a fake server that logs what it read, and a real llama.cpp server)."""
from __future__ import annotations

from backend.config import RemoteEndpoint, RunConfig
from backend.records import RequestStatus
from backend.targets.remote.prompts import bundled_tokenizer_path
from backend.targets.remote.target import run_remote
from backend.workload.spec import workload_from_dict
from tests.fakes.llama_server import FakeServer, llama_server

ANSWER = "Hello from the fake server"


def conversations(**fields):
    data = {"arrival": "closed", "concurrency": 2, "num_requests": 2, "turns": 3, "ramp_ms": 0.0, "think_ms": 20.0,
            "prompt_len": 24, "turn_len": 8, "output_len": 4, "prompt_source": "text", "shared_prefix_len": 10,
            "seed": 0}
    return workload_from_dict({**data, **fields}, "turns")


def drive(endpoint, spec):
    config = RunConfig(mode="load", workload=spec, endpoint=endpoint)
    config.sampling.ignore_eos = True
    return run_remote(config, lambda event: None, lambda: False)


def check_turns(records, think_ms: float) -> None:
    """Every conversation's turns in order, each arriving after the last one's answer and the think time."""
    assert all(r.status is RequestStatus.FINISHED for r in records)
    by_turn = {(r.conversation_id, r.turn): r for r in records}
    assert sorted(by_turn) == [(c, t) for c in range(2) for t in range(3)]
    for (c, t), r in by_turn.items():
        if t:
            before = by_turn[(c, t - 1)]
            assert r.arrival_ms >= before.finish_ms + think_ms - 1.0   # planned at finish + think; sent on time


def test_text_turns_send_the_conversation_so_far_with_the_servers_answers():
    with FakeServer() as server:
        finished = drive(RemoteEndpoint(server.url, "ok", None, "completions", 5.0, False), conversations())
    assert finished.error is None
    check_turns(finished.data.requests, 20.0)
    prompts = [body["prompt"] for body in server.bodies]
    assert len(prompts) == 6 and all(isinstance(p, str) for p in prompts)
    firsts = [p for p in prompts if ANSWER not in p]
    assert len(firsts) == 2 and firsts[0][:20] == firsts[1][:20]   # the shared system prompt
    for p in prompts:
        if p not in firsts:   # a later turn: an earlier prompt, the answer it got, then a new message
            assert any(p.startswith(q + ANSWER + "\n\n") and len(p) > len(q + ANSWER) + 2 for q in prompts)


def test_token_id_turns_append_the_answers_ids_by_the_served_models_tokenizer():
    gguf = bundled_tokenizer_path()
    spec = conversations(prompt_source="synthetic")
    with FakeServer() as server:
        finished = drive(RemoteEndpoint(server.url, "ok", None, "completions", 5.0, False, str(gguf)), spec)
    assert finished.error is None
    check_turns(finished.data.requests, 20.0)
    from backend.targets.remote.prompts import load_tokenizer
    answer = load_tokenizer(str(gguf), "ok").encode(ANSWER)
    prompts = [body["prompt"] for body in server.bodies]
    assert all(isinstance(p, list) for p in prompts)
    later = [p for p in prompts if len(p) > 24]
    assert len(later) == 4
    assert all(any(p[:len(q) + len(answer)] == q + answer for q in prompts if len(q) < len(p)) for p in later)


def test_a_real_llama_cpp_server_holds_the_conversations(tmp_path):
    with llama_server(log_path=tmp_path / "server.log") as server:
        finished = drive(RemoteEndpoint(server.url, "smollm2", None, "completions", 60.0, False),
                         conversations(think_ms=10.0))
    assert finished.error is None
    check_turns(finished.data.requests, 10.0)
    # each later prompt counted by the served model's tokenizer: the earlier prompt, its answer and a new message
    by_turn = {(r.conversation_id, r.turn): r for r in finished.data.requests}
    for c in range(2):
        for t in (1, 2):
            before, now = by_turn[(c, t - 1)], by_turn[(c, t)]
            assert now.prompt_tokens_source in ("server", "tokenizer") and before.output_tokens > 0
            assert now.prompt_tokens >= before.prompt_tokens + before.output_tokens
