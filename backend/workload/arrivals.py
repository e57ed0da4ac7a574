"""Arrivals: the request sources the engine and the remote driver draw from as wall-clock time passes.

A RequestSource hands out RequestSpecs as their arrival times pass: FixedSource a fixed list
(one batch for `run`), WorkloadSource a workload spec's requests.

A workload is reproducible from its seed: arrival times come from one random stream, and each
request's lengths and prompt from a stream of its own (seeded by the workload seed and the
request index), so request i is the same whatever the timing.
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Callable, Protocol

from backend.errors import InputError
from backend.workload.prompts import PROMPTS
from backend.workload.spec import WorkloadSpec


@dataclass(slots=True)
class RequestSpec:
    request_id: int
    arrival_ms: float          # since the start of the run
    prompt_ids: list[int]
    prompt_text: str           # the text the prompt came from ("" for synthetic tokens)
    max_new_tokens: int


class RequestSource(Protocol):
    """What the engine and the remote driver ask of a source of requests."""

    @property
    def num_total(self) -> int | None:
        """Requests the source will hand out; None when not known in advance."""

    def due(self, now_ms: float) -> list[RequestSpec]:
        """The requests whose arrival time has passed, in arrival order."""

    def next_arrival_ms(self) -> float | None:
        """When the next known request arrives; None when none is pending."""

    def on_finish(self, now_ms: float) -> None:
        """A request left (finished or rejected); called once for every request handed out."""

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

    def on_finish(self, now_ms: float) -> None:
        pass

    def is_exhausted(self) -> bool:
        return self._next >= len(self._specs)


class WorkloadSource:
    """Hands out a workload's requests as their arrival times pass.

    Open-loop arrivals are drawn up front; a closed loop starts `concurrency` users at time 0
    and each user sends its next request as soon as its previous one leaves, so the engine
    must call `on_finish` for every request that finishes or is rejected.

    Text prompts are fitted to the drawn length: a shipped prompt is tokenized and cut to the
    length, or followed by further shipped prompts until it is long enough, so the lengths
    follow the distribution while the tokens stay real text. `prompt_text` holds the texts used
    (in full, even where the tokens were cut).
    """

    def __init__(self, spec: WorkloadSpec, tokenize: Callable[[str], list[int]] | None, vocab_size: int,
                 max_prompt_len: int | None = None):
        if spec.prompt_source == "text" and tokenize is None:
            raise InputError("prompt_source 'text' needs a tokenizer, and this model has none; use 'synthetic'")
        if vocab_size < 1:
            raise InputError(f"vocab_size must be at least 1, got {vocab_size}")
        self.spec = spec
        self._tokenize = tokenize
        self._vocab_size = vocab_size
        self._max_prompt_len = max_prompt_len
        self._tokenized: dict[int, list[int]] = {}
        self._in_flight = 0
        if spec.arrival == "closed":
            first = spec.concurrency if spec.num_requests is None else min(spec.concurrency, spec.num_requests)
            self._pending: deque[tuple[int, float]] = deque((i, 0.0) for i in range(first))
            self._num_total = spec.num_requests
        else:
            offsets = self._draw_offsets()
            self._pending = deque(enumerate(offsets))
            self._num_total = len(offsets)
        self._next_index = len(self._pending)

    @property
    def num_total(self) -> int | None:
        """Requests the workload will send; None for a closed loop that runs for a duration."""
        return self._num_total

    def due(self, now_ms: float) -> list[RequestSpec]:
        """The requests whose arrival time has passed, in arrival order."""
        out = []
        while self._pending and self._pending[0][1] <= now_ms:
            index, arrival_ms = self._pending.popleft()
            out.append(self._make(index, arrival_ms))
            self._in_flight += 1
        return out

    def next_arrival_ms(self) -> float | None:
        return self._pending[0][1] if self._pending else None

    def on_finish(self, now_ms: float) -> None:
        """A request left the engine (finished or rejected): in a closed loop its user sends the next."""
        self._in_flight -= 1
        if self.spec.arrival != "closed":
            return
        if self.spec.num_requests is not None:
            more = self._next_index < self.spec.num_requests
        else:
            more = now_ms < self.spec.duration_s * 1000.0
        if more:
            self._pending.append((self._next_index, now_ms))
            self._next_index += 1

    def is_exhausted(self) -> bool:
        """No request will arrive any more."""
        if self._pending:
            return False
        if self.spec.arrival != "closed":
            return True
        if self.spec.num_requests is not None:
            return self._next_index >= self.spec.num_requests
        return self._in_flight <= 0

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
        n = self.spec.prompt_len.sample(rng)
        if self._max_prompt_len is not None:
            n = min(n, self._max_prompt_len)
        max_new = self.spec.output_len.sample(rng)
        if self.spec.prompt_source == "synthetic":
            ids, text = rng.choices(range(self._vocab_size), k=n), ""
        else:
            ids, text = self._fit_text(rng, n)
        return RequestSpec(index, arrival_ms, ids, text, max_new)

    def _fit_text(self, rng: random.Random, n: int) -> tuple[list[int], str]:
        ids: list[int] = []
        texts: list[str] = []
        while len(ids) < n:
            k = rng.randrange(len(PROMPTS))
            if k not in self._tokenized:
                self._tokenized[k] = list(self._tokenize(PROMPTS[k]))
                if not self._tokenized[k]:
                    raise InputError("the tokenizer turned a shipped prompt into no tokens")
            texts.append(PROMPTS[k])
            ids.extend(self._tokenized[k])
        return ids[:n], "\n\n".join(texts)
