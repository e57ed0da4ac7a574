"""The Pareto front on hand-made points, and the cheapest that meet the SLOs."""
import math

from backend.planner.candidates import Candidate
from backend.planner.evaluate import Outcome
from backend.planner.pareto import cheapest, outcome_front, pareto_front


def test_front_of_hand_made_points():
    # (cost, goodput): 1 dominates 2 (cheaper, more); 3 ties 0 in cost with less goodput; 5 is NaN
    points = [(1.0, 2.0), (0.5, 1.0), (2.0, 1.5), (1.0, 1.0), (3.0, 4.0), (math.nan, 9.0), (3.0, 4.0)]
    assert pareto_front(points) == [1, 0, 4]


def test_identical_points_keep_the_preferred_one():
    assert pareto_front([(1.0, 1.0), (1.0, 1.0)], tiebreak=[(2, 64), (1, 32)]) == [1]


def outcome(cost, goodput, meets=True, devices=1, batch=32, error="", gpu="h100-sxm"):
    c = Candidate(gpu, "bfloat16", "continuous", batch, tp=devices)
    return Outcome(c, error=error, meets=meets, goodput=goodput, usd_per_m_tokens=cost)


def test_failed_outcomes_are_never_on_the_front():
    outcomes = [outcome(0.1, 5.0, error="does not fit"), outcome(0.2, 1.0), outcome(0.3, 2.0)]
    assert outcome_front(outcomes) == [1, 2]


def test_cheapest_meets_the_slos_one_per_layout():
    outcomes = [outcome(0.1, 5.0, meets=False), outcome(0.3, 2.0, batch=64), outcome(0.3, 2.0, batch=32),
                outcome(0.4, 3.0, devices=2), outcome(0.2, 1.0, gpu="b200")]
    best = cheapest(outcomes)
    assert [(o.candidate.gpu, o.candidate.max_batch, o.candidate.devices) for o in best] == \
        [("b200", 32, 1), ("h100-sxm", 32, 1), ("h100-sxm", 32, 2)]
