"""Tokens per chunk by the tokenizer (backend.targets.remote.chunk_tokens), with a stand-in tokenizer."""
from backend.targets.remote.chunk_tokens import ChunkCounter


def words(text: str) -> int:
    return len(text.split())


def test_each_chunk_is_counted_alone_and_indexes_run_on_per_request():
    counter = ChunkCounter(words)
    assert [counter.index(7, piece) for piece in (" a", " b c d", " e")] == [0, 3, 4]
    assert counter.index(8, " x y") == 1   # another request counts from its own start
    assert counter.finish(7) == 5 and counter.finish(8) == 2
    assert counter.finish(7) is None       # ended: nothing left of it


def test_a_chunk_the_tokenizer_counts_as_nothing_still_carried_a_token():
    counter = ChunkCounter(words)
    assert counter.tokens("  ") == 1 and counter.tokens(" one two") == 2


def test_pieces_are_counted_once():
    seen = []
    counter = ChunkCounter(lambda text: seen.append(text) or 1)
    for _ in range(3):
        counter.index(0, " tok")
    assert seen == [" tok"] and counter.finish(0) == 3


def test_token_records_index_only_the_chunks_the_server_did_not_count():
    from backend.targets.remote.chunk_tokens import token_records
    rows = [[1, 0, 10.0, 2], [2, 2, 11.0, 0], [1, 1, 12.0, 6], [2, 5, 13.0, 0], [3, 0, 14.0]]
    text = {1: " a b c d", 2: " x y z"}   # request 1's chunks " a" and " b c d"; request 2's counted by the server
    records = token_records(rows, text, ChunkCounter(words))
    assert [(r.request_id, r.index, r.time_ms) for r in records] == [(1, 0, 10.0), (2, 2, 11.0), (1, 3, 12.0),
                                                                      (2, 5, 13.0), (3, 0, 14.0)]
    assert [r.index for r in token_records(rows, text, None)] == [0, 2, 1, 5, 0]   # no tokenizer: as the worker said
