"""Calibration on the CPU (quick mode) and the atomic profile writer."""
import dataclasses
import math
import os

import pytest
import torch

from backend.roofline.calibrate import calibrate, write_profile
from backend.errors import InputError
from backend.roofline.profiles import GpuProfile, find_profile, list_profiles, load_profile, local_profile_path


@pytest.fixture(scope="module")
def measured():
    """One quick CPU calibration, shared: it takes a few seconds."""
    calls = []
    profile = calibrate(device="cpu", progress=lambda message, fraction: calls.append((message, fraction)),
                        quick=True)
    return profile, calls


@pytest.fixture
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("PHASESCOPE_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "config"


def test_cpu_calibration_gives_positive_finite_numbers(measured):
    profile, _ = measured
    assert profile.measured and profile.key == "this-machine"
    assert "fp32" in profile.tflops
    numbers = [profile.memory_gb, profile.bandwidth_gbs, *profile.tflops.values()]
    assert all(math.isfinite(x) and x > 0 for x in numbers)
    assert set(profile.tflops) <= {"fp32", "bf16"}     # no fp16 figure for a CPU


def test_progress_runs_from_zero_to_one(measured):
    _, calls = measured
    fractions = [fraction for _, fraction in calls]
    assert fractions[0] == 0.0 and fractions[-1] == 1.0
    assert fractions == sorted(fractions)
    assert any("bandwidth" in message for message, _ in calls)


def test_written_profile_loads_back_and_is_listed(measured, config):
    profile, _ = measured
    path = write_profile(profile)
    assert path == local_profile_path() == config / "this-machine.toml"
    loaded = load_profile(path)
    assert loaded.tflops == profile.tflops and loaded.bandwidth_gbs == profile.bandwidth_gbs
    assert loaded.measured and loaded.name == profile.name
    listed = list_profiles()[-1]
    assert listed.key == "this-machine" and listed.measured
    assert find_profile("this-machine").tflops == profile.tflops
    assert os.listdir(config) == ["this-machine.toml"]     # no temporary file left beside it


def test_the_cpu_profile_names_its_bf16_unit_and_the_kernels_rates_and_they_load_back(measured, config):
    from backend import kernels
    from backend.kernels import matmath
    profile, _ = measured
    units = kernels.cpu_units()
    assert profile.bf16_unit == ("AMX" if units.get("AMX") else "AVX512-BF16" if units.get("AVX512-BF16") else "none")
    if kernels.load() is None:
        assert profile.kernels_tflops == {} and "no kernels' figure" in profile.source
    else:
        # the kernels' bf16 figure exactly where they have a bfloat16 unit
        assert set(profile.kernels_tflops) == ({"fp32", "bf16"} if matmath.bf16_unit()[0] else {"fp32"})
        assert all(math.isfinite(v) and v > 0 for v in profile.kernels_tflops.values())
        assert "(512 x 576) x (576 x 1536)" in profile.source
    loaded = load_profile(write_profile(profile))
    assert loaded.bf16_unit == profile.bf16_unit and loaded.kernels_tflops == profile.kernels_tflops
    assert matmath._selected[0] == matmath.FP32   # the probe leaves the kernels in float32


def test_write_to_an_explicit_path(measured, tmp_path):
    path = write_profile(measured[0], tmp_path / "deep" / "box.toml")
    assert load_profile(path).key == "box"


def test_failed_rename_leaves_the_old_file_and_no_temporary(measured, config, monkeypatch):
    path = write_profile(measured[0])
    before = path.read_text()

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    changed = dataclasses.replace(measured[0], bandwidth_gbs=measured[0].bandwidth_gbs * 2)
    with pytest.raises(InputError, match="No space left"):
        write_profile(changed)
    assert path.read_text() == before
    assert os.listdir(config) == ["this-machine.toml"]


def test_an_invalid_profile_is_refused_before_writing(config):
    bad = GpuProfile(key="x", name="x", vendor="x", memory_gb=1.0, bandwidth_gbs=float("nan"),
                     tflops={"fp32": 1.0}, source="")
    with pytest.raises(InputError, match="bandwidth_gbs"):
        write_profile(bad)
    assert not config.exists()


def test_unwritable_folder_is_refused(measured, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(InputError, match="cannot write profile"):
        write_profile(measured[0], blocker / "profile.toml")


@pytest.mark.parametrize("device", ["tpu", "cuda:99" if torch.cuda.is_available() else "cuda"])
def test_unavailable_devices_are_refused(device):
    with pytest.raises(InputError, match=device.split(":")[0]):
        calibrate(device=device, quick=True)


def test_the_calibrate_command_prints_the_bf16_unit_and_the_kernels_rates(tmp_path, capsys):
    from backend.cli.main import main
    from backend import kernels
    out = tmp_path / "cpu.toml"
    assert main(["calibrate", "--quick", "--device", "cpu", "--out", str(out)], open_window=None) == 0
    printed = capsys.readouterr().out
    profile = load_profile(out)
    assert f"fp32 {profile.tflops['fp32']:,.2f} TFLOP/s" in printed
    unit = profile.bf16_unit
    assert (f"(bf16 on {unit})" if unit != "none" else "no bf16 unit") in printed
    if kernels.load() is not None:
        assert f"the C kernels' products: fp32 {profile.kernels_tflops['fp32']:,.2f} TFLOP/s" in printed
