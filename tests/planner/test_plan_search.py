"""One tiny search end to end: four candidates simulated, the front and the cheapest among them."""
import pytest

from backend.errors import InputError
from backend.planner import report
from backend.planner.candidates import SearchSpace
from backend.planner.evaluate import Problem
from backend.planner.search import search
from backend.workload.spec import LengthDist

TINY = SearchSpace(gpus=("h100-sxm",), max_gpus=2, precisions=("bfloat16",), policies=("continuous",),
                   tps=(1, 2), pps=(1,), dps=(1,), max_batches=(8, 64), kv_dtypes=("auto",))   # 4 candidates


def problem(**kw):
    base = dict(model="llama-8b", slo_ttft_ms=300, slo_tpot_ms=30, rate=8, num_requests=40,
                prompt_len=LengthDist("fixed", 256), output_len=LengthDist("fixed", 32))
    return Problem(**{**base, **kw})


@pytest.mark.parametrize("workers", [1, 2])
def test_tiny_search_end_to_end(tmp_path, workers):
    seen = []
    result = search(problem(), TINY, workers=workers, budget=10, on_outcome=lambda o, d, t: seen.append((d, t)))
    assert result.num_enumerated == 4 and len(result.outcomes) == 4 and seen[-1] == (4, 4)
    assert not [o.error for o in result.outcomes if o.error]
    assert all(o.goodput > 0 and o.usd_per_m_tokens > 0 for o in result.outcomes)
    assert result.front and all(not o.error for o in (result.outcomes[i] for i in result.front))
    if result.best:
        assert result.best[0].meets and result.best[0].usd_per_m_tokens == min(
            o.usd_per_m_tokens for o in result.outcomes if o.meets)
    plan, front = report.write_csvs(result, tmp_path)
    assert len(plan.read_text().splitlines()) == 5 and len(front.read_text().splitlines()) == len(result.front) + 1
    assert "Pareto front" in report.text(result)


def test_the_budget_limits_what_is_simulated():
    result = search(problem(), TINY, workers=1, budget=2)
    assert len(result.outcomes) == 2 and result.num_screened_out == 2


@pytest.mark.parametrize("kw, message", [(dict(slo_ttft_ms=0), "--slo-ttft-ms must be a positive number"),
                                         (dict(slo_tpot_ms=-1), "--slo-tpot-ms must be a positive number"),
                                         (dict(rate=0), "--rate must be a positive number")])
def test_bad_objectives_are_one_line(kw, message):
    with pytest.raises(InputError, match=message):
        search(problem(**kw), TINY, workers=1)


def test_no_candidate_fits_is_one_line():
    space = SearchSpace(gpus=("a100-80gb-sxm",), max_gpus=1, precisions=("bfloat16",))
    with pytest.raises(InputError, match="no candidate fits profiles/models/llama-3.1-70b.json"):
        search(problem(model="profiles/models/llama-3.1-70b.json"), space, workers=1)


def test_speculation_is_searched_as_k():
    """--spec-tokens 0,4: each colocated layout (replicas too) once without speculation and once with K = 4;
    the K = 4 ones verify guesses (their TPOT lower at this memory-bound load) and plan.csv says their K."""
    space = SearchSpace(gpus=("h100-sxm",), max_gpus=2, precisions=("bfloat16",), policies=("continuous",),
                        tps=(1,), pps=(1,), dps=(1, 2), max_batches=(64,), kv_dtypes=("auto",), spec_tokens=(0, 4))
    result = search(problem(spec_acceptance=0.8), space, workers=1, budget=10)
    ks = sorted((o.candidate.dp, o.candidate.spec_tokens) for o in result.outcomes)
    assert ks == [(1, 0), (1, 4), (2, 0), (2, 4)]
    assert not [o.error for o in result.outcomes if o.error]
    for dp in (1, 2):
        by_k = {o.candidate.spec_tokens: o for o in result.outcomes if o.candidate.dp == dp}
        assert by_k[4].tpot_p90_ms < 0.7 * by_k[0].tpot_p90_ms
        assert by_k[4].screen["tpot_ms"] < by_k[0].screen["tpot_ms"]
    assert " K4 " in report.text(result) or " K4" in by_k[4].candidate.layout
    assert {r["spec_tokens"] for r in map(lambda o: report.row(o, False), result.outcomes)} == {0, 4}


def test_speculation_is_searched_as_k_on_disaggregated_layouts():
    """A prefill device beside a decode device, without guesses and with K = 4: the simulated decode device
    verifies them, so the K = 4 layout's TPOT is lower, and the screen expects it too."""
    space = SearchSpace(gpus=("h100-sxm",), max_gpus=2, precisions=("bfloat16",), policies=("disaggregated",),
                        tps=(1,), disaggregated_batches=(64,), kv_dtypes=("auto",), spec_tokens=(0, 4))
    result = search(problem(spec_acceptance=0.8), space, workers=1, budget=10)
    assert sorted(o.candidate.spec_tokens for o in result.outcomes) == [0, 4]
    assert not [o.error for o in result.outcomes if o.error]
    by_k = {o.candidate.spec_tokens: o for o in result.outcomes}
    assert by_k[4].tpot_p90_ms < 0.7 * by_k[0].tpot_p90_ms
    assert by_k[4].screen["tpot_ms"] < by_k[0].screen["tpot_ms"]
    assert by_k[4].candidate.layout == "P1xtp1:D1xtp1 K4"


def test_plan_spec_flags_are_checked(capsys):
    from backend.cli.main import main
    base = ["plan", "--model", "llama-8b", "--slo-ttft-ms", "300", "--slo-tpot-ms", "30", "--rate", "1"]
    assert main([*base, "--spec", "ngram", "--spec-tokens", "0,x"], open_window=None) != 0
    assert "--spec-tokens: expected whole numbers" in capsys.readouterr().err
    assert main([*base, "--spec", "bogus"], open_window=None) != 0
    assert "use ngram or draft:MODEL" in capsys.readouterr().err
