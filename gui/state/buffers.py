"""Preallocated column buffers for plot data. Pure numpy: no Qt, testable alone.

The window appends a few records at a time but repaints whole arrays, so the buffers keep
each column contiguous (column-major storage) and grow by doubling: appending is amortized
O(1) and a repaint hands pyqtgraph views, never copies of Python lists.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

MergeRule = str | Callable[[np.ndarray, np.ndarray], np.ndarray]

_RULES: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "first": lambda a, b: a,
    "last": lambda a, b: b,
    "min": np.minimum,
    "max": np.maximum,
    "sum": np.add,
    "mean": lambda a, b: (a + b) / 2.0,
}


class GrowableBuffer:
    """Rows of named float64 columns in one preallocated array that doubles when full."""

    def __init__(self, columns: Sequence[str], capacity: int = 1024):
        if not columns:
            raise ValueError("a buffer needs at least one column")
        self.columns = tuple(columns)
        self._index = {name: i for i, name in enumerate(self.columns)}
        self._data = np.empty((len(self.columns), max(1, capacity)))  # (C, capacity): columns contiguous
        self._size = 0
        self._max_capacity = 1 << 62   # growth stops doubling here (a RecentBuffer's limit)

    def __len__(self) -> int:
        return self._size

    @property
    def capacity(self) -> int:
        return self._data.shape[1]

    @property
    def nbytes(self) -> int:
        return self._data.nbytes

    def append(self, rows) -> None:
        """Append rows given as a (k, C) array-like (or one row of C values)."""
        block = np.asarray(rows, dtype=np.float64).reshape(-1, len(self.columns))  # (k, C)
        k = block.shape[0]
        if k == 0:
            return
        need = self._size + k
        if need > self.capacity:
            grown = np.empty((len(self.columns), max(need, min(2 * self.capacity, self._max_capacity))))
            grown[:, :self._size] = self._data[:, :self._size]
            self._data = grown
        self._data[:, self._size:need] = block.T
        self._size = need

    def append_columns(self, values: Mapping[str, Sequence[float]]) -> None:
        """Append rows given column by column (every column, equal lengths)."""
        self.append(np.column_stack([np.asarray(values[name], dtype=np.float64) for name in self.columns]))

    def column(self, name: str) -> np.ndarray:
        """A view of one column's filled part; writing into it updates the buffer."""
        return self._data[self._index[name], :self._size]

    def table(self) -> np.ndarray:
        """A view of every filled row: shape (C, n)."""
        return self._data[:, :self._size]

    def drop_front(self, k: int) -> np.ndarray:
        """Remove the oldest k rows and return a copy of them, shape (C, k)."""
        k = min(k, self._size)
        head = self._data[:, :k].copy()
        self.discard_front(k)
        return head

    def discard_front(self, k: int) -> None:
        """Remove the oldest k rows."""
        k = min(k, self._size)
        self._data[:, :self._size - k] = self._data[:, k:self._size]
        self._size -= k

    def clear(self) -> None:
        self._size = 0


