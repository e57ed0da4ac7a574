"""The simulator's pricing of guesses in the window: the controls' box under Simulate (shown while a proposer
is chosen) and the Plan dialog's K search build the settings `--spec-acceptance`, `--spec-draft-cost`,
`--spec-from` and `plan --spec --spec-tokens` would."""
import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture
def controls(qtbot):
    from gui.panels.controls import ControlsPanel
    c = ControlsPanel()
    qtbot.addWidget(c)
    c.show()
    c.select_model("llama-8b")
    c.select_profile("h100-sxm")
    return c


def test_the_pricing_box_shows_under_simulate_with_a_proposer_and_prices_the_guesses(controls):
    box, form = controls.sim_spec_box, controls.form
    form.set_kind("load")
    assert not box.isVisible()   # neither simulated nor speculating
    controls.simulate_check.setChecked(True)
    assert not box.isVisible()   # simulated, no proposer
    form.spec_combo.setCurrentText("ngram")
    assert box.isVisible()
    spec = controls.build_config().spec
    assert (spec.acceptance, spec.draft_cost, spec.spec_from) == (None, None, "")   # the simulator's defaults
    box.acceptance_spin.setValue(0.0)   # a real value: every guess missed
    box.draft_cost_spin.setValue(0.3)
    box.from_edit.setText(" runs/measured ")
    form.fields["spec"]["num_tokens"].edit.setText("6")
    config = controls.build_config()
    assert config.simulate
    assert (config.spec.method, config.spec.num_tokens) == ("ngram", 6)
    assert (config.spec.acceptance, config.spec.draft_cost, config.spec.spec_from) == (0.0, 0.3, "runs/measured")
    controls.simulate_check.setChecked(False)   # the local engine measures its own: the box takes no part
    assert not box.isVisible()
    local = controls.build_config().spec
    assert (local.acceptance, local.draft_cost, local.spec_from) == (None, None, "")


def test_the_box_shows_a_specs_pricing_and_back(controls):
    from backend.config import SpecConfig
    box = controls.sim_spec_box
    box.set_priced(SpecConfig("ngram", acceptance=0.8, draft_cost=0.05, spec_from="x"))
    assert box.priced(SpecConfig("ngram", num_tokens=3)) == SpecConfig("ngram", num_tokens=3, acceptance=0.8,
                                                                      draft_cost=0.05, spec_from="x")
    box.set_priced(SpecConfig("ngram"))
    assert (box.acceptance(), box.draft_cost(), box.spec_from()) == (None, None, "")


def test_the_plan_dialog_searches_k_with_the_pricing_given(qtbot):
    from gui.views.plan import PlanView
    view = PlanView()
    qtbot.addWidget(view)
    view.show()
    view.model_edit.setText("llama-8b")
    assert not view.spec_pricing.isVisible() and not view.spec_tokens_edit.isEnabled()
    problem, space = view.problem_and_space()
    assert space.spec_tokens == (0,)   # no proposer: nothing speculates
    view.spec_edit.setText("ngram")
    view.spec_tokens_edit.setText("0,2,4")
    view.spec_pricing.acceptance_spin.setValue(0.6)
    view.spec_pricing.draft_cost_spin.setValue(0.1)
    assert view.spec_pricing.isVisible()
    problem, space = view.problem_and_space()
    assert space.spec_tokens == (0, 2, 4)
    assert (problem.spec_method, problem.spec_acceptance, problem.spec_draft_cost) == ("ngram", 0.6, 0.1)
    view.spec_tokens_edit.setText("0,x")   # refused in the CLI's words
    from backend.errors import InputError
    with pytest.raises(InputError, match="--spec-tokens"):
        view.problem_and_space()
