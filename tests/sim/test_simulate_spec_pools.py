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


def test_sweep_pd_ratio_speculates_on_every_splits_decode_devices(tmp_path, capsys):
    """`sweep pd-ratio --spec ngram` passes the guesses to every split's simulated run: each split's ITL is
    lower than without, and so is its TPOT (the point's column where the ITL median reads 0), its point and its own run folder carry the tokens a verification emitted, and the
    table shows them."""
    from backend.sweeps.points import read_points
    sweep = ["sweep", "pd-ratio", "--profile", "h100-sxm", "--model", "llama-8b", "--total-devices", "3",
             "--requests", "8", "--rate", "10", "--prompt-len", "256", "--output-len", "64"]

    def run(name, *flags):
        assert main([*sweep, *flags, "--out", str(tmp_path / name)], open_window=None) == 0
        return {pt.split: pt for pt in read_points(tmp_path / name)[1]}, capsys.readouterr().out
    plain, plain_table = run("plain")
    guessed, table = run("guessed", *SPEC, "--spec-acceptance", "0.8")
    assert set(plain) == set(guessed) == {"1P:2D", "2P:1D"}
    for split, pt in guessed.items():
        # the tokens of one verification arrive together: most gaps are 0, the median among them
        assert pt.itl_p50_ms < 0.5 * plain[split].itl_p50_ms, split
        assert pt.output_tokens_per_s > 1.1 * plain[split].output_tokens_per_s
        assert plain[split].spec_mean_acceptance_length is None
        assert pt.spec_mean_acceptance_length > 2   # 3.4 at most at K = 4, alpha 0.8 (some verifications end short)
        folder = f"split-{pt.prefill_devices}p{pt.decode_devices}d"
        summary, before = read_run(tmp_path / "guessed" / folder).summary, read_run(tmp_path / "plain" / folder).summary
        assert summary.spec_mean_acceptance_length == pytest.approx(pt.spec_mean_acceptance_length)
        assert summary.spec_alpha == pytest.approx(0.8, abs=0.15)
        assert summary.tpot_mean_ms < 0.6 * before.tpot_mean_ms
        assert pt.tpot_p50_ms == pytest.approx(summary.tpot_p50_ms)   # the point's TPOT: the split's own
        assert pt.tpot_p50_ms < 0.6 * plain[split].tpot_p50_ms
    assert "tok/verification" in table and "tok/verification" not in plain_table