class RecentBuffer(GrowableBuffer):
    """A GrowableBuffer that keeps only its newest rows: between `limit // 2` and `limit` of them.

    When an append would pass the limit, the oldest rows are dropped down to half of it in one
    move, so dropping costs about one row copy per row appended and the array never grows
    past `limit` rows. `num_dropped` counts the rows gone, so `num_dropped + i` is row i's
    position in everything ever appended.
    """

    def __init__(self, columns: Sequence[str], limit: int, capacity: int = 1024):
        if limit < 2:
            raise ValueError("a recent buffer must hold at least two rows")
        super().__init__(columns, capacity=min(capacity, limit))
        self._max_capacity = limit
        self.limit = limit
        self.num_dropped = 0

    def append(self, rows) -> None:
        block = np.asarray(rows, dtype=np.float64).reshape(-1, len(self.columns))  # (k, C)
        if len(block) > self.limit:
            self.num_dropped += len(block) - self.limit
            block = block[-self.limit:]
        if len(self) + len(block) > self.limit:
            drop = min(len(self), len(self) + len(block) - self.limit // 2)
            self.discard_front(drop)
            self.num_dropped += drop
        super().append(block)

    @property
    def num_appended(self) -> int:
        return self.num_dropped + len(self)

    def clear(self) -> None:
        super().clear()
        self.num_dropped = 0


def merge_pairs(table: np.ndarray, rules: Sequence[Callable[[np.ndarray, np.ndarray], np.ndarray]]) -> np.ndarray:
    """Merge consecutive rows pairwise, column by column; an odd last row is kept as it is.

    table: (C, n) -> (C, ceil(n / 2)).
    """
    n = table.shape[1]
    even = n - n % 2
    a, b = table[:, 0:even:2], table[:, 1:even:2]   # (C, n // 2) each
    merged = np.stack([rule(a[i], b[i]) for i, rule in enumerate(rules)]) if even else table[:, :0]
    return np.concatenate([merged, table[:, even:]], axis=1)


class BoundedBuffer:
    """Newest rows at full resolution; older rows merged pairwise into a capped history.

    Once more than `recent` rows are held, the oldest half of them is merged pairwise and
    moved into the history; when the history passes `history` rows it is merged pairwise
    again. Memory therefore stays flat however long a run goes, the latest `recent // 2`
    rows or more are always exact, and older ones are summarized by the merge rules
    (e.g. a bar's start "first", its end "last", its height "max" so peaks survive).
    """

    def __init__(self, columns: Sequence[str], merge: Mapping[str, MergeRule],
                 recent: int = 50_000, history: int = 50_000):
        if recent < 2 or history < 2:
            raise ValueError("recent and history must each hold at least two rows")
        self.columns = tuple(columns)
        self._rules = [_RULES[merge[c]] if isinstance(merge[c], str) else merge[c] for c in self.columns]
        self._recent_cap = recent
        self._history_cap = history
        self._recent = GrowableBuffer(columns, capacity=min(recent + 1, 4096))
        self._history = GrowableBuffer(columns, capacity=min(history + 1, 4096))
        self._cache: dict[str, np.ndarray] | None = None
        self.num_appended = 0   # rows ever appended (before merging)

    def __len__(self) -> int:
        return len(self._history) + len(self._recent)

    @property
    def nbytes(self) -> int:
        return self._recent.nbytes + self._history.nbytes

    @property
    def num_exact(self) -> int:
        """How many of the newest rows are held unmerged."""
        return len(self._recent)

    def append(self, rows) -> None:
        block = np.asarray(rows, dtype=np.float64).reshape(-1, len(self.columns))  # (k, C)
        if block.shape[0] == 0:
            return
        self.num_appended += block.shape[0]
        self._cache = None
        # a huge block is fed in slices so the recent buffer never outgrows its cap by much
        for start in range(0, block.shape[0], self._recent_cap):
            self._recent.append(block[start:start + self._recent_cap])
            if len(self._recent) > self._recent_cap:
                self._spill()

    def append_columns(self, values: Mapping[str, Sequence[float]]) -> None:
        self.append(np.column_stack([np.asarray(values[name], dtype=np.float64) for name in self.columns]))

    def _spill(self) -> None:
        keep = self._recent_cap // 2
        spill = len(self._recent) - keep
        spill -= spill % 2   # whole pairs only, so merged rows never straddle the boundary
        self._history.append(merge_pairs(self._recent.drop_front(spill), self._rules).T)
        while len(self._history) > self._history_cap:
            merged = merge_pairs(self._history.table(), self._rules)
            self._history.clear()
            self._history.append(merged.T)

    def column(self, name: str) -> np.ndarray:
        """History then recent rows of one column, oldest first (a fresh array, cached until the next append)."""
        if self._cache is None:
            self._cache = {c: np.concatenate([self._history.column(c), self._recent.column(c)]) for c in self.columns}
        return self._cache[name]

    def clear(self) -> None:
        self._recent.clear()
        self._history.clear()
        self._cache = None
        self.num_appended = 0
