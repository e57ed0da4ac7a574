"""Tokens per streamed chunk, by the served model's tokenizer, where the server sends no running count.

vLLM and SGLang put the running `completion_tokens` on every chunk (continuous_usage_stats), and the
worker indexes each chunk by it. llama.cpp, TGI and most others send none: a chunk is one event, and
most events carry one token, but not all (llama.cpp holds back a token that ends inside a UTF-8
character and sends it with the next; speculative decoding and parsers that hold tokens back send
several). So the coordinator counts each such chunk's text with the served model's tokenizer.

Why each chunk alone, not the answer so far: a server's chunk is made of whole generated tokens (a token's
bytes are never split between two events), so the chunk's own tokenization is the closest count of the
tokens behind it; counting the answer so far would merge tokens across chunks ("walk" + "ing") that the
model generated apart. A chunk with text carried at least one token, so a count of 0 (text the tokenizer
drops) reads 1. A model that generated a token the tokenizer would not produce for its text ("hel" +
"lo" in one chunk, where "hello" is one token) is counted as the tokenizer counts: the figures are the
tokenizer's, and `output_tokens_source` says "tokenizer".
"""
from __future__ import annotations

from typing import Callable

from backend.records import TokenRecord

MAX_CACHED = 200_000   # pieces remembered: answers repeat their tokens' texts, so most chunks are a lookup


class ChunkCounter:
    """Each request's running token index, from its chunks' texts; `count` gives a bare text's tokens."""

    def __init__(self, count: Callable[[str], int | None]):
        self._count = count
        self._cache: dict[str, int] = {}
        self._last: dict[int, int] = {}   # request id -> its last chunk's last token index

    def tokens(self, piece: str) -> int:
        """The tokens one chunk of text carried (at least 1)."""
        k = self._cache.get(piece)
        if k is None:
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            k = self._cache[piece] = max(1, self._count(piece) or 0)
        return k

    def index(self, request_id: int, piece: str) -> int:
        """The index of the last token of this request's next chunk."""
        index = self._last.get(request_id, -1) + self.tokens(piece)
        self._last[request_id] = index
        return index

    def finish(self, request_id: int) -> int | None:
        """The tokens counted for a request that ended (None: none of its chunks was counted here)."""
        last = self._last.pop(request_id, None)
        return None if last is None else last + 1


def token_records(tokens: list[list], text: dict[int, str], counter: ChunkCounter | None) -> list[TokenRecord]:
    """A worker's token rows ([request id, index, ms, the chunk's characters when the server sent no count]) and
    the text that came with them (request id -> the chunks' texts in order) as records: a chunk the server did
    not count is indexed by `counter` (None: the worker's index, one token a chunk)."""
    if counter is None:
        return [TokenRecord(request_id=row[0], index=row[1], time_ms=row[2]) for row in tokens]
    out, offsets = [], {}
    for row in tokens:
        rid, index = row[0], row[1]
        if len(row) > 3 and row[3]:
            start = offsets.get(rid, 0)
            offsets[rid] = end = start + row[3]
            index = counter.index(rid, text[rid][start:end])
        out.append(TokenRecord(request_id=rid, index=index, time_ms=row[2]))
    return out
