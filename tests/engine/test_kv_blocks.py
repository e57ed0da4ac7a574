"""The paged KV cache's accounting: the block pool, prefix caching and the theoretical hit rate; no tensors."""
from __future__ import annotations

import pytest

from backend.engine.kv_blocks import (BlockPool, HitRate, block_hash, check_block_size, prefix_hashes,
                                      theoretical_hit_rate)
from backend.errors import InputError


def computed(pool: BlockPool, tokens: list[int], table: list[int] | None = None,
             hashes: list[int] | None = None) -> tuple[list[int], list[int], int]:
    """A request admitted with `tokens`, all of them computed: (its table, its hashes, its cached tokens)."""
    table = [] if table is None else table
    hashes = [] if hashes is None else hashes
    hit = pool.admit(table, hashes, tokens, len(tokens))
    assert hit is not None
    pool.cache_full_blocks(table, hashes, tokens, len(tokens))
    return table, hashes, hit


@pytest.mark.parametrize("bad", [0, 3, 12, 17, -16, 2.0, True])
def test_a_block_size_must_be_a_power_of_two(bad):
    with pytest.raises(InputError, match="power of two"):
        check_block_size(bad)


def test_a_block_size_longer_than_the_context_is_refused():
    check_block_size(16, max_len=16)
    with pytest.raises(InputError, match="larger than the model's context"):
        check_block_size(32, max_len=20)


def test_a_block_hash_names_the_whole_prefix_not_only_its_own_tokens():
    a = list(range(8))
    b = [99] * 4 + list(range(4, 8))   # the same second block behind another first block
    ha, hb = prefix_hashes(a, 4), prefix_hashes(b, 4)
    assert ha[0] == block_hash(None, a[:4]) and ha[1] == block_hash(ha[0], a[4:])
    assert ha[1] != hb[1]
    assert prefix_hashes(a + [1, 2], 4) == ha   # a partial block has no hash


def test_blocks_are_taken_as_tokens_arrive_and_given_back():
    pool = BlockPool(8, 4, prefix_caching=False)
    table: list[int] = []
    assert pool.allocate(table, 5) and len(table) == 2
    assert pool.allocate(table, 8) and len(table) == 2   # the second block still has room
    assert pool.allocate(table, 9) and len(table) == 3
    assert pool.num_free_blocks == 5
    assert not pool.allocate(table, 40) and len(table) == 3   # too few: nothing taken
    pool.free(table)
    assert table == [] and pool.num_free_blocks == 8


def test_a_new_request_reuses_the_longest_cached_prefix_of_full_blocks():
    pool = BlockPool(16, 4)
    first, _, hit = computed(pool, list(range(10)))           # blocks [0..3], [4..7] full; [8, 9] partial
    assert hit == 0
    named = first[:2]
    pool.free(first)
    table, hashes, hit = computed(pool, list(range(8)) + [50, 51, 52])
    assert hit == 8 and table[:2] == named
    assert pool.stats.num_hit_tokens == 8 and pool.stats.num_hit_requests == 1 and pool.stats.num_queries == 2
    assert pool.stats.num_query_tokens == 21


def test_a_lookup_never_covers_the_whole_sequence():
    """At least one token is computed, so the step has logits to sample from."""
    pool = BlockPool(16, 4)
    table, _, _ = computed(pool, list(range(8)))
    pool.free(table)
    blocks, _ = pool.find_cached(list(range(8)))   # both blocks cached, but the last token must be computed
    assert len(blocks) == 1
    assert len(pool.find_cached(list(range(9)))[0]) == 2


def test_shared_blocks_are_counted_and_free_only_when_nobody_holds_them():
    pool = BlockPool(16, 4)
    a, a_hashes, _ = computed(pool, list(range(9)))
    b, b_hashes, hit = computed(pool, list(range(8)) + [7, 7, 7])
    assert hit == 8 and b[:2] == a[:2]
    assert [pool.ref_count(x) for x in a[:2]] == [2, 2]
    used = pool.num_used_blocks
    pool.free(a, a_hashes)
    assert pool.ref_count(b[0]) == 1 and pool.num_used_blocks == used - 1   # only a's own last block came back
    pool.free(b, b_hashes)
    assert pool.num_used_blocks == 0 and pool.num_cached_blocks == 2   # the shared prefix's two blocks, named once


