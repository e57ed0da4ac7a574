"""The run form's speculative decoding box: the rows of the chosen proposer, and the RunConfig it builds."""
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def test_the_box_shows_the_proposers_rows_and_builds_its_settings(qtbot):
    from gui.panels.controls import ControlsPanel
    controls = ControlsPanel()
    qtbot.addWidget(controls)
    controls.select_model("smollm2-135m")
    form = controls.form
    assert not controls.build_config().spec.is_on   # off by default
    assert not form.fields["spec"]["num_tokens"].isEnabled()
    form.spec_combo.setCurrentText("draft")
    form.draft_edit.setText("smollm2-135m@q4_0")
    form.fields["spec"]["num_tokens"].edit.setText("3")
    spec = controls.build_config().spec
    assert (spec.method, spec.draft_model, spec.draft_dtype, spec.num_tokens) == ("draft", "smollm2-135m", "q4_0", 3)
    assert not form.fields["spec"]["ngram_min"].isEnabled() and form.draft_edit.isEnabled()
    form.spec_combo.setCurrentText("ngram")
    form.fields["spec"]["num_tokens"].edit.setText("0")   # refused as the form's other fields are
    assert any("guesses" in e for e in form.errors())
