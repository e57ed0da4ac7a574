"""Arrivals: the request sources the engine and the remote driver draw from as wall-clock time passes.

A RequestSource hands out RequestSpecs as their arrival times pass: FixedSource a fixed list
(one batch for `run`), WorkloadSource a workload spec's requests, drawn or replayed from a trace.

A workload is reproducible from its seed: arrival times come from one random stream, and each
request's lengths and prompt from a stream of its own (seeded by the workload seed and the
request index), so request i is the same whatever the timing.
"""
from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from typing import Callable, Protocol

from backend.workload.conversations import TEXT_JOIN, Conversation, ConversationPrompts
from backend.workload.prompt_fit import PromptMaker
from backend.workload.spec import WorkloadSpec
from backend.workload.trace import TraceRow
from backend.workload.trace import trace_rows

# A closed loop's default ramp: this many ms per mean output token, a served model's typical time per
# output token (an 8B model on one datacenter GPU: 7-15 ms; this tool's CPU engine: 25-65 ms).
DEFAULT_RAMP_MS_PER_TOKEN = 20.0


@dataclass(slots=True)
class RequestSpec:
    request_id: int
    arrival_ms: float          # since the start of the run
    prompt_ids: list[int]
    prompt_text: str           # the text the prompt came from ("" for synthetic tokens)
    max_new_tokens: int
    conversation_id: int = -1  # a conversation's requests share it (-1: not part of one)
    turn: int = 0              # the turn in its conversation, from 0
    history_len: int = 0       # leading prompt ids that repeat the conversation so far (earlier prompts, answers)
    message_text: str = ""     # a later turn: the texts its new message came from ("" for synthetic ids)


class RequestSource(Protocol):
    """What the engine and the remote driver ask of a source of requests."""

    @property
    def num_total(self) -> int | None:
        """Requests the source will hand out; None when not known in advance."""

    def due(self, now_ms: float) -> list[RequestSpec]:
        """The requests whose arrival time has passed, in arrival order."""

    def next_arrival_ms(self) -> float | None:
        """When the next known request arrives; None when none is pending."""

    def on_finish(self, now_ms: float, request_id: int | None = None, output_ids: list[int] | None = None,
                  output_text: str = "") -> None:
        """A request left (finished or rejected); called once for every request handed out, with its id
        and the answer it got (a conversation's next turn holds it; None: a stand-in of the length asked)."""

    def is_exhausted(self) -> bool:
        """No request will arrive any more."""


class FixedSource:
    """A fixed list of requests (one batch for `run`)."""

    def __init__(self, specs: list[RequestSpec]):
        self._specs = sorted(specs, key=lambda s: s.arrival_ms)
        self._next = 0

    @property
    def num_total(self) -> int:
        return len(self._specs)

    @property
    def max_sequence_len(self) -> int:
        return max((len(s.prompt_ids) + s.max_new_tokens for s in self._specs), default=1)

    def due(self, now_ms: float) -> list[RequestSpec]:
        out = []
        while self._next < len(self._specs) and self._specs[self._next].arrival_ms <= now_ms:
            out.append(self._specs[self._next])
            self._next += 1
        return out

    def next_arrival_ms(self) -> float | None:
        return self._specs[self._next].arrival_ms if self._next < len(self._specs) else None

    def on_finish(self, now_ms: float, request_id: int | None = None, output_ids: list[int] | None = None,
                  output_text: str = "") -> None:
        pass

    def is_exhausted(self) -> bool:
        return self._next >= len(self._specs)


