"""The workload page's conversation rows (--turns, --turn-len, --shared-prefix-len, --think-ms between turns):
set in the window, they are the RunConfig's, as `load`'s flags would make it; the KV-reusing presets fill them."""
import pytest

from backend.workload.spec import load_workload


@pytest.fixture
def controls(qtbot):
    from gui.panels.controls import ControlsPanel
    c = ControlsPanel()
    qtbot.addWidget(c)
    c.show()
    c.select_model("smollm2-135m")
    c.form.set_kind("load")
    return c


@pytest.fixture
def form(controls):
    return controls.form


@pytest.mark.parametrize("preset", ["multi-turn-chat", "agentic-loop"])
def test_a_kv_reusing_preset_fills_the_rows_and_runs_as_its_file_says(controls, form, preset):
    form.preset_combo.setCurrentText(preset)
    f, spec = form.fields["load"], load_workload(preset)
    assert (f["turns"].text(), f["turn_len"].text(), f["shared_prefix_len"].text()) == (
        str(spec.turns), spec.turn_len.describe(), str(spec.shared_prefix_len))
    assert form.think_spin.value() == spec.think_ms and f["turn_len"].isEnabled()
    built = controls.build_config().workload
    assert (built.turns, built.turn_len, built.shared_prefix_len, built.think_ms) == (
        spec.turns, spec.turn_len, spec.shared_prefix_len, spec.think_ms)


def test_conversations_set_in_the_window_reach_the_run_config(controls, form):
    form.preset_combo.setCurrentText("poisson-chat")   # open arrivals: no closed loop
    f = form.fields["load"]
    form.arrival_combo.setCurrentText("poisson")
    assert not f["turn_len"].isEnabled() and not form.think_spin.isEnabled()   # one turn: nothing between turns
    f["turns"].setText("4")
    assert f["turn_len"].isEnabled() and form.think_spin.isEnabled()   # a pause between turns, whatever the arrivals
    f["turn_len"].setText("8:16")
    f["shared_prefix_len"].setText("32")
    form.think_spin.setValue(120)
    f["requests"].setText("5")
    spec = controls.build_config().workload
    assert (spec.turns, spec.turn_len.describe(), spec.shared_prefix_len, spec.think_ms) == (4, "8:16", 32, 120.0)
    assert spec.num_requests == 5 and spec.num_requests * spec.turns == 20   # Requests counts conversations
    assert not controls.errors()


def test_back_to_one_turn_drops_the_presets_later_messages_and_bad_input_names_its_field(form):
    form.preset_combo.setCurrentText("multi-turn-chat")
    f = form.fields["load"]
    form.arrival_combo.setCurrentText("poisson")
    f["rate"].setText("2")
    f["turns"].setText("1")   # a single prompt each: the preset's turn length and think time do not apply
    spec = form.workload()
    assert (spec.turns, spec.turn_len, spec.think_ms, spec.shared_prefix_len) == (1, None, 0.0, 64)
    assert not form.workload_error.text()
    f["turns"].setText("0")
    assert "turns must be at least 1" in f["turns"].error
    f["turns"].setText("3")
    f["turn_len"].setText("8:")
    assert f["turn_len"].error


def test_a_trace_over_a_conversation_preset_replays_its_rows_without_the_presets_turns(form, tmp_path):
    form.preset_combo.setCurrentText("multi-turn-chat")
    trace = tmp_path / "trace.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0.0,100,10\n0.5,200,20\n")
    form.open_trace(str(trace))
    f = form.fields["load"]
    assert not f["turns"].isEnabled() and not f["shared_prefix_len"].isEnabled()
    spec = form.workload()
    assert (spec.trace, spec.turns, spec.shared_prefix_len, spec.think_ms) == (str(trace), 1, 0, 0.0)
    assert not form.workload_error.text()
