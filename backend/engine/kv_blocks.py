"""The paged KV cache's accounting: a pool of fixed-size blocks, block tables, prefix caching.

Plain Python, no tensors: the scheduler (and the simulator through it) decides with this which
blocks each request holds; the model's physical cache is laid out the same way and is read
through the same block ids (a request's table, row = Request.slot).

  * A block holds `block_size` tokens' K/V. A request's table lists its blocks in token order;
    block i holds tokens i*block_size .. (i+1)*block_size - 1. Blocks are taken as tokens are
    scheduled and given back when the request finishes or is preempted.
  * Prefix caching (as vLLM's automatic prefix caching): once a block is FULL and computed it gets
    a hash chained from its parent block's hash and its own token ids, so equal hashes mean equal
    whole prefixes. A block given back keeps its contents and its hash (cached-but-free) until the
    pool needs it for something else: the free queue hands out the least recently used block
    first, and taking a cached one is an eviction. A new request looks up its longest cached
    prefix of full blocks, but never its whole sequence: at least one token must be computed, so
    that the step has logits to sample from.
  * Blocks shared by running requests carry a reference count; a block is free again only when
    no running request holds it.

`theoretical_hit_rate` replays prompts through a pool of this kind (or an infinite one): the hit
rate a workload allows, printed beside the measured one.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from backend.errors import InputError

DEFAULT_BLOCK_SIZE = 16


def check_block_size(block_size: int, max_len: int | None = None, what: str = "--kv-block-size") -> None:
    """One line for a block size that is not a power of two, or longer than the model's context."""
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1 \
            or block_size & (block_size - 1):
        raise InputError(f"{what} must be a power of two (1, 2, 4, ... 16 ...), got {block_size!r}")
    if max_len is not None and block_size > max_len:
        raise InputError(f"{what} {block_size} is larger than the model's context ({max_len} tokens)")


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks that hold `num_tokens` tokens: ceil(num_tokens / block_size)."""
    return -(-num_tokens // block_size)


def block_hash(parent: int | None, token_ids: Sequence[int]) -> int:
    """A full block's hash from its parent's hash and its tokens (the chain makes it name the whole
    prefix). Python's hash of a tuple of ints does not depend on PYTHONHASHSEED, so a run's hashes
    are reproducible; 64 bits make a collision between a run's blocks negligible."""
    return hash((parent, tuple(token_ids)))


def prefix_hashes(token_ids: Sequence[int], block_size: int, num_blocks: int | None = None) -> list[int]:
    """The chained hashes of the first `num_blocks` (default: every) full blocks of `token_ids`."""
    n = len(token_ids) // block_size if num_blocks is None else min(num_blocks, len(token_ids) // block_size)
    hashes: list[int] = []
    parent = None
    for i in range(n):
        parent = block_hash(parent, token_ids[i * block_size:(i + 1) * block_size])
        hashes.append(parent)
    return hashes


@dataclass(slots=True)
class PrefixCacheStats:
    """The pool's counters since it was made (lookups count once per admission)."""

    num_queries: int = 0        # lookups (one per admitted request; a preempted one looks up again)
    num_query_tokens: int = 0   # tokens of the sequences looked up
    num_hit_requests: int = 0   # lookups that found at least one cached block
    num_hit_tokens: int = 0     # tokens found cached (whole blocks)
    num_evictions: int = 0      # cached-but-free blocks taken for other contents

    @property
    def hit_rate(self) -> float:
        return self.num_hit_tokens / self.num_query_tokens if self.num_query_tokens else 0.0