class WorkloadSource:
    """Hands out a workload's requests as their arrival times pass.

    Open-loop arrivals are drawn up front, or read from the spec's trace file: request i is then
    the trace's row i (sorted by arrival) at its time divided by trace_speed, with its prompt and
    output lengths. A closed loop has `concurrency` users; user i sends its
    first request at i * ramp / concurrency (ramp: spec.ramp_ms, or by default a guess of one
    request's service time, DEFAULT_RAMP_MS_PER_TOKEN per mean output token; 0: all at once), and
    each user sends its next request think_ms after its previous one leaves, so the engine must call
    `on_finish` for every request that finishes or is rejected. Prompts are built by PromptMaker,
    drawn or traced alike; a prompt longer than max_prompt_len (the model's context) is cut to it,
    and a request that then still exceeds the engine's sequence length is rejected by the
    scheduler, with the reason, as any other.

    With spec.turns > 1 each arrival (or a closed loop's user, one conversation after another) starts
    a conversation, and its turn k+1 arrives think_ms after turn k left, its prompt extending turn k's
    prompt and answer (backend/workload/conversations.py): `on_finish` must then name the request and
    pass its output. A shared prefix (spec.shared_prefix_len) starts every first prompt.
    """

    def __init__(self, spec: WorkloadSpec, tokenize: Callable[[str], list[int]] | None, vocab_size: int,
                 max_prompt_len: int | None = None):
        self.spec = spec
        self._args = (tokenize, vocab_size, max_prompt_len)   # a twin for prompt_token_lists
        self._prompts = PromptMaker(spec.prompt_source, tokenize, vocab_size, spec.seed)
        self._turns = ConversationPrompts(spec, self._prompts, vocab_size, max_prompt_len)
        self._max_prompt_len = max_prompt_len
        self._in_flight = 0
        self._rows: list[TraceRow] | None = None
        self._live: dict[int, Conversation] = {}          # conversations with turns still to come
        self._of_request: dict[int, tuple[int, int]] = {}  # request id -> (conversation, turn), while in flight
        self._num_started = 0                             # conversations started
        # (arrival_ms, request index, conversation or -1): think times can reorder a closed loop's users
        self._pending: list[tuple[float, int, int]] = []
        if spec.trace is not None:
            self._rows = trace_rows(spec)
            starts = [row.arrival_ms for row in self._rows]
            self._num_total = len(self._rows)
        elif spec.arrival == "closed":
            first = spec.concurrency if spec.num_requests is None else min(spec.concurrency, spec.num_requests)
            ramp = closed_loop_ramp_ms(spec)
            starts = [i * ramp / spec.concurrency for i in range(first)]
            self._num_total = spec.num_total_requests
        else:
            starts = self._draw_offsets()
            self._num_total = len(starts) * spec.turns
        self._next_index = 0
        for at in starts:
            self._push(at, self._start_conversation() if spec.is_conversation else -1)
        heapq.heapify(self._pending)

    @property
    def num_total(self) -> int | None:
        """Requests the workload will send; None for a closed loop that runs for a duration."""
        return self._num_total

    def due(self, now_ms: float) -> list[RequestSpec]:
        """The requests whose arrival time has passed, in arrival order."""
        out = []
        while self._pending and self._pending[0][0] <= now_ms:
            arrival_ms, index, conversation = heapq.heappop(self._pending)
            out.append(self._make(index, arrival_ms) if conversation < 0 else
                       self._make_turn(index, arrival_ms, self._live[conversation]))
            self._in_flight += 1
        return out

    def next_arrival_ms(self) -> float | None:
        return self._pending[0][0] if self._pending else None

    def on_finish(self, now_ms: float, request_id: int | None = None, output_ids: list[int] | None = None,
                  output_text: str = "") -> None:
        """A request left the engine (finished or rejected): in a closed loop its user sends the next
        after its think time, and a conversation's next turn arrives after it (holding `output_ids`,
        the answer the request got: a stand-in of the length it asked for when None)."""
        self._in_flight -= 1
        at = now_ms + self.spec.think_ms
        if self.spec.is_conversation:
            if request_id is None or request_id not in self._of_request:
                raise ValueError(f"on_finish of a conversation's request needs its id, got {request_id!r}")
            conversation, turn = self._of_request.pop(request_id)
            conv = self._live[conversation]
            answer = output_ids if output_ids is not None else \
                self._turns.stand_in_answer(conv, turn, conv.last_max_new)
            conv.ids = conv.ids + list(answer)
            if output_text:
                conv.text = TEXT_JOIN.join(t for t in (conv.text, output_text) if t)
            if conv.next_turn < self.spec.turns:
                self._push(at, conversation)
                return
            del self._live[conversation]   # its last turn: a closed loop's user starts another conversation
        if self.spec.arrival != "closed":
            return
        if self.spec.num_requests is not None:
            more = (self._num_started if self.spec.is_conversation else self._next_index) < self.spec.num_requests
        else:
            more = at < self.spec.duration_s * 1000.0
        if more:
            self._push(at, self._start_conversation() if self.spec.is_conversation else -1)

    def is_exhausted(self) -> bool:
        """No request will arrive any more."""
        if self._pending or self._live:
            return False
        if self.spec.arrival != "closed":
            return True
        if self.spec.num_requests is not None:
            done = self._num_started if self.spec.is_conversation else self._next_index
            return done >= self.spec.num_requests
        return self._in_flight <= 0

    def prompt_token_lists(self, service_ms_per_token: float = DEFAULT_RAMP_MS_PER_TOKEN) -> list[list[int]]:
        """Every prompt the workload sends, in arrival order, for the theoretical prefix-cache hit rate
        (backend.engine.kv_blocks.theoretical_hit_rate): a fresh copy of this source run on a virtual
        clock, each request answered service_ms_per_token per output token after it arrives with a
        stand-in answer of the length it asked for. A closed loop for a duration ends as its
        requests would with that service time."""
        return self.prompts_and_outputs(service_ms_per_token)[0]

    def prompts_and_outputs(self, service_ms_per_token: float = DEFAULT_RAMP_MS_PER_TOKEN
                            ) -> tuple[list[list[int]], list[list[int]]]:
        """prompt_token_lists' prompts and each one's stand-in answer (the engine caches an answer's blocks
        behind its prompt): a conversation's answer is the one its next turn quotes; any other request's
        is its length of ids no prompt holds (negative), so it takes room in a pool but is never hit."""
        twin = WorkloadSource(self.spec, *self._args)
        busy: list[tuple[float, int]] = []
        prompts: list[list[int]] = []
        outputs: dict[int, list[int]] = {}
        index: dict[int, int] = {}   # request id -> its place in prompts
        while not twin.is_exhausted() or busy:
            nxt = twin.next_arrival_ms()
            if nxt is not None and (not busy or nxt <= busy[0][0]):
                for r in twin.due(nxt):
                    index[r.request_id] = len(prompts)
                    prompts.append(r.prompt_ids)
                    outputs[r.request_id] = [-1 - r.request_id] * r.max_new_tokens
                    heapq.heappush(busy, (nxt + service_ms_per_token * r.max_new_tokens, r.request_id))
                continue
            finish, rid = heapq.heappop(busy)
            turn = twin._of_request.get(rid)
            conv = twin._live[turn[0]] if turn is not None else None
            before = len(conv.ids) if conv is not None else 0
            twin.on_finish(finish, rid)
            if conv is not None:
                outputs[rid] = conv.ids[before:]   # the answer the conversation now holds
        return prompts, [outputs[rid] for rid, _ in sorted(index.items(), key=lambda kv: kv[1])]

    def _push(self, at: float, conversation: int) -> None:
        heapq.heappush(self._pending, (at, self._next_index, conversation))
        self._next_index += 1

    def _start_conversation(self) -> int:
        conversation = self._num_started
        self._live[conversation] = Conversation(conversation)
        self._num_started += 1
        return conversation

    def _draw_offsets(self) -> list[float]:
        spec = self.spec
        if spec.arrival == "burst":
            return [0.0] * spec.num_requests
        rng = random.Random(f"{spec.seed}:arrivals")
        mean_gap_ms = 1000.0 / spec.rate
        if spec.arrival == "constant":
            def gap() -> float: return mean_gap_ms
        elif spec.arrival == "poisson":
            def gap() -> float: return rng.expovariate(1.0 / mean_gap_ms)
        else:
            # Gamma with shape k and scale mean/k keeps the mean gap and sets the variance.
            def gap() -> float: return rng.gammavariate(spec.burstiness, mean_gap_ms / spec.burstiness)
        offsets, t = [], 0.0
        end_ms = None if spec.duration_s is None else spec.duration_s * 1000.0
        while (len(offsets) < spec.num_requests) if end_ms is None else (t < end_ms):
            offsets.append(t)
            t += gap()
        return offsets

    def _make(self, index: int, arrival_ms: float) -> RequestSpec:
        rng = random.Random(f"{self.spec.seed}:request:{index}")
        if self._rows is not None:
            row = self._rows[index]
            n, max_new, blocks = row.prompt_len, row.output_len, row.hash_ids
        else:
            n = self.spec.prompt_len.sample(rng)
            max_new, blocks = self.spec.output_len.sample(rng), ()
        if self._max_prompt_len is not None:
            n = min(n, self._max_prompt_len)
        if self.spec.shared_prefix_len:
            ids, text = self._turns.first(rng, n)
        else:
            ids, text = self._prompts.make(rng, n, blocks)
        return RequestSpec(index, arrival_ms, ids, text, max_new)

    def _make_turn(self, index: int, arrival_ms: float, conv: Conversation) -> RequestSpec:
        turn = self._turns.turn(conv)
        self._of_request[index] = (conv.conversation_id, conv.next_turn)
        spec = RequestSpec(index, arrival_ms, turn.prompt_ids, turn.prompt_text, turn.max_new_tokens,
                           conv.conversation_id, conv.next_turn, turn.history_len, turn.message_text)
        conv.ids, conv.text, conv.last_max_new = turn.prompt_ids, turn.prompt_text, turn.max_new_tokens
        conv.next_turn += 1
        return spec


def closed_loop_ramp_ms(spec: WorkloadSpec) -> float:
    """The time over which a closed loop's users start: spec.ramp_ms, else a guess of one request's
    service time (DEFAULT_RAMP_MS_PER_TOKEN per mean output token), so by the time the last user
    starts the first is about to send its second request and the users' phases are spread."""
    if spec.ramp_ms is not None:
        return spec.ramp_ms
    return DEFAULT_RAMP_MS_PER_TOKEN * spec.output_len.mean_value()
