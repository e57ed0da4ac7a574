"""--prefill-math: parsed on every command that runs a local model, refused in one line where it
cannot run, recorded in run.json with the unit each phase's steps ran on, and said on the device line."""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backend.cli.main import build_parser, main, run_config
from backend.config import config_dict
from backend.run_info import RunInfo
from backend.kernels import matmath
from backend.results.matmul import math_lines, products_text, steps_text

ROOT = Path(__file__).resolve().parents[2]
UNIT, WHY_NO_UNIT = matmath.bf16_unit()
needs_unit = pytest.mark.skipif(UNIT is None, reason=f"no bfloat16 unit here: {WHY_NO_UNIT}")

# every sub-command that runs a local model, with the arguments it needs besides the flag
LOCAL_COMMANDS = [["run"], ["load"], ["sweep", "batch"], ["sweep", "prompt"], ["sweep", "precision"],
                  ["sweep", "rate"], ["sweep", "concurrency"], ["sweep", "pd-ratio"],
                  ["load", "--policy", "disaggregated"], ["run", "--repeats", "3"]]


def config_of(argv):
    from backend.cli.load import load_config
    from backend.cli.tools import sweep_config
    args = build_parser().parse_args(argv)
    return {"run": run_config, "load": load_config, "sweep": sweep_config}[args.command](args)


@pytest.mark.parametrize("command", LOCAL_COMMANDS, ids=" ".join)
def test_every_local_command_takes_each_value_into_the_config(command):
    assert config_of(command).model.prefill_math == "auto"
    for mode in ("auto", "fp32", "bf16"):
        config = config_of([*command, "--prefill-math", mode])
        assert config.model.prefill_math == mode
        assert config_dict(config)["model"]["prefill_math"] == mode   # run.json reproduces it


def test_the_help_says_what_it_does():
    text = build_parser()._subparsers._group_actions[0].choices["run"].format_help()
    flat = " ".join(text.split())
    for words in ("bfloat16 products with float32 accumulation", "AVX512-BF16 or AMX", "16+ rows",
                  "fidelity bound"):
        assert words in flat, text


