"""The Simulate box's deployment, precisions, model configs and trace: the RunConfig the window
builds carries them as the CLI's flags would, and a simulated run of a TP=2 layout finishes."""
import pytest

from tests.fakes.gui_fixtures import run_to_end


@pytest.fixture
def controls(qtbot):
    from gui.panels.controls import ControlsPanel
    c = ControlsPanel()
    qtbot.addWidget(c)
    c.show()
    c.select_model("llama-8b")
    c.select_profile("h100-sxm")
    c.simulate_check.setChecked(True)
    return c


def cli_config(*flags: str):
    """The RunConfig `load --simulate ...` builds from these flags; None where the CLI lacks one of them."""
    from backend.cli.load import load_config
    from backend.cli.main import build_parser
    try:
        args = build_parser().parse_args(["load", "--simulate", "--profile", "h100-sxm", *flags])
    except SystemExit:
        return None
    return load_config(args)


def test_the_deployment_box_shows_only_under_simulate_and_builds_the_flags_deployment(qtbot, controls):
    c, box = controls, controls.deployment_box
    assert box.isVisible()
    assert "fp8" in [c.dtype_combo.itemText(i) for i in range(c.dtype_combo.count())]
    c.form.set_kind("load")
    c.form.fields["load"]["requests"].setText("8")
    box.tp_spin.setValue(2)
    box.dp_spin.setValue(2)
    box.router_combo.setCurrentText("least-loaded")
    box.link_combo.setCurrentIndex(box.link_combo.findData("nvlink4"))
    box.kv_combo.setCurrentText("fp8")
    c.dtype_combo.setCurrentText("fp8")
    config = c.build_config()
    d = config.deployment
    assert (d.tp, d.pp, d.dp, d.ep, d.router, d.link, d.kv_dtype) == (2, 1, 2, 1, "least-loaded", "nvlink4", "fp8")
    assert d.prefill_tp is None and d.decode_tp is None   # not disaggregated: the pools' rows take no part
    assert config.simulate and config.model.name == "llama-8b" and config.model.dtype == "fp8"
    cli = cli_config("--model", "llama-8b", "--dtype", "fp8", "--tp", "2", "--dp", "2", "--router", "least-loaded",
                     "--link", "nvlink4", "--kv-dtype", "fp8", "--requests", "8", "--workload", "burst-64")
    if cli is not None:   # the CLI's deployment flags: one mapping, the same Deployment
        assert config.deployment == cli.deployment
        assert (config.model.name, config.model.dtype) == (cli.model.name, cli.model.dtype)
    # the disaggregated policy's pools each with their own TP; "= TP" (0) is the flag not given
    c.form.policy_combo.setCurrentText("disaggregated")
    assert box.prefill_tp_spin.isVisible() and box.decode_tp_spin.isVisible()
    box.decode_tp_spin.setValue(4)
    d = c.build_config().deployment
    assert (d.prefill_tp, d.decode_tp) == (None, 4)
    # a dense model: EP takes no part; off Simulate the box goes and the device's precisions come back
    assert not box.ep_spin.isEnabled()
    c.simulate_check.setChecked(False)
    assert not box.isVisible()
    assert "fp8" not in [c.dtype_combo.itemText(i) for i in range(c.dtype_combo.count())]
    assert c.build_config().deployment == type(d)()


