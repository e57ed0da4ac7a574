"""A fitted profile prices a simulated run as its measured runs ran: their precision, matrix unit and roofs."""
from __future__ import annotations

import csv
import json
from types import SimpleNamespace

import pytest

from backend.cli.main import main
from backend.errors import InputError
from backend.kernels.matmath import MatMath
from backend.models.shapes import SHAPES
from backend.precision import precision
from backend.roofline.profiles import load_profile
from backend.sim.fitted import KERNELS, FittedOn, fit_roofs, priced_profile, simulated_dtype, simulated_math
from backend.sim.step_time import CostModel

PROFILE = '''name = "This machine: Test CPU (2 threads)"
vendor = "x"
memory_gb = 8
bandwidth_gbs = 20
measured = true
source = "test"
bf16_unit = "AVX512-BF16"

[tflops]
fp32 = 0.03
bf16 = 0.4

[kernels_tflops]
fp32 = 0.06
bf16 = 0.12

[simulation]
mfu = 0.5
afu = 0.2
mbu = 0.5
step_ms = 2.0
fitted = true
source = "test fit"
'''
FACTS = 'model = "smollm2-135m"\ndtype = "q4_1"\nmatmul_unit = "AVX512-BF16"\nmatmul_min_rows = 16\npeaks = "kernels"\n'


@pytest.fixture
def fitted(tmp_path):
    path = tmp_path / "fitted.toml"
    path.write_text(PROFILE + FACTS)
    return path


def test_the_facts_load_and_the_cost_model_ignores_them(fitted):
    profile = load_profile(fitted, measured=True)
    facts = FittedOn.of_profile(profile)
    assert facts == FittedOn("smollm2-135m", "q4_1", "AVX512-BF16", 16, KERNELS)
    assert CostModel.for_profile(profile).mfu == 0.5
    assert priced_profile(profile).tflops == {"fp32": 0.06, "bf16": 0.12}   # the kernels' roofs
    assert simulated_math(profile) == MatMath("AVX512-BF16", 16)
    assert simulated_dtype(profile, "smollm2-135m", "auto") == "q4_1"
    assert simulated_dtype(profile, "smollm2-135m", "float32") == "float32"   # asked for: kept
    assert simulated_dtype(profile, "llama-1b", "auto") == "auto"             # not the fitted model


def test_a_profile_not_fitted_prices_as_before(tmp_path):
    path = tmp_path / "plain.toml"
    path.write_text(PROFILE.replace("fitted = true\n", ""))
    profile = load_profile(path, measured=True)
    assert FittedOn.of_profile(profile) is None and priced_profile(profile) is profile
    assert simulated_math(profile) is None and simulated_dtype(profile, "smollm2-135m", "auto") == "auto"


def test_a_bad_fact_is_refused_in_one_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(PROFILE + "matmul_min_rows = -2\n")
    with pytest.raises(InputError, match="simulation.matmul_min_rows. must be a whole number"):
        load_profile(path)
    path.write_text(PROFILE + "dtype = 4\n")
    with pytest.raises(InputError, match="simulation.dtype. must be a string"):
        load_profile(path)


def _info(model="smollm2-135m", dtype="q4_1", unit="AVX512-BF16", fp32_unit="AVX-512 FMA"):
    matmul = {"unit": unit, "min_rows": 16, "fp32_unit": fp32_unit}
    return SimpleNamespace(model=model, dtype=dtype, host=SimpleNamespace(matmul=matmul))


def test_the_facts_are_what_the_runs_agree_on(fitted):
    profile = load_profile(fitted, measured=True)
    facts = FittedOn.of_runs([_info(), _info()], profile)
    assert facts.terms() == {"model": "smollm2-135m", "dtype": "q4_1", "matmul_unit": "AVX512-BF16",
                             "matmul_min_rows": 16, "peaks": KERNELS}
    assert fit_roofs(profile, facts).tflops["bf16"] == 0.12
    mixed = FittedOn.of_runs([_info(), _info(dtype="float32", unit="fp32")], profile)
    assert mixed.dtype == "" and mixed.matmul_unit == "" and mixed.peaks == KERNELS
    on_torch = FittedOn.of_runs([_info(fp32_unit="torch")], profile)   # products on torch: its [tflops]
    assert on_torch.peaks == "" and fit_roofs(profile, on_torch) is profile


def test_a_simulated_run_prices_the_bundled_model_as_stored_on_the_fitted_unit(fitted, tmp_path):
    out = tmp_path / "sim"
    assert main(["run", "--simulate", "--profile", str(fitted), "--model", "smollm2-135m", "--prompt-len", "128",
                 "--output-len", "3", "--out", str(out)], open_window=None) == 0
    info = json.loads((out / "run.json").read_text())["info"]
    assert info["dtype"] == "q4_1"   # the bundled model as the fitted runs ran it, not float32
    steps = list(csv.DictReader(open(out / "steps.csv")))
    prefill = next(s for s in steps if s["phase"] == "prefill")
    profile = priced_profile(load_profile(fitted, measured=True))
    model, shape, prec = CostModel.for_profile(profile), SHAPES["smollm2-135m"], precision("q4_1", "float32")
    on_unit = model.step_seconds(shape, prec, profile, [128], [128], math=MatMath("AVX512-BF16", 16)) * 1000
    on_fp32 = model.step_seconds(shape, prec, profile, [128], [128]) * 1000
    assert float(prefill["duration_ms"]) == pytest.approx(on_unit) and on_unit < 0.8 * on_fp32


def test_calibrate_fit_keeps_the_runs_facts_and_prices_on_the_kernels_roofs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PHASESCOPE_CONFIG_DIR", str(tmp_path / "config"))
    runs = []
    for name, argv in (("b", ["sweep", "batch", "--batches", "1,2", "--context", "32", "--steps", "2"]),
                       ("p", ["sweep", "prompt", "--lengths", "16,32", "--steps", "2"])):
        assert main([*argv, "--model", "tiny", "--threads", "1", "--out", str(tmp_path / name)], open_window=None) == 0
        runs.append(str(tmp_path / name))
    info = json.loads((tmp_path / "b" / "run.json").read_text())["info"]
    profile = tmp_path / "mine.toml"
    profile.write_text(PROFILE.replace("Test CPU", info["device_name"]).split("[simulation]")[0])
    capsys.readouterr()
    assert main(["calibrate", "--fit", *runs, "--out", str(profile)], open_window=None) == 0
    facts = FittedOn.of_profile(load_profile(profile, measured=True))
    assert facts.model == "tiny" and facts.dtype == info["dtype"]
    matmul = info.get("matmul") or {}
    on_kernels = bool(matmul) and matmul.get("fp32_unit") != "torch"
    assert facts.peaks == (KERNELS if on_kernels else "")
    assert facts.matmul_unit == matmul.get("unit", "")
    if on_kernels:   # the report names the roofs it priced on: the kernels' rates, not torch's
        assert "the C kernels' rates fp32 0.06 TFLOP/s" in capsys.readouterr().out
