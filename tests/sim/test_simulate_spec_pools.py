"""Speculation priced on the simulator's replicas (--dp) and disaggregated pools, as for one replica
(backend/sim/spec.py): kept guesses cut the time per output token; guesses that are never kept cost more
than not guessing (each verification prices its rows, and a draft pass its share of a decode step)."""
import pytest

from backend.cli.main import main
from backend.results.export import read_run

LOAD = ["load", "--simulate", "--profile", "h100-sxm", "--model", "llama-8b", "--requests", "16", "--rate", "20",
        "--prompt-len", "256", "--output-len", "128", "--max-batch", "8"]
MODES = {"replicas": ["--dp", "2"],
         "disaggregated": ["--policy", "disaggregated", "--prefill-workers", "1", "--decode-workers", "2"]}
SPEC = ["--spec", "ngram", "--spec-tokens", "4"]


def simulate(tmp_path, name, *flags):
    out = tmp_path / name
    assert main([*LOAD, *flags, "--out", str(out)], open_window=None) == 0
    return read_run(out)


@pytest.mark.parametrize("mode", MODES)
def test_speculation_changes_the_time_per_token_the_expected_way(mode, tmp_path):
    pool = MODES[mode]
    plain = simulate(tmp_path, "plain", *pool)
    kept = simulate(tmp_path, "kept", *pool, *SPEC, "--spec-acceptance", "0.8")
    missed = simulate(tmp_path, "missed", *pool, *SPEC, "--spec-acceptance", "0")
    costly = simulate(tmp_path, "costly", *pool, *SPEC, "--spec-acceptance", "0", "--spec-draft-cost", "0.2")
    assert plain.summary.spec_verifications is None
    # every device of the pool that decodes speculates, each with its own draws
    workers = {s.worker for s in kept.steps if s.num_proposed_tokens}
    assert workers == ({"replica-0", "replica-1"} if mode == "replicas" else {"decode-0", "decode-1"})
    assert kept.summary.spec_alpha == pytest.approx(0.8, abs=0.1)
    assert all(r.output_tokens == 128 for r in kept.requests)
    assert kept.summary.tpot_mean_ms < 0.6 * plain.summary.tpot_mean_ms
    # acceptance 0: verifications emit one token each at more than a decode step's price (until the backoff
    # stops them), and a draft that costs something costs more again
    assert missed.summary.spec_verifications > 0 and missed.summary.spec_acceptance_rate == 0
    assert missed.summary.tpot_mean_ms > plain.summary.tpot_mean_ms
    assert costly.summary.spec_draft_time_ms > 0
    assert costly.summary.tpot_mean_ms > missed.summary.tpot_mean_ms


def test_the_same_seed_gives_the_same_pooled_run(tmp_path):
    first = simulate(tmp_path, "first", *MODES["replicas"], *SPEC, "--spec-acceptance", "0.7")
    again = simulate(tmp_path, "again", *MODES["replicas"], *SPEC, "--spec-acceptance", "0.7")
    assert [(s.worker, s.num_proposed_tokens, s.num_accepted_tokens) for s in first.steps] == \
           [(s.worker, s.num_proposed_tokens, s.num_accepted_tokens) for s in again.steps]
