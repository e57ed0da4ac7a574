"""Workloads that reuse KV: conversations (--turns), a shared system prompt (--shared-prefix-len),
Mooncake hash_ids replayed block for block, and every workload's prompts for the theoretical hit rate."""
from __future__ import annotations

import heapq
import json

import pytest

from backend.errors import InputError
from backend.workload.arrivals import WorkloadSource
from backend.workload.spec import LengthDist, WorkloadSpec, apply_overrides, load_workload, validate_workload
from backend.workload.trace import read_trace

VOCAB = 1000


def spec(**fields) -> WorkloadSpec:
    base = dict(name="t", num_requests=3, arrival="burst", turns=3, prompt_len=LengthDist("fixed", 20),
                turn_len=LengthDist("fixed", 5), output_len=LengthDist("fixed", 4))
    return validate_workload(WorkloadSpec(**{**base, **fields}))


def serve(source: WorkloadSource, service_ms: float, answer=lambda r: [7] * r.max_new_tokens):
    """A fake server answering each request service_ms after it arrives; every request handed out, in order."""
    busy, seen = [], []
    while not source.is_exhausted() or busy:
        nxt = source.next_arrival_ms()
        if nxt is not None and (not busy or nxt <= busy[0][0]):
            for r in source.due(nxt):
                heapq.heappush(busy, (nxt + service_ms, r.request_id, r))
                seen.append(r)
            continue
        finish, _, r = heapq.heappop(busy)
        source.on_finish(finish, r.request_id, answer(r))
    return seen


def test_each_turn_extends_the_last_prompt_and_its_answer_and_waits_for_it():
    source = WorkloadSource(spec(think_ms=30.0), None, VOCAB)
    assert source.num_total == 9
    first = source.due(0.0)
    assert [(r.conversation_id, r.turn) for r in first] == [(0, 0), (1, 0), (2, 0)]
    assert source.due(1e9) == [] and not source.is_exhausted()   # turn 1 waits for turn 0's answer
    source.on_finish(100.0, first[1].request_id, [5, 6, 7])
    assert source.next_arrival_ms() == 130.0
    (second,) = source.due(130.0)
    assert (second.conversation_id, second.turn) == (1, 1)
    assert second.prompt_ids[:23] == first[1].prompt_ids + [5, 6, 7]
    assert second.history_len == 23 and len(second.prompt_ids) == 23 + 5 and second.max_new_tokens == 4
    for r in (first[0], first[2], second):
        source.on_finish(200.0, r.request_id, [])   # an empty answer (a rejected turn): the conversation goes on
    seen = serve(source, 10.0)
    assert sum(r.turn == 2 for r in seen) == 3 and len(seen) == 5 and source.is_exhausted()


def test_a_closed_loops_users_run_one_conversation_after_another():
    source = WorkloadSource(spec(arrival="closed", concurrency=2, num_requests=3, ramp_ms=0.0, think_ms=5.0),
                            None, VOCAB)
    seen = serve(source, 10.0)
    assert len(seen) == 9
    # conversation 2 starts only when a user's conversation ended: after its third turn
    third = next(r for r in seen if r.conversation_id == 2)
    ends = sorted(r.arrival_ms + 10.0 for r in seen if r.turn == 2 and r.conversation_id < 2)
    assert third.turn == 0 and third.arrival_ms == ends[0] + 5.0


def test_a_conversation_is_the_same_whatever_the_timing():
    fast = {(r.conversation_id, r.turn): r.prompt_ids for r in serve(WorkloadSource(spec(), None, VOCAB), 1.0)}
    slow = {(r.conversation_id, r.turn): r.prompt_ids for r in serve(WorkloadSource(spec(), None, VOCAB), 50.0)}
    assert fast == slow


def test_a_shared_prefix_starts_every_first_prompt():
    source = WorkloadSource(spec(turns=1, turn_len=None, num_requests=6, shared_prefix_len=12,
                                 prompt_len=LengthDist("uniform", low=8, high=30)), None, VOCAB)
    prompts = [r.prompt_ids for r in source.due(0.0)]
    shared = next(p for p in prompts if len(p) >= 12)[:12]
    assert all(p[:12] == shared[:len(p[:12])] for p in prompts)
    assert len({tuple(p[12:]) for p in prompts if len(p) > 12}) > 1   # the rest is each request's own
    plain = WorkloadSource(spec(turns=1, turn_len=None, num_requests=6), None, VOCAB).due(0.0)
    assert len({tuple(r.prompt_ids[:12]) for r in plain}) == 6


