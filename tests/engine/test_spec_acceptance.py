"""The acceptance rule of speculative decoding (backend/engine/spec/acceptance.py): greedy keeps exactly the
argmax run; sampling leaves the target's distribution unchanged, counted over many seeded draws; the draws
are keyed by (seed, request, position), so plain sampling and verification emit the same token at a position."""
import random

import torch

from backend.engine.runner import sample
from backend.engine.spec.acceptance import accept_greedy, accept_sampled, inverse_cdf, keyed_uniform, target_probs


def test_greedy_keeps_the_agreeing_prefix_and_replaces_the_first_disagreement():
    assert accept_greedy([5, 6, 7, 8], [5, 6, 9]) == (2, 7)
    assert accept_greedy([5, 6, 7, 8], [5, 6, 7]) == (3, 8)   # every guess kept: the last position's bonus
    assert accept_greedy([1, 6, 7, 8], [5, 6, 7]) == (0, 1)
    assert accept_greedy([4], []) == (0, 4)


def test_target_probs_are_the_distribution_sample_draws_from():
    """The same temperature and nucleus as the runner's sample(): its empirical frequencies match."""
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]])
    probs = target_probs(logits, 0.8, 0.9)[0]
    assert abs(float(probs.sum()) - 1) < 1e-6
    assert probs[5] == 0 and probs[4] == 0 and probs[0] > probs[1] > probs[2]   # outside the nucleus
    gen = torch.Generator().manual_seed(1)
    draws = sample(logits.expand(40_000, -1), 0.8, 0.9, gen)
    freq = torch.bincount(draws, minlength=6).float() / 40_000
    assert (freq - probs).abs().max() < 0.02   # 5 standard errors at most is 0.0125


def _frequencies(probs: torch.Tensor, drafts: list[int], draws: int, seed: int) -> torch.Tensor:
    """Over `draws` verifications: how often each token came out first (the kept first guess, else the
    replacement), and how often each token came out second where the first guess was kept."""
    rng = random.Random(seed)
    vocab = probs.shape[-1]
    first = torch.zeros(vocab)
    for _ in range(draws):
        kept, token = accept_sampled(probs, drafts, [rng.random() for _ in range(len(drafts) + 1)])
        first[drafts[0] if kept >= 1 else token] += 1
    return first / draws


def test_sampling_leaves_the_first_tokens_distribution_unchanged_whatever_the_guess():
    """For a guess the target finds likely, unlikely or impossible: the token emitted at the first position
    is distributed as p. 20,000 draws: a frequency's standard error is at most 0.0036, the bound is 6 of them."""
    p = torch.tensor([0.5, 0.25, 0.15, 0.1, 0.0])
    probs = torch.stack([p, torch.tensor([0.1, 0.2, 0.3, 0.4, 0.0])])   # (2, vocab): one guess, one bonus row
    for guess, seed in ((0, 1), (3, 2), (4, 3)):
        freq = _frequencies(probs, [guess], 20_000, seed)
        assert (freq - p).abs().max() < 0.022, (guess, freq)


def test_sampling_keeps_the_joint_distribution_of_two_positions():
    """Two guesses: the pair of tokens emitted at positions 1 and 2 is distributed as p1(a) * p2(b) (the
    second position's row is what the target gives after the first guess; here it does not depend on it)."""
    p1 = torch.tensor([0.6, 0.3, 0.1])
    p2 = torch.tensor([0.2, 0.5, 0.3])
    probs = torch.stack([p1, p2, torch.tensor([1 / 3, 1 / 3, 1 / 3])])
    rng = random.Random(7)
    counts = torch.zeros(3, 3)
    n = 0
    drafts = [0, 2]
    for _ in range(30_000):
        kept, token = accept_sampled(probs, drafts, [rng.random() for _ in range(3)])
        if kept == 0:
            continue   # the second position then comes from another step: the first alone is tested above
        second = drafts[1] if kept == 2 else token
        counts[drafts[0], second] += 1
        n += 1
    # given the first guess kept, the second token follows p2
    cond = counts[0] / n
    assert (cond - p2).abs().max() < 0.025, cond
    assert abs(n / 30_000 - float(p1[0])) < 0.02   # the first guess is kept with probability p1(guess)


def test_a_guess_holding_all_the_mass_is_always_kept():
    probs = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    rng = random.Random(0)
    assert all(accept_sampled(probs, [1], [rng.random(), rng.random()]) == (1, 2) for _ in range(50))
    assert accept_sampled(probs, [1], [0.0, 0.0]) == (1, 2)   # the ends of the interval too
    assert accept_sampled(probs, [1], [1 - 2 ** -53, 1 - 2 ** -53]) == (1, 2)


def test_keyed_draws_depend_on_seed_request_and_position_only():
    assert keyed_uniform(3, 7, 11) == keyed_uniform(3, 7, 11)
    draws = [keyed_uniform(seed, rid, pos) for seed in range(3) for rid in range(20) for pos in range(50)]
    assert len(set(draws)) == len(draws) and all(0 <= u < 1 for u in draws)
    assert abs(sum(draws) / len(draws) - 0.5) < 0.02   # spread over the interval
    p = torch.tensor([0.5, 0.0, 0.3, 0.2])
    tokens = inverse_cdf(p.expand(20_000, -1), [keyed_uniform(1, 0, i) for i in range(20_000)])
    freq = torch.bincount(torch.tensor(tokens), minlength=4).float() / 20_000
    assert freq[1] == 0 and (freq - p).abs().max() < 0.02


def test_a_verification_emits_what_plain_sampling_draws_at_each_position():
    """The same keyed uniforms: plain sampling position by position and a verification of any guesses emit
    the same tokens, up to the first rejected guess and the token that replaces it."""
    logits = torch.randn(5, 12, generator=torch.Generator().manual_seed(4))
    probs = target_probs(logits, 0.9, 0.95)
    uniforms = [keyed_uniform(9, 2, i) for i in range(5)]
    plain = inverse_cdf(probs, uniforms)
    for drafts in (plain[:4], plain[:2] + [(plain[2] + 1) % 12, plain[3]], [(plain[0] + 1) % 12], []):
        kept, token = accept_sampled(probs[:len(drafts) + 1], drafts, uniforms)
        assert drafts[:kept] + [token] == plain[:kept + 1]
