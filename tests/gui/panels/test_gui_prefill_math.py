"""The window's Prefill math control (auto / fp32 / bf16): it reaches every run kind's config as
`--prefill-math` does, and the metrics panel says which unit ran each phase once the run is done."""
from tests.fakes.gui_fixtures import run_to_end, use_tiny

import pytest
from PySide6 import QtWidgets

from backend.cli.main import build_parser, run_config
from backend.kernels import matmath
from backend.kernels.matmath import MODES
from gui.panels.run_form import RUN_KINDS

UNIT, WHY_NO_UNIT = matmath.bf16_unit()


def test_the_control_feeds_every_run_kind_as_the_cli_flag_does(window):
    c = window.controls
    combo = window.findChild(QtWidgets.QComboBox, "prefillMathCombo")
    assert combo is c.math_combo
    assert [combo.itemText(i) for i in range(combo.count())] == list(MODES) and combo.currentText() == "auto"
    tip = " ".join(combo.toolTip().split())
    for words in ("bfloat16 products with float32 accumulation", "AVX512-BF16 or AMX", "fidelity bound", "16+ rows"):
        assert words in tip, tip
    c.select_model("tiny")
    c.device_combo.setCurrentText("cpu")
    for kind, _ in RUN_KINDS:
        if kind == "sweep-pd-ratio":
            continue   # simulated (choosing it ticks Simulate): no kernels of this machine run
        c.form.set_kind(kind)
        for mode in MODES:
            combo.setCurrentText(mode)
            config = c.build_config()
            assert config.mode == kind and config.model.prefill_math == mode, (kind, mode)
    # the same settings as the command line's
    c.form.set_kind("batch")
    combo.setCurrentText("bf16")
    cli = run_config(build_parser().parse_args(["run", "--model", "tiny", "--device", "cpu", "--prefill-math", "bf16"]))
    assert c.build_config().model == cli.model


def test_the_control_is_hidden_where_no_model_runs_here_and_locked_while_running(window):
    c = window.controls
    assert c.model_form.isRowVisible(c.math_combo)
    c.simulate_check.setChecked(True)
    assert not c.model_form.isRowVisible(c.math_combo)
    c.simulate_check.setChecked(False)
    c.select_remote("http://127.0.0.1:9/v1", "served")
    assert not c.model_form.isRowVisible(c.math_combo)
    c.select_model("tiny")
    assert c.model_form.isRowVisible(c.math_combo)
    c.set_running(True)
    assert not c.math_combo.isEnabled()
    c.set_running(False)
    assert c.math_combo.isEnabled()


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_the_metrics_panel_names_the_unit_each_phase_ran_on(qtbot, window, mode):
    if mode == "bf16" and UNIT is None:
        pytest.skip(f"no bfloat16 unit here: {WHY_NO_UNIT}")
    use_tiny(window, prompt_len="16", output_len="4", batch="2")   # a prefill of 32 rows, decode steps of 2
    window.controls.math_combo.setCurrentText(mode)
    result = run_to_end(qtbot, window)
    assert not result.error and result.data.info.host.matmul["mode"] == mode
    fp32 = matmath.fp32_unit()
    prefill = UNIT if mode == "bf16" else fp32
    values = window.metrics.values
    assert values["units"].text() == f"{prefill} / {fp32}"
    steps = f"prefill: {prefill} (1 step); decode: {fp32} (3 steps)"
    expected = (f"bfloat16 on {UNIT} for {matmath.MIN_ROWS.get(UNIT)}+ rows, float32 ({fp32}) below; {steps}; bfloat16 products, as asked; "
                "mean KL" if mode == "bf16" else f"float32 ({fp32}); {steps}; float32 products, as asked")
    assert values["units"].toolTip().startswith(expected), values["units"].toolTip()
