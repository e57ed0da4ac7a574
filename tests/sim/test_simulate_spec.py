"""Speculative decoding on the simulator: guesses kept by a seeded per-guess rate, verifications priced
by the cost model, and the engine's records and spec figures, as a local run has them."""
import random

import pytest

from backend.cli.main import main
from backend.records import Phase
from backend.results.export import read_run
from backend.results.spec_figures import expected_length
from backend.sim.spec import draw_kept

RUN = ["run", "--simulate", "--profile", "h100-sxm", "--model", "llama-8b", "--batch", "1",
       "--prompt-len", "256", "--output-len", "200"]


def simulate(tmp_path, name, *flags):
    out = tmp_path / name
    assert main([*RUN, *flags, "--out", str(out)], open_window=None) == 0
    return read_run(out)


def test_kept_guesses_follow_the_truncated_geometric_law():
    rng = random.Random(1)
    draws = [draw_kept(rng, 0.6, 4) for _ in range(20000)]
    assert max(draws) == 4 and min(draws) == 0
    mean_length = sum(draws) / len(draws) + 1
    assert mean_length == pytest.approx(expected_length(0.6, 4), rel=0.02)
    assert draws.count(4) / len(draws) == pytest.approx(0.6 ** 4, abs=0.02)   # the truncated tail: alpha^k


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("simspec")
    return (simulate(tmp, "plain"), simulate(tmp, "ngram", "--spec", "ngram", "--spec-tokens", "4",
                                             "--spec-acceptance", "0.8"), tmp)


def test_a_simulated_run_records_verifications_like_the_engine(runs):
    plain, spec, _ = runs
    assert plain.summary.spec_verifications is None
    verifying = [s for s in spec.steps if s.num_proposed_tokens]
    assert verifying and all(s.num_proposed_tokens <= 4 and s.num_accepted_tokens <= s.num_proposed_tokens
                             for s in verifying)
    s = spec.summary
    assert s.spec_verifications == sum(len(r.acceptance_lengths) for r in spec.requests)
    assert s.spec_alpha == pytest.approx(0.8, abs=0.1)
    assert s.spec_draft_time_ms == 0   # n-gram lookups cost nothing on the simulated device
    assert spec.requests[0].output_tokens == plain.requests[0].output_tokens == 200
    # fewer steps, each a verification of 5 rows priced near one memory-bound decode step at batch 1
    assert len(spec.steps) < 0.6 * len(plain.steps)
    plain_ms = [x.duration_ms for x in plain.steps if x.phase is Phase.DECODE]
    assert max(x.duration_ms for x in verifying) < 1.25 * min(plain_ms)
    assert spec.summary.duration_s < 0.6 * plain.summary.duration_s


def test_the_same_seed_gives_the_same_run(runs, tmp_path):
    _, spec, _ = runs
    again = simulate(tmp_path, "again", "--spec", "ngram", "--spec-tokens", "4", "--spec-acceptance", "0.8")
    assert [(x.num_proposed_tokens, x.num_accepted_tokens) for x in again.steps] == \
           [(x.num_proposed_tokens, x.num_accepted_tokens) for x in spec.steps]


def test_spec_from_takes_a_measured_runs_alpha_and_a_draft_cost_slows_the_run(runs, tmp_path):
    _, spec, tmp = runs
    taken = simulate(tmp_path, "taken", "--spec", "ngram", "--spec-from", str(tmp / "ngram"))
    assert taken.summary.spec_alpha == pytest.approx(spec.summary.spec_alpha, abs=0.1)
    costly = simulate(tmp_path, "costly", "--spec", "ngram", "--spec-acceptance", "0.8", "--spec-draft-cost", "0.5")
    assert costly.summary.spec_draft_time_ms > 0
    assert costly.summary.duration_s > spec.summary.duration_s


@pytest.mark.parametrize("flags, message", [
    (["--spec", "ngram", "--spec-acceptance", "1.5"], "--spec-acceptance must be in"),
    (["--spec", "ngram", "--spec-from", "/nonexistent/run"], "is not a folder"),
    (["--spec", "draft:tiny"], "vocabulary"),
])
def test_bad_simulated_speculation_is_one_line(flags, message, capsys):
    assert main([*RUN, *flags], open_window=None) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_the_local_engine_refuses_the_simulators_pricing(capsys):
    assert main(["run", "--model", "tiny", "--spec", "ngram", "--spec-acceptance", "0.5"], open_window=None) != 0
    assert "--simulate" in capsys.readouterr().err