def test_text_conversations_are_real_tokens_of_the_shipped_texts():
    words: dict[str, int] = {}

    def tokenize(text: str) -> list[int]:
        return [words.setdefault(w, len(words)) for w in text.split()]
    source = WorkloadSource(spec(prompt_source="text", shared_prefix_len=6), tokenize, VOCAB)
    seen = serve(source, 5.0)
    known = set(words.values())
    later = [r for r in seen if r.turn > 0]
    assert later and all(set(r.prompt_ids[r.history_len:]) <= known and r.message_text for r in later)
    assert len({tuple(r.prompt_ids[:6]) for r in seen}) == 1


def test_prompt_token_lists_give_every_prompt_in_arrival_order_with_answers_of_the_length_asked():
    source = WorkloadSource(spec(think_ms=10.0), None, VOCAB)
    prompts = source.prompt_token_lists()
    assert len(prompts) == 9
    assert [len(p) for p in prompts] == [20] * 3 + [29] * 3 + [38] * 3   # 20, + 4 answer + 5, + 4 + 5
    for k in range(3):   # each later turn starts with the earlier prompt of its conversation
        assert prompts[3 + k][:20] == prompts[k] and prompts[6 + k][:29] == prompts[3 + k]
    assert source.due(0.0) and len(source.prompt_token_lists()) == 9   # the source itself is left as it was
    drawn = WorkloadSource(spec(turns=1, turn_len=None, num_requests=5, arrival="poisson", rate=5.0), None, VOCAB)
    assert drawn.prompt_token_lists() == [r.prompt_ids for r in drawn.due(1e12)]


def test_mooncake_hash_ids_give_identical_blocks_for_equal_ids(tmp_path):
    rows = [{"timestamp": 0, "input_length": 1100, "output_length": 4, "hash_ids": [1, 2, 3]},
            {"timestamp": 5, "input_length": 1024, "output_length": 4, "hash_ids": [1, 2]},
            {"timestamp": 9, "input_length": 700, "output_length": 4, "hash_ids": [1, 9]}]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    for source_kind in ("synthetic", "text"):
        words: dict[str, int] = {}
        tokenize = (lambda text: [words.setdefault(w, len(words)) for w in text.split()]) \
            if source_kind == "text" else None
        w = apply_overrides(load_workload("poisson-chat"), trace=str(path), prompt_source=source_kind)
        a, b, c = WorkloadSource(w, tokenize, VOCAB).prompt_token_lists()
        assert [len(a), len(b), len(c)] == [1100, 1024, 700]
        assert a[:1024] == b and a[:512] == c[:512] and a[512:1024] != c[512:1024]
        assert all(0 <= t < VOCAB for t in a)


def test_hash_ids_that_disagree_with_the_input_length_are_one_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 1100, "output_length": 4, "hash_ids": [1, 2]}\n')
    with pytest.raises(InputError) as caught:
        read_trace(path)
    assert str(caught.value) == (f"{path}: line 1: 2 hash_ids for input_length 1100, which is 3 blocks "
                                 "of 512 tokens")


@pytest.mark.parametrize("fields, words", [
    ({"turns": 0}, "field 'turns': must be at least 1"),
    ({"turns": 1, "turn_len": LengthDist("fixed", 5)}, "give turns > 1 too"),
    ({"turns": 1, "turn_len": None, "arrival": "poisson", "rate": 1.0, "think_ms": 5.0}, "conversation's turns"),
    ({"shared_prefix_len": -1}, "field 'shared_prefix_len': must be at least 0"),
])
def test_bad_conversation_settings_are_one_line(fields, words):
    with pytest.raises(InputError, match=words):
        spec(**fields)


def test_flags_name_themselves_and_old_workloads_read_the_same():
    base = load_workload("poisson-chat")
    assert "turns" not in base.to_dict() and "shared_prefix_len" not in base.to_dict()
    chat = apply_overrides(base, turns=4, turn_len="8:16", shared_prefix_len=32, think_ms=100.0)
    assert (chat.turns, chat.turn_len.describe(), chat.shared_prefix_len, chat.think_ms) == (4, "8:16", 32, 100.0)
    assert validate_workload(chat) == chat
    with pytest.raises(InputError, match="--turns: must be at least 1"):
        apply_overrides(base, turns=0)
    with pytest.raises(InputError, match="conversations are for drawn workloads"):
        apply_overrides(chat, trace="tests/data/traces/mooncake-50.jsonl")


