"""The measured crossover is the knee of a fit over the whole batch curve, not the first slow point."""
import random

import pytest

from backend.sweeps.crossover import fit_batch_curve, measured_crossover, rising_part

BATCHES = [1, 2, 4, 8, 16, 32, 64]


def _curve(fixed_ms: float, per_request_ms: float, batches=BATCHES, noise=None):
    """tokens/s of steps costing fixed + per_request * B, each step time scaled by noise[i] if given."""
    noise = noise or [1.0] * len(batches)
    return [b * 1000.0 / ((fixed_ms + per_request_ms * b) * n) for b, n in zip(batches, noise)]


def test_an_exact_curve_gives_back_its_terms_and_its_knee():
    fit = fit_batch_curve(BATCHES, _curve(20.0, 2.0))
    assert fit.fixed_ms == pytest.approx(20.0) and fit.per_request_ms == pytest.approx(2.0)
    assert fit.knee == pytest.approx(10.0) and fit.crossover(64) == 10
    assert fit.ceiling_tokens_per_s == pytest.approx(500.0) and fit.rms_error < 1e-9


def test_a_curve_that_keeps_climbing_reports_no_early_crossover_though_one_point_is_slow():
    """The tour's case: batch 2 measured slow, the rest climbing to 6x at batch 16. The first point
    below proportional was batch 2; the fit's knee lies beyond the sweep."""
    batches = [1, 2, 4, 8, 16]
    tokens = _curve(40.0, 0.5, batches, noise=[1.0, 1.35, 1.0, 1.0, 1.0])
    assert tokens[1] / tokens[0] < 1.5   # the old rule's trigger: batch 2 grew by less than half
    fit = fit_batch_curve(batches, tokens)
    assert fit.knee > 16 and fit.crossover(16) is None


def test_a_knee_inside_the_sweep_is_found_through_noise():
    rng = random.Random(7)
    noise = [1.0 + rng.uniform(-0.1, 0.1) for _ in BATCHES]
    assert 7 <= fit_batch_curve(BATCHES, _curve(30.0, 3.0, noise=noise)).crossover(64) <= 14


def test_a_step_whose_time_does_not_grow_never_crosses_over():
    fit = fit_batch_curve([1, 2, 4], [10.0, 20.0, 40.0])
    assert fit.crossover(4) is None and fit.knee > 1e6


def test_a_step_that_costs_the_same_per_request_is_past_its_crossover_from_the_start():
    fit = fit_batch_curve([1, 2, 4, 8], [100.0, 99.0, 101.0, 100.0])
    assert fit.fixed_ms == pytest.approx(0.0, abs=0.5) and fit.crossover(8) == 1


def test_too_few_points_or_a_point_without_throughput_fit_nothing():
    assert fit_batch_curve([4], [100.0]) is None
    assert fit_batch_curve([4, 4], [100.0, 110.0]) is None
    assert fit_batch_curve([1, 2], [100.0, 0.0]) is None


def test_a_fall_past_the_peak_is_left_out_of_the_fit_a_plateau_is_not():
    """Measured here: 611 tokens/s at batch 8, 397 at 16 (another unit took the 16-row products). With it,
    the fit bent at batch 1 while the points climbed to 8; without it, at 2."""
    batches, tokens = [1, 2, 4, 8, 16], [254.1, 394.1, 536.1, 611.1, 396.9]
    assert rising_part(tokens) == 4
    assert fit_batch_curve(batches, tokens).crossover(16) == 1
    assert measured_crossover(batches, tokens) == 2
    assert rising_part([58.5, 106.3, 102.5, 101.8, 98.5]) == 5   # levelled off, within FALL of the peak
    assert measured_crossover([1, 2, 4, 8, 16], [58.5, 106.3, 102.5, 101.8, 98.5]) == 1
