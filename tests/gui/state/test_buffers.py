"""The window's plot buffers: growth, exact recent rows, bounded memory with merged history."""
import numpy as np
import pytest

from gui.state.buffers import BoundedBuffer, GrowableBuffer, RecentBuffer, merge_pairs


def test_growable_buffer_keeps_every_row_in_order_across_growth():
    buf = GrowableBuffer(["x", "y"], capacity=4)
    for i in range(0, 100, 3):
        rows = [[j, 2 * j] for j in range(i, min(i + 3, 100))]
        buf.append(rows)
    assert len(buf) == 100
    assert np.array_equal(buf.column("x"), np.arange(100))
    assert np.array_equal(buf.column("y"), 2 * np.arange(100))
    assert buf.capacity >= 100
    assert buf.capacity <= 256   # doubling, not one allocation per append


def test_growable_buffer_columns_are_writable_views_and_drop_front_shifts():
    buf = GrowableBuffer(["a"], capacity=2)
    buf.append_columns({"a": [1, 2, 3, 4]})
    buf.column("a")[1] = 20
    head = buf.drop_front(2)
    assert head.tolist() == [[1, 20]]
    assert buf.column("a").tolist() == [3, 4]


def test_growable_buffer_rejects_rows_of_the_wrong_width():
    buf = GrowableBuffer(["a", "b"])
    with pytest.raises(ValueError):
        buf.append([1, 2, 3])


def test_merge_pairs_applies_each_rule_and_keeps_an_odd_row():
    table = np.array([[0, 10, 20, 30, 40],     # start: first
                      [5, 15, 25, 35, 45],     # end: last
                      [1, 7, 3, 2, 9]], float)  # height: max
    rules = [lambda a, b: a, lambda a, b: b, np.maximum]
    merged = merge_pairs(table, rules)
    assert merged.tolist() == [[0, 20, 40], [15, 35, 45], [7, 3, 9]]


def make_steps(n, start=0):
    i = np.arange(start, start + n, dtype=float)
    return np.column_stack([i * 10, i * 10 + 5, (i % 7) + 1])   # start, end, tokens


def test_bounded_buffer_below_cap_is_exact():
    buf = BoundedBuffer(["start", "end", "tokens"], {"start": "first", "end": "last", "tokens": "max"},
                        recent=100, history=100)
    buf.append(make_steps(60))
    assert len(buf) == 60
    assert np.array_equal(buf.column("start"), np.arange(60) * 10.0)


def test_bounded_buffer_stays_flat_and_keeps_newest_rows_exact():
    rules = {"start": "first", "end": "last", "tokens": "max"}
    buf = BoundedBuffer(["start", "end", "tokens"], rules, recent=1000, history=1000)
    sizes = []
    for chunk in range(100):                 # 100,000 steps in batches of 1000
        buf.append(make_steps(1000, chunk * 1000))
        sizes.append(buf.nbytes)
    assert buf.num_appended == 100_000
    assert len(buf) <= 2000
    # memory reached its ceiling early and never grew after that
    assert max(sizes[10:]) == sizes[10]
    start, end, tokens = buf.column("start"), buf.column("end"), buf.column("tokens")
    # the newest rows are exact
    assert np.array_equal(start[-buf.num_exact:], np.arange(100_000 - buf.num_exact, 100_000) * 10.0)
    assert buf.num_exact >= 500
    # merged history still covers the whole run, in order, and peaks survive
    assert start[0] == 0.0 and end[-1] == 99_999 * 10 + 5
    assert np.all(np.diff(start) > 0)
    assert np.all(end[:-1] <= start[1:])
    assert tokens.max() == 7.0


def test_bounded_buffer_feeds_a_huge_block_in_slices():
    buf = BoundedBuffer(["start", "end", "tokens"], {"start": "first", "end": "last", "tokens": "sum"},
                        recent=64, history=64)
    buf.append(make_steps(10_000))
    assert len(buf) <= 128
    # a "sum" rule conserves the total across every merge
    assert buf.column("tokens").sum() == make_steps(10_000)[:, 2].sum()


def test_recent_buffer_keeps_the_newest_rows_in_a_fixed_array():
    buf = RecentBuffer(["i"], limit=1000)
    capacities = set()
    for start in range(0, 100_000, 70):      # 70 rows at a time, as records arrive
        buf.append(np.arange(start, min(start + 70, 100_000), dtype=float))
        capacities.add(buf.capacity)
    assert 500 <= len(buf) <= 1000
    assert max(capacities) == 1000           # never grown past its limit
    assert buf.num_appended == 100_000 and buf.num_dropped == 100_000 - len(buf)
    # the newest rows, exact and in order: row i is the (num_dropped + i)-th ever appended
    assert np.array_equal(buf.column("i"), np.arange(buf.num_dropped, 100_000, dtype=float))


def test_recent_buffer_takes_a_block_larger_than_its_limit():
    buf = RecentBuffer(["i"], limit=64)
    buf.append(np.arange(10.0))
    buf.append(np.arange(10.0, 1000.0))
    assert buf.column("i").tolist() == list(np.arange(936.0, 1000.0))
    assert buf.num_dropped == 936
    buf.clear()
    assert len(buf) == 0 and buf.num_dropped == 0