def cli(*args, env=None):
    return subprocess.run([sys.executable, "main.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_a_bad_value_is_one_line():
    proc = cli("run", "--prefill-math", "fp16")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == ["main.py run: error: argument --prefill-math: invalid choice: 'fp16' "
                                        "(choose from 'auto', 'fp32', 'bf16') (see main.py run --help)"]


@pytest.fixture
def no_units(monkeypatch):
    """PHASESCOPE_MATH_UNITS= hides every unit (read once per process: the cache is cleared around it)."""
    monkeypatch.setenv("PHASESCOPE_MATH_UNITS", "")
    matmath._units.cache_clear()
    yield
    monkeypatch.delenv("PHASESCOPE_MATH_UNITS")
    matmath._units.cache_clear()


def test_bf16_on_a_cpu_without_a_unit_is_one_clear_line_and_auto_runs_float32_exactly_as_before(
        tmp_path, no_units, capsys, monkeypatch):
    """The CPU of a user without AVX512-BF16 or AMX, in this process (the env var hides the units)."""
    code = main(["run", "--prompt-len", "24", "--output-len", "3", "--prefill-math", "bf16"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == [line for line in err.splitlines() if not line.startswith("...")]
    assert len(errors) == 1 and "--prefill-math bf16: no bfloat16 unit runs here" in errors[0]
    # each unit's reason is this CPU's: hidden where it has the unit, absent where it has not (an AVX2-only CPU)
    from backend import kernels
    for unit in ("AMX", "AVX512-BF16"):
        why = "hidden by PHASESCOPE_MATH_UNITS" if kernels.cpu_units().get(unit) else f"this CPU has no {unit}"
        assert f"{unit}: {why}" in errors[0] or kernels.load() is None, errors[0]
    assert "use fp32 or auto" in errors[0]
    runs = {}
    for name, mode, hidden in (("auto", "auto", True), ("fp32", "fp32", False)):
        if not hidden:
            monkeypatch.delenv("PHASESCOPE_MATH_UNITS")
            matmath._units.cache_clear()
        out = tmp_path / name
        code = main(["run", "--prompt-len", "40", "--output-len", "8", "--batch", "2", "--ignore-eos",
                     "--prefill-math", mode, "--out", str(out)])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        with open(out / "tokens.csv") as f:
            tokens = [(row["request_id"], row["index"], row["token_id"]) for row in csv.DictReader(f)]
        runs[name] = (tokens, json.loads((out / "run.json").read_text())["info"], captured.out)
    monkeypatch.setenv("PHASESCOPE_MATH_UNITS", "")     # the fixture's teardown removes it again
    assert runs["auto"][0] == runs["fp32"][0] and len(runs["auto"][0]) == 16
    for name, (_, info, stdout) in runs.items():
        fp32 = matmath.fp32_unit()
        assert info["matmul"]["unit"] == "fp32"
        assert info["matmul_steps"] == {"prefill": {fp32: 1}, "decode": {fp32: 7}}
        assert f"; products: float32 ({fp32})" in stdout and "  ran " not in stdout
    assert runs["auto"][1]["matmul"]["note"].startswith("no bfloat16 unit here (")
    assert "  math    no bfloat16 unit here" in runs["auto"][2]     # why auto kept float32
    assert "  math " not in runs["fp32"][2]


@pytest.mark.parametrize("mode", ["fp32", "bf16", "auto"])
def test_a_run_records_the_math_and_which_unit_ran_each_phase(mode, tmp_path, capsys):
    if mode == "bf16" and UNIT is None:
        pytest.skip(f"no bfloat16 unit here: {WHY_NO_UNIT}")
    # 40 prompt tokens (a product of 40 rows) and decode steps of one row: on either side of the unit's
    # threshold (matmath.MIN_ROWS: 32 on AVX512-BF16, 16 on AMX)
    code = main(["run", "--prompt-len", "40", "--output-len", "4", "--ignore-eos", "--prefill-math", mode,
                 "--out", str(tmp_path)])
    stdout = capsys.readouterr().out
    assert code == 0
    info = json.loads((tmp_path / "run.json").read_text())["info"]
    matmul, fp32 = info["matmul"], matmath.fp32_unit()
    assert matmul["mode"] == mode and matmul["fp32_unit"] == fp32
    expected_unit = {"fp32": "fp32", "bf16": UNIT, "auto": UNIT if matmul["fidelity"] and
                     matmul["fidelity"]["kl_mean"] <= 0.01 and matmul["fidelity"]["top1"] >= 0.95 else "fp32"}[mode]
    assert matmul["unit"] == expected_unit
    prefill_unit = fp32 if expected_unit == "fp32" else expected_unit
    assert info["matmul_steps"] == {"prefill": {prefill_unit: 1}, "decode": {fp32: 3}}
    if mode != "fp32" and UNIT is not None:
        assert matmul["fidelity"]["tokens"] > 0 and "mean KL" in matmul["note"]
    if expected_unit != "fp32":
        assert (f"; products: bfloat16 on {expected_unit} for {matmath.MIN_ROWS[expected_unit]}+ rows, "
                f"float32 ({fp32}) below" in stdout)
        assert f"  ran     prefill: {expected_unit} (1 step); decode: {fp32} (3 steps)" in stdout
        assert "  math    " in stdout and "top-1 agreement" in stdout
    else:
        assert f"; products: float32 ({fp32})" in stdout


def test_the_model_loaded_event_carries_the_math_so_the_window_predicts_it_during_the_run():
    from backend.config import RunConfig
    from backend.events import ModelLoaded
    from backend.targets.local import run_local
    events = []
    config = run_config(build_parser().parse_args(["run", "--prompt-len", "20", "--output-len", "2",
                                                   "--prefill-math", "fp32"]))
    assert isinstance(config, RunConfig)
    assert run_local(config, events.append, lambda: False).error is None
    loaded = next(e for e in events if isinstance(e, ModelLoaded))
    assert loaded.matmul["mode"] == "fp32" and loaded.info().local.matmul == loaded.matmul


@needs_unit
def test_a_decode_batch_at_the_units_threshold_runs_on_the_bfloat16_unit(tmp_path, capsys):
    """A decode step's rows are its batch: as many requests decoding together as the unit's threshold
    (matmath.MIN_ROWS) reach it."""
    assert main(["run", "--prompt-len", "4", "--output-len", "3", "--batch", str(matmath.MIN_ROWS[UNIT]),
                 "--ignore-eos",
                 "--prefill-math", "bf16", "--out", str(tmp_path)]) == 0
    info = json.loads((tmp_path / "run.json").read_text())["info"]
    assert info["matmul_steps"] == {"prefill": {UNIT: 1}, "decode": {UNIT: 2}}
    capsys.readouterr()


def test_a_model_on_torch_records_torch_for_every_step_and_keeps_its_device_line(tmp_path):
    """The GPU path, tested on the CPU with the kernels turned off: auto changes nothing there."""
    proc = cli("run", "--prompt-len", "20", "--output-len", "3", "--dtype", "float32", "--out", str(tmp_path),
               env={"PHASESCOPE_KERNELS": "0"})
    assert proc.returncode == 0, proc.stderr
    info = json.loads((tmp_path / "run.json").read_text())["info"]
    assert info["matmul"]["unit"] == "fp32" and info["matmul"]["fp32_unit"] == "torch"
    assert info["matmul_steps"] == {"prefill": {"torch": 1}, "decode": {"torch": 2}}
    device = next(line for line in proc.stdout.splitlines() if line.startswith("device  "))
    assert "products:" not in device and "  ran " not in proc.stdout and "  math " not in proc.stdout


def test_bf16_on_a_model_that_runs_on_torch_is_one_line(capsys):
    code = main(["run", "--prompt-len", "8", "--output-len", "2", "--dtype", "bfloat16", "--prefill-math", "bf16"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("...")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: --prefill-math bf16 is the CPU kernels'")


def paris_answer(dtype: str, mode: str, capsys) -> str:
    code = main(["run", "--prompt", "What is the capital of France?", "--chat", "--output-len", "12",
                 "--dtype", dtype, "--prefill-math", mode])
    out = capsys.readouterr().out
    assert code == 0
    if mode == "bf16":
        assert f"  ran     prefill: {UNIT} (1 step)" in out
    return out.split("--- generated text (request 0) ---\n")[1].split("\n-----")[0]


@needs_unit
@pytest.mark.parametrize("dtype", ["float32", "q8_0", "q4_0", "q4_k"])
def test_the_paris_question_is_answered_as_in_float32_with_bf16_products(dtype, capsys):
    """Paris at float32, q8_0 and q4_0. The bundled weights requantized to q4_k answer "L'Étoile de
    la Cité, also known as ..." with float32 products too (the rounding of the weights, not of the
    products): there bfloat16 products must give float32's answer word for word."""
    got = paris_answer(dtype, "bf16", capsys)
    if dtype == "q4_k":
        assert got == paris_answer(dtype, "fp32", capsys)
    else:
        assert "Paris" in got, got


def test_the_words_for_a_recorded_math():
    fp32 = {"mode": "fp32", "unit": "fp32", "min_rows": 0, "fp32_unit": "AVX2 FMA", "note": "float32 products, as asked"}
    bf16 = {"mode": "auto", "unit": "AMX", "min_rows": 16, "fp32_unit": "AVX-512 FMA", "note": "auto: mean KL 0.0002"}
    torch_run = {"mode": "auto", "unit": "fp32", "min_rows": 0, "fp32_unit": "torch", "note": "the products run on torch"}
    steps = {"decode": {"AVX-512 FMA": 60, "AMX": 4}, "prefill": {"AMX": 1}}
    assert products_text(fp32) == "float32 (AVX2 FMA)"
    assert products_text(bf16) == "bfloat16 on AMX for 16+ rows, float32 (AVX-512 FMA) below"
    assert products_text(torch_run) == products_text(None) == ""
    assert steps_text(steps) == "prefill: AMX (1 step); decode: AVX-512 FMA (60 steps), AMX (4 steps)"
    assert steps_text({"mixed": {"AMX": 2}}) == "mixed: AMX (2 steps)" and steps_text(None) == ""
    assert math_lines(RunInfo.from_json({"matmul": bf16, "matmul_steps": steps})) == [("ran", steps_text(steps)),
                                                                   ("math", "auto: mean KL 0.0002")]
    assert math_lines(RunInfo.from_json({"matmul": fp32, "matmul_steps": steps})) == []
    assert math_lines(RunInfo.from_json({"matmul": torch_run})) == [] and math_lines(RunInfo.from_json({})) == []   # a GPU run, an older or simulated one
