"""The engine's default thread count over the core counts users have (backend/engine/threads.py)."""
from __future__ import annotations

import pytest

from backend.engine.threads import choose_threads, cores_to_pin, describe_cores, physical_cores, window_choice


@pytest.mark.parametrize("cores, threads, left", [
    (1, 1, 0),     # nothing to spare: the engine and the window share the core
    (2, 1, 1),     # the machine this was measured on: one each
    (4, 3, 1),
    (8, 7, 1),
    (16, 14, 2),   # a second core for the window costs the engine 1/8 of its share at most
    (64, 62, 2),
])
def test_the_window_leaves_its_threads_a_core(cores, threads, left):
    choice = choose_threads(cores)
    assert (choice.threads, choice.left_for_window) == (threads, left)
    assert choice.threads + choice.left_for_window == cores


def test_hyperthreads_do_not_add_engine_threads():
    choice = choose_threads(16, physical=8)
    assert choice.threads == 8 and choice.left_for_window == 8
    assert "physical" in choice.reason
    assert choice.describe() == "engine: 8 threads of 16 cores (8 physical); 8 left for the window"
    assert choose_threads(4, physical=2).threads == 2


def test_an_explicit_count_wins_everywhere():
    assert choose_threads(8, requested=3).threads == 3
    assert choose_threads(8, requested=3).left_for_window == 5
    assert choose_threads(64, physical=32, requested=64, window=False).threads == 64
    assert "asked" in choose_threads(2, requested=2).reason


def test_headless_keeps_every_core():
    choice = choose_threads(16, window=False)
    assert choice.threads is None and choice.left_for_window == 0
    assert choice.describe() == "engine: every core of 16 cores"


def test_the_window_says_what_it_took():
    assert choose_threads(8).describe() == "engine: 7 threads of 8 cores; 1 left for the window"
    assert choose_threads(1).describe() == "engine: 1 thread of 1 core"
    assert "window" in choose_threads(2).reason


def test_this_machine_follows_its_affinity():
    import os
    cores = sorted(os.sched_getaffinity(0))
    choice = window_choice()
    assert choice.cores == len(cores)
    assert physical_cores(cores) in (None, *range(1, len(cores) + 1))
    assert window_choice(requested=1).threads == 1


def test_no_cores_is_a_programming_error():
    with pytest.raises(ValueError):
        choose_threads(0)


def test_core_lists_read_as_ranges():
    assert describe_cores([0, 1, 2, 5]) == "cores 0-2,5"
    assert describe_cores([3]) == "core 3"


def test_pinning_takes_one_hyperthread_per_physical_core_first():
    cores = list(range(8))
    apart = {c: c % 4 for c in cores}          # siblings numbered 4 apart: 0 and 4 share a core
    adjacent = {c: c // 2 for c in cores}      # siblings side by side: 0 and 1 share a core
    assert cores_to_pin(cores, 3, apart) == [5, 6, 7]
    assert cores_to_pin(cores, 3, adjacent) == [3, 5, 7]
    assert cores_to_pin(cores, 6, adjacent) == [1, 3, 4, 5, 6, 7]   # beyond the 4 physical cores: siblings too
    assert cores_to_pin(cores, 2, None) == [6, 7]                    # no topology: the last cores, as before
