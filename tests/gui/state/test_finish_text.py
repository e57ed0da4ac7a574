"""The status line when a run ends names what the run did: a sweep its points and its headline."""
from types import SimpleNamespace

from backend.summary import Crossovers, PrecisionGain, Summary

from gui.state.finish_text import run_finished_text


def finished(summary: Summary, stopped: bool = False):
    return SimpleNamespace(summary=summary, stopped=stopped, repeats=None, data=None)


def test_a_batch_sweep_names_its_points_and_its_crossover_not_a_request_count():
    s = Summary(kind="batch", num_points=6, crossover=Crossovers(measured=12, predicted=33),
                best_tokens_per_s=512.4, best_at=32, largest_fit=32)
    text = run_finished_text(finished(s))
    assert text.startswith("Batch sweep finished: 6 points, crossover near batch 12")
    assert "the profile predicts 33" in text and "best 512 decode tokens/s at batch 32" in text
    assert "requests" not in text and "0.0 output tokens/s" not in text


def test_a_batch_sweep_without_a_crossover_says_decode_stayed_memory_bound():
    s = Summary(kind="batch", num_points=3, crossover=Crossovers(), largest_fit=8)
    assert run_finished_text(finished(s)) == ("Batch sweep finished: 3 points, no crossover: decode stays "
                                              "memory-bound up to batch 8")


def test_a_stopped_sweep_says_so_with_its_note():
    s = Summary(kind="prompt", num_points=2, best_tokens_per_s=900.0, best_at=256, note="stopped by user")
    assert run_finished_text(finished(s, stopped=True)) == ("Prompt-length sweep stopped: 2 points, best 900 prefill "
                                                            "tokens/s at 256 prompt tokens; stopped by user")


def test_precision_and_load_sweeps_give_their_headlines():
    s = Summary(kind="precision", num_points=3, precision={"q8_0": PrecisionGain(3.8, 2.9, 1.0),
                                                           "q4_1": PrecisionGain(5.6, 3.3, 0.9)})
    assert run_finished_text(finished(s)) == ("Precision sweep finished: 3 precisions measured, q4_1 decodes "
                                              "3.30× as fast as the first")
    rate = Summary(kind="rate", num_points=4, best_goodput_at=4.0, best_goodput_requests_per_s=2.125)
    assert run_finished_text(finished(rate)) == "Rate sweep finished: 4 points, best goodput 2.12 req/s at 4 arrivals/s"
    split = Summary(kind="pd-ratio", num_points=3, best_split="1P:2D")
    assert run_finished_text(finished(split)) == "Prefill:decode split sweep finished: 3 points, best split 1P:2D"


def test_a_plain_run_still_counts_its_requests():
    s = Summary(num_requests=4, num_finished=1, output_tokens_per_s=5.7)
    assert run_finished_text(finished(s), notes=["note: x"]) == "Finished: 1 request, 5.7 output tokens/s; note: x"
