"""The tour's batch step: the arrow sits where a fit of the whole curve bends, the roof is named for
what it is, and the sentence says how far measurement and roof lie apart."""
from backend.events import SweepPoint
from backend.records import RunData
from backend.run_info import LocalInfo, RunInfo, SweepInfo
from backend.summary import Crossovers, Summary
from gui.tour.batch import batch_sweep
from gui.tour.finding import Outcome

BATCHES = [1, 2, 4, 8, 16]


def _outcome(tokens_per_s, roof_tokens_per_s, local_profile="this-machine", predicted_at=3, threads=None):
    points = [SweepPoint("batch", x, x * 1000 / t, t, 0, 0, None, None, None, x * 1000 / r, "memory")
              for x, t, r in zip(BATCHES, tokens_per_s, roof_tokens_per_s)]
    data = RunData(info=RunInfo(sweep=SweepInfo(local_profile=local_profile), local=LocalInfo(threads=threads)),
                   summary=Summary(crossover=Crossovers(predicted_local=predicted_at)))
    return [Outcome("batch sweep", data, points)]


def test_a_slow_batch_2_does_not_put_the_arrow_there_the_fit_does():
    """docs/tour-4-batch.png's curve: batch 2 slow, then climbing to 6x at batch 16."""
    finding = batch_sweep(_outcome([25, 30, 75, 112, 147], [190, 380, 430, 480, 480]))
    slows = [m for m in finding.figure.marks if m.text.startswith("growth slows")]
    assert len(slows) == 1 and 8 <= slows[0].x0 <= 12
    assert "bends at batch 10" in finding.sentence
    assert "measured 3.3x below the calibrated roof at batch 16" in finding.sentence
    assert "attention" in finding.sentence   # why: what the roof leaves out
    assert [c.name for c in finding.figure.curves][1] == "roofline (this machine, calibrated)"


def test_a_curve_still_climbing_has_no_arrow_and_says_so():
    finding = batch_sweep(_outcome([b * 1000 / (40 + 0.5 * b) for b in BATCHES], [400] * 5))
    assert not [m for m in finding.figure.marks if m.text.startswith("growth slows")]
    assert "has not bent by batch 16: tokens/s was still climbing" in finding.sentence


def test_an_uncalibrated_roof_is_named_generic_and_a_measured_step_above_it_is_explained():
    finding = batch_sweep(_outcome([258, 427, 539, 616, 640], [200, 400, 500, 560, 600], local_profile="cpu"))
    assert "generic CPU profile" in finding.sentence and "Run › Calibrate" in finding.sentence
    assert "above the generic roof at batch 16" in finding.sentence and "calibrate's matmul probe" in finding.sentence


def test_a_curve_flat_from_the_first_batch_is_marked_at_it():
    finding = batch_sweep(_outcome([100, 99, 101, 100, 100], [400] * 5))
    slows, = [m for m in finding.figure.marks if m.text.startswith("growth slows")]
    assert slows.x0 == 1 and "bends at batch 1" in finding.sentence


def test_each_batch_figure_draws_its_arrow_on_the_log_axes(qtbot):
    import pyqtgraph as pg
    from gui.tour import figure
    plot = pg.PlotWidget()
    qtbot.addWidget(plot)
    for tokens in ([100, 99, 101, 100, 100], [25, 30, 75, 112, 147]):
        figure.draw(plot, batch_sweep(_outcome(tokens, [400] * 5)).figure)
        arrows = [i for i in plot.getPlotItem().items if isinstance(i, pg.ArrowItem)]
        assert len(arrows) == 2   # the largest batch's gain and where growth slows


def test_a_run_on_fewer_cores_than_the_roof_was_measured_on_says_so():
    outcome = _outcome([25, 30, 75, 112, 147], [190, 380, 430, 480, 480], threads=1)
    assert "ran on 1 of the 2 cores the roof was measured on" in batch_sweep(outcome, cores=2).sentence
    assert "cores the roof" not in batch_sweep(_outcome([25, 30, 75, 112, 147], [190] * 5, threads=2), cores=2).sentence


def test_a_fall_at_the_largest_batch_is_said_and_left_out_of_the_fit():
    """Measured here on a quiet machine: the points climb to batch 8, then batch 16's steps run on another unit."""
    finding = batch_sweep(_outcome([254.1, 394.1, 536.1, 611.1, 396.9], [700, 730, 730, 730, 3000]))
    slows, = [m for m in finding.figure.marks if m.text.startswith("growth slows")]
    assert slows.text.startswith("growth slows: batch 2") and "fit of the points up to batch 8" in finding.sentence
    assert "At batch 16 tokens/s fell to 397, below the 611 of batch 8" in finding.sentence
    fitted = next(c for c in finding.figure.curves if c.name.startswith("fit"))
    assert max(fitted.x) == 8