class BlockPool:
    """`num_blocks` blocks of `block_size` tokens; tables are plain lists of block ids owned by the caller
    (a request's `block_ids`), with the chained hashes of its full computed blocks beside them."""

    def __init__(self, num_blocks: int, block_size: int = DEFAULT_BLOCK_SIZE, prefix_caching: bool = True):
        check_block_size(block_size)
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
            raise InputError(f"the KV cache must hold at least one block, got {num_blocks!r}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.stats = PrefixCacheStats()
        self._ref = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}    # hash -> block id holding that prefix
        # Blocks no request holds, the next to hand out first. A block without a hash holds nothing
        # worth keeping and goes to the front; a cached one goes to the back (least recently used first).
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        """Blocks a request can take now: free ones and cached-but-free ones (taking those evicts)."""
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def num_cached_blocks(self) -> int:
        """Blocks holding a hashed prefix, held or free."""
        return len(self._cached)

    def ref_count(self, block_id: int) -> int:
        return self._ref[block_id]

    def is_cached(self, block_id: int) -> bool:
        """Whether the block holds a named full block (a prefix a later request can find)."""
        return self._hash[block_id] is not None

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def find_cached(self, token_ids: Sequence[int]) -> tuple[list[int], list[int]]:
        """(block ids, their hashes) of the longest cached prefix of full blocks, leaving at least the
        last token to compute. Changes nothing and counts nothing (the scheduler may ask again)."""
        if not self.prefix_caching:
            return [], []
        bs = self.block_size
        blocks: list[int] = []
        hashes: list[int] = []
        parent = None
        for i in range((len(token_ids) - 1) // bs):
            parent = block_hash(parent, token_ids[i * bs:(i + 1) * bs])
            block = self._cached.get(parent)
            if block is None:
                break
            blocks.append(block)
            hashes.append(parent)
        return blocks, hashes

    def blocks_to_take(self, cached: Sequence[int], num_tokens: int, num_held: int = 0) -> int:
        """Free-pool blocks a table of `num_held` blocks (or, admitting, the cached prefix `cached`)
        takes to hold `num_tokens` tokens: the new blocks, and the cached ones nobody holds now."""
        reused = sum(1 for b in cached if self._ref[b] == 0)
        return max(0, self.blocks_for(num_tokens) - num_held - len(cached)) + reused

    def admit(self, table: list[int], hashes: list[int], token_ids: Sequence[int], num_tokens: int,
              cached: tuple[list[int], list[int]] | None = None) -> int | None:
        """Start an empty table: take the cached prefix of `token_ids` (or `cached`, from find_cached)
        and new blocks up to `num_tokens` tokens (the cached ones included). The cached tokens, or None
        (nothing changed) when the pool cannot hold it now. Counts one query."""
        if table:
            raise ValueError("admit needs an empty block table")
        blocks, block_hashes = cached if cached is not None else self.find_cached(token_ids)
        if self.blocks_to_take(blocks, num_tokens) > len(self._free):
            return None
        for b in blocks:
            self._touch(b)
        table.extend(blocks)
        hashes.extend(block_hashes)
        self.allocate(table, num_tokens)
        num_hit = len(blocks) * self.block_size
        stats = self.stats
        stats.num_queries += 1
        stats.num_query_tokens += len(token_ids)
        stats.num_hit_tokens += num_hit
        stats.num_hit_requests += num_hit > 0
        return num_hit

    def allocate(self, table: list[int], num_tokens: int) -> bool:
        """Grow the table to hold `num_tokens` tokens; False (nothing taken) when the pool has too few."""
        need = self.blocks_for(num_tokens) - len(table)
        if need <= 0:
            return True
        if need > len(self._free):
            return False
        for _ in range(need):
            table.append(self._take_free())
        return True

    def cache_full_blocks(self, table: Sequence[int], hashes: list[int], token_ids: Sequence[int],
                          num_computed: int) -> None:
        """Hash the table's full blocks whose tokens are all computed now (token_ids: the sequence)."""
        bs = self.block_size
        num_full = num_computed // bs
        if not self.prefix_caching or num_full <= len(hashes):
            return
        parent = hashes[-1] if hashes else None
        for i in range(len(hashes), num_full):
            parent = block_hash(parent, token_ids[i * bs:(i + 1) * bs])
            hashes.append(parent)
            block = table[i]
            # Two requests that computed the same prefix at once: the first block keeps the name, the
            # other stays unnamed and is plain free space once given back.
            if parent not in self._cached and self._hash[block] is None:
                self._cached[parent] = block
                self._hash[block] = parent

    def shrink(self, table: list[int], num_tokens: int) -> None:
        """Give back the table's blocks past the first `num_tokens` tokens' (a verification's rejected
        guesses: unnamed, as only blocks of computed tokens are named)."""
        keep = self.blocks_for(num_tokens)
        if len(table) > keep:
            tail = table[keep:]
            del table[keep:]
            self.free(tail)

    def free(self, table: list[int], hashes: list[int] | None = None) -> None:
        """Give back a table's blocks (finished or preempted); it is left empty. The table's last
        blocks are the least likely to be asked for again, so they are queued to go first."""
        ref, free, named = self._ref, self._free, self._hash
        for b in reversed(table):
            ref[b] -= 1
            if ref[b] == 0:
                free[b] = None
                if named[b] is None:
                    free.move_to_end(b, last=False)
        table.clear()
        if hashes is not None:
            hashes.clear()

    def _touch(self, block: int) -> None:
        """A request takes a cached block: out of the free queue if nobody held it."""
        if self._ref[block] == 0:
            del self._free[block]
        self._ref[block] += 1

    def _take_free(self) -> int:
        block, _ = self._free.popitem(last=False)
        name = self._hash[block]
        if name is not None:   # the least recently used cached prefix block: evicted
            del self._cached[name]
            self._hash[block] = None
            self.stats.num_evictions += 1
        self._ref[block] = 1
        return block


@dataclass(slots=True, frozen=True)
class HitRate:
    """What a replay of prompts found cached."""

    hit_tokens: int
    num_tokens: int
    hit_requests: int      # prompts with at least one cached block
    num_requests: int
    num_evictions: int = 0

    @property
    def tokens(self) -> float:
        return self.hit_tokens / self.num_tokens if self.num_tokens else 0.0

    @property
    def requests(self) -> float:
        return self.hit_requests / self.num_requests if self.num_requests else 0.0


def theoretical_hit_rate(prompts: Sequence[Sequence[int]], block_size: int = DEFAULT_BLOCK_SIZE,
                         num_blocks: int | None = None,
                         outputs: Sequence[Sequence[int]] | None = None) -> HitRate:
    """The prefix hit rate of replaying `prompts` in order, one at a time, each computed and given back
    before the next: with an infinite cache (num_blocks None: the workload's own ceiling) or an LRU pool
    of `num_blocks` blocks. Counted as the engine counts: whole blocks only, never a whole prompt, over
    the prompts' tokens. With `outputs` (one per prompt) each answer's blocks are cached behind its prompt,
    as the engine caches them, so a next turn that quotes the answer exactly can hit them. It ignores
    concurrency: requests running together hold their blocks at once, so a real pool of the same size can
    evict more, and a request admitted before another has computed their shared prefix finds nothing."""
    check_block_size(block_size)
    if outputs is not None and len(outputs) != len(prompts):
        raise InputError(f"theoretical_hit_rate: {len(outputs)} outputs for {len(prompts)} prompts")
    sequences = [list(p) + list(outputs[i]) if outputs is not None else p for i, p in enumerate(prompts)]
    if num_blocks is None:
        num_blocks = max(1, sum(blocks_for(len(q), block_size) for q in sequences))
    pool = BlockPool(num_blocks, block_size, prefix_caching=True)
    table: list[int] = []
    hashes: list[int] = []
    for prompt, sequence in zip(prompts, sequences):
        if not prompt:
            continue
        # a sequence longer than the pool keeps what fits of it (its first blocks) and reuses what it can
        blocks, block_hashes = pool.find_cached(prompt)
        num_tokens = min(len(sequence), num_blocks * block_size)
        if pool.admit(table, hashes, prompt, num_tokens, (blocks, block_hashes)) is None:
            raise AssertionError("an empty pool could not hold one prompt")   # every block is free here
        pool.cache_full_blocks(table, hashes, sequence, num_tokens)
        pool.free(table, hashes)
    s = pool.stats
    return HitRate(s.num_hit_tokens, s.num_query_tokens, s.num_hit_requests, s.num_queries, s.num_evictions)