def test_cached_free_blocks_are_evicted_least_recently_used_first():
    pool = BlockPool(4, 2)
    old, _, _ = computed(pool, [1, 2, 3, 4, 5])          # 3 blocks, 2 of them full and named
    pool.free(old)
    newer, _, _ = computed(pool, [9, 9])                 # one more named block: 4 blocks held or cached
    pool.free(newer)
    # A request that needs 2 blocks: the unnamed one first (nothing to lose), then the least recently
    # used named one: old's last full block (a table's tail goes before its head, whose prefix is likelier reused).
    table: list[int] = []
    assert pool.allocate(table, 4)
    assert pool.stats.num_evictions == 1
    assert len(pool.find_cached([1, 2, 3, 4, 0])[0]) == 1   # [1, 2] survived, [3, 4] was evicted
    assert len(pool.find_cached([9, 9, 0])[0]) == 1          # the most recent survived


def test_a_reused_block_becomes_most_recently_used():
    pool = BlockPool(3, 2)
    a, _, _ = computed(pool, [1, 1])
    pool.free(a)
    b, _, _ = computed(pool, [2, 2])
    pool.free(b)
    c, _, hit = computed(pool, [1, 1, 5])   # reuses [1, 1]: now the newest
    assert hit == 2
    pool.free(c)
    table: list[int] = []
    assert pool.allocate(table, 3)          # two blocks: c's unnamed tail, then [2, 2], the least recently used
    assert len(pool.find_cached([1, 1, 0])[0]) == 1 and pool.find_cached([2, 2, 0])[0] == []


def test_admission_refuses_what_does_not_fit_and_changes_nothing():
    pool = BlockPool(4, 4)
    table, hashes = [], []
    assert pool.admit(table, hashes, list(range(17)), 17) is None
    assert table == [] and pool.num_free_blocks == 4 and pool.stats.num_queries == 0


def test_without_prefix_caching_nothing_is_named_or_found():
    pool = BlockPool(8, 4, prefix_caching=False)
    table, _, _ = computed(pool, list(range(9)))
    pool.free(table)
    assert pool.num_cached_blocks == 0 and pool.find_cached(list(range(9))) == ([], [])


def test_theoretical_hit_rate_with_an_infinite_cache():
    # block 4: a shared 8-token prefix; prompts of 10, 10 and 9 tokens
    p = [1, 2, 3, 4, 5, 6, 7, 8]
    rate = theoretical_hit_rate([p + [10, 11], p + [20, 21], p + [30]], block_size=4)
    # the first finds nothing; each later one its two full prefix blocks (8 tokens)
    assert rate == HitRate(hit_tokens=16, num_tokens=29, hit_requests=2, num_requests=3)
    assert rate.tokens == pytest.approx(16 / 29) and rate.requests == pytest.approx(2 / 3)


def test_theoretical_hit_rate_never_counts_a_whole_prompt():
    rate = theoretical_hit_rate([[1, 2, 3, 4], [1, 2, 3, 4]], block_size=4)
    assert rate.hit_tokens == 0   # the second would be all cached, but its last token must be computed


def test_theoretical_hit_rate_of_a_small_lru_cache():
    a, b = [1] * 4 + [2] * 4, [3] * 4 + [4] * 4
    prompts = [a + [0], b + [0], a + [0]]   # each prompt takes 3 blocks, 2 of them named
    assert theoretical_hit_rate(prompts, 4).hit_tokens == 8          # infinite: a's prefix comes back
    small = theoretical_hit_rate(prompts, 4, num_blocks=3)           # b evicts all of a, then a all of b
    assert small.hit_tokens == 0 and small.num_evictions == 4
    # 4 blocks: b takes a's unnamed block, a free one and a's tail block (evicted); a's head stays, and a
    # then takes b's unnamed block and b's tail block (evicted)
    roomy = theoretical_hit_rate(prompts, 4, num_blocks=4)
    assert roomy.hit_tokens == 4 and roomy.num_evictions == 2


def test_theoretical_hit_rate_with_outputs_caches_the_answers_a_next_turn_quotes():
    turn1 = [1, 2, 3, 4, 5, 6]
    answer = [7, 8, 9, 10]
    turn2 = turn1 + answer + [11, 12, 13]   # the conversation so far, then a new message
    assert theoretical_hit_rate([turn1, turn2], 4).hit_tokens == 4                         # only turn1's full block
    assert theoretical_hit_rate([turn1, turn2], 4, outputs=[answer, [0]]).hit_tokens == 8  # and the answer's block
    assert theoretical_hit_rate([turn1, turn2], 4, outputs=[answer, [0]]).num_tokens == 19  # prompts only
    with pytest.raises(InputError, match="1 outputs for 2 prompts"):
        theoretical_hit_rate([turn1, turn2], 4, outputs=[answer])
