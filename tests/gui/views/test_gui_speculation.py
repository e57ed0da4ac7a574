"""Speculative decoding in a real window: a run of the bundled model with n-gram guesses draws its verification
steps in their own colour on the strip (their guesses in the hover), fills the Speculation view's histogram,
per-position acceptance and step-time points from the records, with the roofline's line beside them; the run
folder opened again shows the same."""
from __future__ import annotations

import numpy as np
from tests.fakes.gui_fixtures import RUN_TIMEOUT_MS

from backend.config import BatchRun, ModelChoice, RunConfig, RunKind, SamplingConfig, SpecConfig
from gui.tour.steps import SPEC_PROMPT


def _spec_config() -> RunConfig:
    return RunConfig(mode=RunKind.BATCH, model=ModelChoice("smollm2-135m"), sampling=SamplingConfig(),
                     batch=BatchRun(prompt=SPEC_PROMPT, chat=True, output_len=16, batch=1),
                     spec=SpecConfig(method="ngram", num_tokens=4), threads=1)


def _view_points(w):
    view = w.speculation
    verify_x, verify_y = view.verify_points.getData()   # x: log2 of the tokens; y: log10 of the ms (a log axis)
    decode_x, _ = view.decode_points.getData()
    return view, verify_x, 10 ** verify_y, decode_x


def test_a_speculating_run_fills_the_strip_and_the_speculation_view(qtbot, window):
    with qtbot.waitSignal(window.runFinished, timeout=RUN_TIMEOUT_MS) as done:
        assert window.runs.launch(_spec_config())
    finished = done.args[0]
    assert finished.error is None
    steps = window.store.to_run_data().steps   # the window's run streams its steps to its folder and the store
    verifications = [s for s in steps if s.is_verification]
    assert verifications, "the prompt asks for a copy of itself: n-gram guesses hold"
    # the strip: verification steps in their own bars, the decode bars only the plain ones
    window.view_tabs.show_view(window.live_page)
    window.repaint_views()
    strip = window.timeline
    assert len(strip.verify_bars.start) == len(verifications)
    assert np.allclose(strip.verify_bars.start, [s.start_ms for s in verifications])
    plain = [s for s in steps if s.phase.value == "decode" and not s.is_verification]
    assert len(strip.bars[verifications[0].phase].start) == len(plain)
    first = verifications[0]
    tip = strip.hover_text(first.start_ms + first.duration_ms / 2)
    assert f"verification: {first.num_proposed_tokens} guesses checked, {first.num_accepted_tokens} kept" in tip
    assert "verification" in strip.getPlotItem().titleLabel.text
    # the Speculation view: one histogram count per verification of the request's record
    window.view_tabs.show_view(window.speculation)
    window.repaint_views()
    view, verify_x, verify_y, decode_x = _view_points(window)
    record = finished.data.requests[0]
    pairs = record.acceptance_lengths
    assert view.accept.source == "requests" and view.histogram_bars.opts["height"].sum() == len(pairs)
    kept = [a for _, a in pairs]
    assert view.histogram_bars.opts["height"].tolist() == np.bincount(kept, minlength=5).tolist()
    summary = finished.summary.spec_acceptance_by_position
    assert ",".join(f"{r:.3f}" for r in view.position_bars.opts["height"]) == summary
    # step time against tokens: a point per verification step at 2^x = its tokens, and the plain decode steps
    assert np.allclose(sorted(2 ** verify_x), sorted(s.num_tokens for s in verifications))
    assert np.allclose(sorted(verify_y), sorted(s.duration_ms for s in verifications))
    assert len(decode_x) == len(plain)
    predicted_x, predicted_y = view.predicted.getData()
    # from a one-token step to 1,024 tokens, past any profile's crossover: the last costs more
    assert predicted_x[0] == 0 and 2 ** predicted_x[-1] == 1024 and predicted_y[-1] > predicted_y[0] + 0.3
    assert "a plain decode step" in view.note.text() and "predicted on" in view.note.text()
    # the same run opened from its folder shows the same points
    assert window.files.open_run(str(window.store.source))
    window.view_tabs.show_view(window.speculation)
    window.repaint_views()
    _, again_x, again_y, _ = _view_points(window)
    assert np.allclose(sorted(again_y), sorted(verify_y)) and np.allclose(sorted(again_x), sorted(verify_x))
    assert window.speculation.histogram_bars.opts["height"].sum() == len(pairs)


def test_a_simulated_speculating_run_opens_in_the_speculation_view(window, tmp_path):
    """The simulator's verifications (kept guesses drawn at --spec-acceptance) are the engine's records, so
    the Speculation view reads them as a local run's."""
    from backend.cli.main import main
    from backend.results.export import read_run
    out = tmp_path / "sim"
    assert main(["run", "--simulate", "--profile", "h100-sxm", "--model", "llama-8b", "--batch", "2",
                 "--prompt-len", "128", "--output-len", "64", "--spec", "ngram", "--spec-tokens", "4",
                 "--spec-acceptance", "0.6", "--out", str(out)], open_window=None) == 0
    data = read_run(out)
    pairs = [p for r in data.requests for p in r.acceptance_lengths]
    assert pairs
    assert window.files.open_run(str(out))
    window.view_tabs.show_view(window.speculation)
    window.repaint_views()
    view = window.speculation
    assert view.histogram_bars.opts["height"].sum() == len(pairs)
    assert ",".join(f"{r:.3f}" for r in view.position_bars.opts["height"]) == \
        data.summary.spec_acceptance_by_position
    verify_x, _ = view.verify_points.getData()
    assert len(verify_x) == sum(1 for s in data.steps if s.is_verification)