class Recording:
    """A WorkloadSource that keeps what it handed out and the answers it was told of."""

    def __init__(self, inner: WorkloadSource):
        self.inner = inner
        self.handed: dict[int, object] = {}
        self.answers: dict[int, tuple[float, list[int]]] = {}

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def due(self, now_ms):
        out = self.inner.due(now_ms)
        self.handed.update((r.request_id, r) for r in out)
        return out

    def on_finish(self, now_ms, request_id=None, output_ids=None, output_text=""):
        self.answers[request_id] = (now_ms, list(output_ids))
        self.inner.on_finish(now_ms, request_id, output_ids, output_text)


def test_a_multi_turn_run_on_the_bundled_model(monkeypatch, tmp_path):
    """2 users x 3 turns, closed loop: each turn's prompt is the last prompt and the answer the model gave,
    then a new message; it arrives after that answer and the think time; the records name the turns."""
    from backend import session
    from backend.config import EngineConfig, RunConfig, RunKind
    from backend.results.export import read_run
    from backend.targets import local
    recorded: list[Recording] = []

    def source(config, loaded):
        recorded.append(Recording(original(config, loaded)))
        return recorded[-1]
    original = local.workload_source
    monkeypatch.setattr(local, "workload_source", source)
    # closed-loop-8 sends the shipped text prompts: real tokens of the model's tokenizer
    workload = apply_overrides(load_workload("closed-loop-8"), concurrency=2, num_requests=2, turns=3,
                               prompt_len="12", turn_len="6", output_len="3", think_ms=40.0, ramp_ms=0.0,
                               shared_prefix_len=8)
    config = RunConfig(mode=RunKind.LOAD, workload=workload, engine=EngineConfig(max_batch=2),
                       out_dir=str(tmp_path / "run"))
    finished = session.execute(config, lambda event: None, lambda: False)
    assert finished.error is None
    rec = recorded[0]
    specs = sorted(rec.handed.values(), key=lambda r: (r.conversation_id, r.turn))
    assert [(r.conversation_id, r.turn) for r in specs] == [(c, t) for c in range(2) for t in range(3)]
    assert specs[0].prompt_ids[:8] == specs[3].prompt_ids[:8]   # the shared system prompt
    for before, after in zip(specs, specs[1:]):
        if after.turn == 0:
            continue
        finish_ms, answer = rec.answers[before.request_id]
        assert answer and after.prompt_ids[:after.history_len] == before.prompt_ids + answer
        assert after.arrival_ms >= finish_ms + 40.0
    assert all(0 <= t < 49152 for r in specs for t in r.prompt_ids)   # SmolLM2's vocabulary
    run = read_run(tmp_path / "run")
    by_id = {r.request_id: r for r in run.requests}
    assert sorted((r.conversation_id, r.turn) for r in by_id.values()) == [(c, t) for c in range(2) for t in range(3)]
    assert all(by_id[r.request_id].prompt_tokens == len(r.prompt_ids) for r in specs)


def test_figures_by_turn_and_the_summary_line():
    from backend.records import RequestRecord, RequestStatus
    from backend.results.turns import by_turn, turns_line

    def record(rid, conversation, turn, ttft, prompt):
        r = RequestRecord.from_times(request_id=rid, status=RequestStatus.FINISHED, prompt_tokens=prompt,
                                     output_tokens=4, arrival_ms=0.0, first_token_ms=ttft, finish_ms=ttft + 1)
        r.conversation_id, r.turn = conversation, turn
        return r
    records = [record(0, 0, 0, 10.0, 100), record(1, 1, 0, 30.0, 100), record(2, 0, 1, 5.0, 140)]
    assert [(f.turn, f.num_finished, f.ttft_p50_ms, f.prompt_tokens_mean) for f in by_turn(records)] == \
        [(0, 2, 20.0, 100.0), (1, 1, 5.0, 140.0)]
    assert turns_line(records) == "turns    TTFT p50 by turn (mean prompt): 1 20.0 ms (100 tok), 2 5.0 ms (140 tok)"
    plain = record(3, -1, 0, 10.0, 100)
    assert by_turn([plain]) == [] and turns_line([plain]) is None
    long = [record(i, 0, i, float(i), 10) for i in range(20)]
    line = turns_line(long, most=4)
    assert line.endswith("1 0.0 ms (10 tok), 2 1.0 ms (10 tok), 3 2.0 ms (10 tok), ..., 20 19.0 ms (10 tok)")


def test_run_folders_written_before_conversations_read_as_not_part_of_one():
    from pathlib import Path
    from backend.results.export import read_run
    folder = Path(__file__).resolve().parents[1] / "data" / "runs_v1" / "sim-load"
    assert "conversation_id" not in (folder / "requests.csv").read_text().splitlines()[0]
    requests = read_run(folder).requests
    assert requests and all(r.conversation_id == -1 and r.turn == 0 for r in requests)
