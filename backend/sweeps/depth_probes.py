"""The two ways `sweep depth` sends one request and times it: through the engine's targets (a `run` of
one prompt: the local engine, or the simulator) or straight to a remote server.

Each answers `measure(prompt_len, max_tokens)` with a Probe: the request's TTFT, the time its decode
tokens took and how many there were, and the prompt tokens it said came from a cache. Every request's
prompt is unique from its first token on, drawn from the sweep's nonce seed: a server gets NONCE_LEN
tokens at the start of the prompt, their first token never used twice in the sweep; the engine a seed
never used twice, from which its random prompt tokens are drawn. So no two requests of a sweep (nor
two sweeps, whose seeds differ) share a prefix block.
"""
from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, replace
from typing import Callable

from backend.config import BatchRun, RunConfig, RunKind
from backend.errors import RunError
from backend.events import Emit, ModelLoaded, Target
from backend.records import Phase, RecordBatch

NONCE_LEN = 8   # the unique tokens at the start of every prompt sent to a server


@dataclass(slots=True)
class Probe:
    ttft_ms: float                 # request sent -> first token (the engine: its prefill steps)
    decode_ms: float               # first token -> last token (the engine: its decode steps)
    decode_tokens: int             # tokens after the first
    cached_tokens: int | None      # prompt tokens found in a prefix cache, as the answer (or the engine) says


class Stopped(Exception):
    """Stop was pressed during a request."""


class EngineProbe:
    """One `run` of one random prompt per request, through the target a `run` uses. Each run builds its
    own scheduler and KV cache, and its prompt is drawn from its own seed (the nonce), so its prefix
    cache starts empty and nothing in it could match; the run's recorded cached_prompt_tokens say so."""

    def __init__(self, config: RunConfig, target: Target, emit: Emit, should_stop: Callable[[], bool], seed: int):
        self.base = replace(config, mode=RunKind.BATCH, sweep=None, out_dir=None, repeats=1, workload=None,
                            endpoint=None, sampling=replace(config.sampling, ignore_eos=True),
                            engine=replace(config.engine, policy="static", max_batch=1))
        self.target, self.emit, self.should_stop = target, emit, should_stop
        self.loaded: ModelLoaded | None = None
        self.info = None
        self.nonces = random.Random(seed)
        self.used: set[int] = set()

    @property
    def context(self) -> int | None:
        """The model's longest sequence, once its first run has loaded it."""
        return self.loaded.shape.max_position if self.loaded is not None else None

    def measure(self, prompt_len: int, max_tokens: int) -> Probe:
        nonce = self.nonces.randrange(2**31)
        while nonce in self.used:
            nonce = self.nonces.randrange(2**31)
        self.used.add(nonce)
        config = replace(self.base, batch=BatchRun(prompt=None, prompt_len=prompt_len, output_len=max_tokens, batch=1),
                         sampling=replace(self.base.sampling, seed=nonce))
        steps = []

        def inner(event) -> None:
            if isinstance(event, RecordBatch):
                steps.extend(event.steps)
            elif isinstance(event, ModelLoaded):
                if self.loaded is None:
                    self.emit(event)
                self.loaded = event
        finished = self.target(config, inner, self.should_stop)
        if finished.stopped:
            raise Stopped
        if finished.error:
            raise RunError(finished.error)
        self.info = finished.data.info if finished.data else self.info
        prefill = [s.duration_ms for s in steps if s.phase is Phase.PREFILL]
        decode = [s.duration_ms for s in steps if s.phase is Phase.DECODE]
        if not prefill:
            raise RunError("the run gave no prefill step to time")
        requests = finished.data.requests if finished.data else []
        known = [r.cached_prompt_tokens for r in requests if r.cached_prompt_tokens is not None]
        return Probe(sum(prefill), sum(decode), len(decode), sum(known) if known else None)