def test_a_shipped_config_and_a_config_json_are_offered_only_under_simulate(qtbot, controls, tmp_path):
    import json
    from gui.panels.controls import CONFIG_FILE
    from gui.panels.sim_choices import shipped_configs
    c = controls
    entries = [c.model_combo.itemData(i) for i in range(c.model_combo.count())]
    assert CONFIG_FILE in entries
    configs = shipped_configs()
    if configs:
        key = "llama-3.1-70b" if "llama-3.1-70b" in configs else next(iter(configs))
        assert key in entries
        c.select_model(key)
        c.deployment_box.tp_spin.setValue(2)
        config = c.build_config()
        assert config.model.name == key and config.deployment.tp == 2
    moe = next((k for k in ("mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3") if k in configs), None)
    if moe is not None:   # a mixture of experts: EP takes part
        c.select_model(moe)
        assert c.deployment_box.ep_spin.isEnabled()
        c.deployment_box.ep_spin.setValue(2)
        assert c.build_config().deployment.ep == 2
    # a config.json of the user's: listed and chosen; one that is not a model is refused in one line
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000,
                                "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                                "num_key_value_heads": 32, "intermediate_size": 11008,
                                "max_position_embeddings": 4096}))
    c.open_model_config(str(path))
    assert c.model_name() == str(path) and not c.errors(), c.errors()
    assert c.build_config().model.name == str(path)
    bad = tmp_path / "bad" / "config.json"
    bad.parent.mkdir()
    bad.write_text("[1, 2]")
    from backend.errors import InputError
    with pytest.raises(InputError) as refused:
        c.open_model_config(str(bad))
    assert "\n" not in str(refused.value) and "bad" in str(refused.value)
    # off Simulate the configs are hidden and the chooser falls back to a model this machine runs
    c.simulate_check.setChecked(False)
    assert c.model_name() != str(path)
    index = c.model_combo.findData(CONFIG_FILE)
    assert c.model_combo.view().isRowHidden(index)


def test_the_trace_and_think_time_reach_the_workload(qtbot, controls, tmp_path):
    form = controls.form
    form.set_kind("load")
    form.preset_combo.setCurrentText("closed-loop-8")   # no trace of its own
    assert not form.fields["load"]["trace"].text()
    form.arrival_combo.setCurrentText("closed")
    form.think_spin.setValue(250)
    assert form.workload().think_ms == 250.0
    trace = tmp_path / "trace.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0.0,100,10\n0.5,200,20\n")
    form.open_trace(str(trace))
    form.trace_speed_spin.setValue(2.0)
    spec = controls.build_config().workload
    assert (spec.trace, spec.trace_speed, spec.arrival) == (str(trace), 2.0, "trace")
    assert spec.num_requests == 2 and not form.arrival_combo.isEnabled()   # all its rows, its own times
    form.open_trace(str(tmp_path / "nowhere.csv"))
    assert any("trace" in e for e in controls.errors())
    form.open_trace("")   # cleared: the arrival chosen before comes back
    assert form.arrival_combo.currentText() == "closed" and form.workload().trace is None


def test_a_simulated_load_run_at_tp_2_finishes_in_the_window(qtbot, window):
    c = window.controls
    c.select_model("llama-8b")
    c.select_profile("h100-sxm")
    c.simulate_check.setChecked(True)
    c.form.set_kind("load")
    c.form.fields["load"]["requests"].setText("8")
    c.deployment_box.tp_spin.setValue(2)
    assert c.build_config().deployment.tp == 2
    finished = run_to_end(qtbot, window)
    assert finished.data.info.target == "simulated"
    assert len(finished.data.requests) == 8
    assert window.store.config["deployment"]["tp"] == 2   # the settings run.json records
    layout = finished.data.info.replicas
    if layout is not None:   # the layout the simulator priced (the lead's --tp support)
        assert (layout.tp, layout.devices) == (2, 2) and layout.link["name"] == "nvlink4"


def test_a_tp_that_does_not_divide_the_heads_is_one_line_in_the_window(qtbot, window):
    c = window.controls
    c.select_model("llama-8b")   # 32 heads, 8 KV heads
    c.select_profile("h100-sxm")
    c.simulate_check.setChecked(True)
    c.form.set_kind("load")
    c.form.fields["load"]["requests"].setText("4")
    c.deployment_box.tp_spin.setValue(3)
    problems = c.errors()
    if problems:   # refused before the run: the panel's line under Run
        assert "\n" not in problems[0] and "3" in problems[0]
        assert not c.run_button.isEnabled()
        return
    with qtbot.waitSignal(window.runFailed, timeout=60_000) as failed:
        window.start_run()
    message = failed.args[0]
    assert "\n" not in message and "3" in message and "Traceback" not in message
    assert window.last_error == message