class ServerProbe:
    """Requests streamed one at a time to a server's /v1/completions as token ids, on one keep-alive
    connection (the load driver's own client, backend.targets.remote.client), timed on this clock."""

    def __init__(self, config: RunConfig, seed: int):
        from backend.targets.remote.prompts import SYNTHETIC_FIRST_ID, SYNTHETIC_VOCAB
        self.endpoint = config.endpoint
        self.sampling = replace(config.sampling, ignore_eos=True)
        self.loop = asyncio.new_event_loop()
        self.t0 = time.perf_counter()
        self.streamer = None
        self.first, self.vocab = SYNTHETIC_FIRST_ID, SYNTHETIC_VOCAB
        self.body = random.Random(config.sampling.seed)   # the tokens after the nonce: the same at every depth
        self.nonces = random.Random(seed)
        self.firsts: set[int] = set()   # the nonces' first tokens so far: each used once
        self.words: list[int] = []
        self.context = None   # a server's context is not asked for: one too long is refused by it, in one line
        self.table: list[int] | None = None   # text mode: the single-token words the prompts are made of
        self.tokenizer = None
        self.requests_ok = 0

    def headers(self) -> dict[str, str]:
        key = self.endpoint.api_key
        return {"Authorization": f"Bearer {key}"} if key else {}

    def now_ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1000.0

    def prompt(self, prompt_len: int) -> list[int]:
        """NONCE_LEN distinct tokens whose first no other request of the sweep starts with, then the
        sweep's shared body: no two prompts share a first token, so no server can serve a block of one
        from its cache. Drawn as places in the vocabulary used (token ids, or text mode's words)."""
        size = self.vocab - self.first if self.table is None else len(self.table)
        while len(self.words) < prompt_len:
            self.words.append(self.body.randrange(size))
        head = self.nonces.sample(range(size), NONCE_LEN)
        while head[0] in self.firsts:
            head[0] = self.nonces.randrange(size)
        self.firsts.add(head[0])
        places = head + self.words[:max(prompt_len - NONCE_LEN, 0)]
        return [self.first + k for k in places] if self.table is None else [self.table[k] for k in places]

    def measure(self, prompt_len: int, max_tokens: int) -> Probe:
        from backend.targets.remote.client import RemoteFailure
        from backend.targets.remote.coordinator import REFUSED_IDS
        try:
            return self.loop.run_until_complete(self._one(self.prompt(prompt_len), max_tokens))
        except RemoteFailure as failure:
            if self.table is None and failure.kind in REFUSED_IDS and self.requests_ok == 0:
                self.to_text(failure)   # a server that takes text only (llama-cpp-python): words of one token each
                return self.measure(prompt_len, max_tokens)
            raise RunError(f"{failure.kind}: {failure.detail}") from None

    def to_text(self, failure) -> None:
        """Send text from now on: words the served model's tokenizer reads as one token each (" house"), so a
        prompt of N words is N tokens and starts with its own first word."""
        from backend.targets.remote.prompts import load_tokenizer
        tokenizer = load_tokenizer(self.endpoint.tokenizer, self.endpoint.model)
        if tokenizer is None:
            raise RunError(f"the server refused token-id prompts ({failure.kind}): give --tokenizer (the served model's "
                           ".gguf, folder or hub id) so text prompts of exact lengths can be sent") from None
        bare = len(tokenizer.encode(""))   # a BOS the tokenizer puts first
        table = []
        for i in range(min(tokenizer.vocab_size, 100_000)):
            text = tokenizer.decode([i])
            if len(text) > 3 and text[0] == " " and text[1:].isascii() and text[1:].isalpha() \
                    and tokenizer.encode(text)[bare:] == [i]:
                table.append(i)
        if len(table) < 1000:
            raise RunError(f"the server refused token-id prompts ({failure.kind}), and {tokenizer.name} has too few "
                           "one-token words to build text prompts of exact lengths") from None
        self.tokenizer, self.table = tokenizer, table
        self.words, self.firsts = [], set()

    async def _one(self, ids: list[int], max_tokens: int) -> Probe:
        from backend.targets.remote.client import StreamState, Streamer
        if self.streamer is None:   # made inside the loop: its connections belong to it
            e = self.endpoint
            self.streamer = Streamer(e.url, e.model, "completions", self.headers(), self.sampling, e.timeout_s,
                                     self.now_ms)
        state = StreamState(0, self.now_ms())

        def on_token(state: StreamState, text: str, now: float) -> None:
            state.token_times.append(now)
            state.text.append(text)
        # text mode: the words joined, which the tokenizer reads back as exactly these ids
        await self.streamer.send(ids if self.table is None else self.tokenizer.decode(ids), max_tokens, state, on_token)
        self.requests_ok += 1
        times = state.token_times
        if not times:
            raise RunError("the server streamed no token")
        # a chunk may carry several tokens: the server's count, where it gives one, over the time they took
        count = max(state.completion_tokens or 0, len(times))
        cached = state.cached_tokens if state.cached_tokens is not None else state.cached_timings
        return Probe(times[0] - state.arrival_ms, times[-1] - times[0], count - 1, cached)

    def counters(self) -> tuple[str, dict[str, float]] | None:
        """(the engine, its prefix-cache counters now) from its /metrics (vLLM, SGLang), None when it
        publishes none (llama.cpp: its answers' timings.cache_n say instead)."""
        import httpx
        from backend.targets.remote.metrics import metrics_url, server_metrics
        try:
            response = httpx.get(metrics_url(self.endpoint.url), headers=self.headers(), timeout=5.0)
        except httpx.HTTPError:
            return None
        reading = server_metrics(response.text, 0.0) if response.status_code == 200 else None
        if reading is None or not reading.counters:
            return None
        return reading.engine, dict(reading.counters)

    def close(self) -> None:
        if self.streamer is not None:
            self.streamer.close()
        self.loop.close()
