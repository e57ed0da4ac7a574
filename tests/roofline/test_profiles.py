"""GPU profiles: the shipped files, validation of malformed ones, lookup and device matching."""
import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend.errors import InputError
from backend.roofline.profiles import (
    dtype_bytes, DTYPE_KEYS, find_profile, GpuProfile, list_profiles, load_profile, local_profile_path,
    match_profile, parse_profile, profile_to_toml, run_profile, SHIPPED_DIR)
from backend.files import config_dir

REQUIRED_DEVICES = ["h200-sxm", "h100-sxm", "h100-pcie", "a100-80gb-sxm", "a100-40gb", "l40s", "l4", "a10g", "t4",
                    "rtx-4090", "rtx-3090", "b200", "mi300x", "cpu"]

VALID = """\
name = "Test GPU"
vendor = "Acme"
memory_gb = 16
bandwidth_gbs = 500.0
source = "made up for a test; dense"

[tflops]
bf16 = 100.0
fp32 = 10
"""


@pytest.fixture(autouse=True)
def empty_config(tmp_path, monkeypatch):
    """Every test sees an empty configuration folder, never the user's real one."""
    monkeypatch.setenv("PHASESCOPE_CONFIG_DIR", str(tmp_path / "config"))


@pytest.mark.parametrize("key", REQUIRED_DEVICES)
def test_each_required_device_ships_and_loads(key):
    profile = load_profile(SHIPPED_DIR / f"{key}.toml")
    assert profile.key == key
    assert profile.memory_gb > 0 and profile.bandwidth_gbs > 0
    assert profile.tflops and all(v > 0 for v in profile.tflops.values())
    assert "dense" in profile.source.lower()
    assert not profile.measured


def test_every_shipped_file_loads_and_lists():
    files = sorted(p.stem for p in SHIPPED_DIR.glob("*.toml"))
    assert [p.key for p in list_profiles()] == files


def test_h100_sxm_bf16_ridge_is_about_295():
    ridge = find_profile("h100-sxm").ridge("bfloat16")
    assert ridge == pytest.approx(295, rel=0.03)


def test_t4_has_fp16_but_no_bf16():
    t4 = find_profile("t4")
    assert t4.peak_flops("float16") == pytest.approx(65e12)
    with pytest.raises(InputError, match="no bf16"):
        t4.peak_flops("bfloat16")


@pytest.mark.parametrize("spelling", ["bf16", "bfloat16", "BF16", "torch.bfloat16"])
def test_dtype_spellings(spelling):
    assert find_profile("h100-sxm").peak_flops(spelling) == pytest.approx(989.4e12)
    assert dtype_bytes(spelling) == 2


def test_a_peak_the_datasheet_lacks_is_refused():
    with pytest.raises(InputError, match="fp8"):
        find_profile("a100-80gb-sxm").peak_flops("fp8")   # Ampere has no FP8 tensor cores
    assert dtype_bytes("float32") == 4


def test_fp8_and_fp4_peaks_where_the_datasheets_give_them():
    from backend.precision import precision
    assert find_profile("h100-sxm").peak_flops(precision("fp8")) == pytest.approx(1978.9e12)
    assert find_profile("b200").peak_flops(precision("nvfp4")) == pytest.approx(9000e12)
    assert find_profile("b200").peak_key(precision("mxfp4")) == "fp4"
    assert not find_profile("h200-sxm").has_peak(precision("nvfp4"))


def test_quantized_precisions_are_priced_at_the_peak_their_arithmetic_runs_at():
    """GGUF blocks are multiplied in fp32 by the CPU kernels; int8 weight-only at its activations' dtype."""
    from backend.precision import precision
    h100 = find_profile("h100-sxm")
    assert h100.peak_key("q4_1") == "fp32" and dtype_bytes("q4_1") == 4
    assert h100.peak_key(precision("int8", "bfloat16")) == "bf16"
    assert h100.peak_flops(precision("int8", "bfloat16")) == h100.peak_flops("bf16")


def test_bandwidth_and_ridge_units():
    profile = parse_profile(__import__("tomllib").loads(VALID), Path("x.toml"))
    assert profile.bandwidth_bytes_per_s == 500e9
    assert profile.ridge("fp32") == pytest.approx(10e12 / 500e9)


MALFORMED = [
    # (text, what the message must name)
    ("name = [unclosed", "not TOML"),
    (VALID.replace('vendor = "Acme"\n', ""), "'vendor'"),
    (VALID.replace("bandwidth_gbs = 500.0", 'bandwidth_gbs = "fast"'), "'bandwidth_gbs'"),
    (VALID.replace("bandwidth_gbs = 500.0", "bandwidth_gbs = true"), "'bandwidth_gbs'"),
    (VALID.replace("memory_gb = 16", "memory_gb = 0"), "'memory_gb'"),
    (VALID.replace("memory_gb = 16", "memory_gb = -16"), "'memory_gb'"),
    (VALID.replace("memory_gb = 16", "memory_gb = nan"), "'memory_gb'"),
    (VALID.replace("fp32 = 10", "fp32 = -1"), "'tflops.fp32'"),
    (VALID.replace("fp32 = 10", "int8 = 400"), "'tflops.int8'"),
    (VALID.replace("[tflops]\nbf16 = 100.0\nfp32 = 10\n", "tflops = 5\n"), "'tflops'"),
    (VALID.replace("[tflops]\nbf16 = 100.0\nfp32 = 10\n", "[tflops]\n"), "'tflops'"),
    (VALID.replace('vendor = "Acme"', 'vendor = "Acme"\ncolour = "green"'), "'colour'"),
    (VALID.replace('vendor = "Acme"', 'vendor = "Acme"\nmatch = "H100"'), "'match'"),
    (VALID.replace('name = "Test GPU"', "name = 5"), "'name'"),
    (VALID.replace('name = "Test GPU"', 'name = "  "'), "'name'"),
    (VALID.replace('vendor = "Acme"', 'vendor = "Acme"\nbf16_unit = "TPU"'), "'bf16_unit'"),
    (VALID + "\n[kernels_tflops]\nfp16 = 1.0\n", "'kernels_tflops.fp16'"),
    (VALID + "\n[kernels_tflops]\nbf16 = 0\n", "'kernels_tflops.bf16'"),
    (VALID.replace('vendor = "Acme"', 'vendor = "Acme"\nkernels_tflops = 3'), "'kernels_tflops'"),
]


@pytest.mark.parametrize("text,field", MALFORMED)
def test_malformed_profile_names_file_and_field(tmp_path, text, field):
    path = tmp_path / "broken.toml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_profile(path)
    message = str(info.value)
    assert str(path) in message and field in message
    assert "\n" not in message


def test_not_utf8_and_missing_file(tmp_path):
    path = tmp_path / "binary.toml"
    path.write_bytes(b"\xff\xfe\x00name")
    with pytest.raises(InputError, match="not TOML"):
        load_profile(path)
    with pytest.raises(InputError, match="cannot read"):
        load_profile(tmp_path / "absent.toml")


# Values of every type TOML can hold, including the invalid numbers it allows (nan, inf, 0).
toml_values = st.recursive(
    st.one_of(st.text(max_size=8), st.integers(-3, 2000), st.floats(allow_nan=True), st.booleans()),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["bf16", "fp16", "fp32", "x"]),
                                                               inner, max_size=3),
    max_leaves=4,
)
# The machines running these tests are shared and noisy: no deadlines, no speed health check.
noisy = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
base_profile = {"name": "G", "vendor": "V", "memory_gb": 8, "bandwidth_gbs": 100.0, "source": "s",
                "tflops": {"fp16": 50.0}}
field_names = st.sampled_from(list(base_profile) + ["match", "measured", "unknown"])


@noisy
@given(
    drop=st.lists(field_names, max_size=2),
    replace=st.dictionaries(field_names, toml_values, max_size=3),
    tflops=st.dictionaries(st.sampled_from(["bf16", "fp16", "fp32", "int8"]), toml_values, max_size=3),
)
def test_generated_profiles_are_valid_or_refused(drop, replace, tflops):
    data = {k: v for k, v in base_profile.items() if k not in drop}
    data.update(replace)
    if tflops and isinstance(data.get("tflops"), dict):
        data["tflops"] = {**data["tflops"], **tflops}
    try:
        profile = parse_profile(data, Path("generated.toml"))
    except InputError as exc:
        assert "generated.toml" in str(exc)
        return
    assert profile.tflops and set(profile.tflops) <= set(DTYPE_KEYS)
    numbers = [profile.memory_gb, profile.bandwidth_gbs, *profile.tflops.values()]
    assert all(math.isfinite(x) and x > 0 for x in numbers)
    assert all(profile.ridge(k) > 0 for k in profile.dtypes)


@settings(noisy, max_examples=50)
@given(text=st.text(max_size=200) | st.text(max_size=40).map(lambda tail: VALID + tail))
def test_arbitrary_text_is_valid_or_refused(tmp_path, text):
    path = tmp_path / "fuzz.toml"
    path.write_text(text, encoding="utf-8")
    try:
        load_profile(path)
    except InputError as exc:
        assert str(path) in str(exc)


def test_local_profile_is_listed_as_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("PHASESCOPE_CONFIG_DIR", str(tmp_path / "cfg"))
    assert local_profile_path() == tmp_path / "cfg" / "this-machine.toml"
    assert all(not p.measured for p in list_profiles())
    local_profile_path().parent.mkdir()
    local_profile_path().write_text(VALID)
    local = list_profiles()[-1]
    assert local.key == "this-machine" and local.measured
    assert find_profile("this-machine").measured


def calibrated(name: str) -> None:
    """This machine's profile as calibrate writes it: named for the device it measured."""
    local_profile_path().parent.mkdir(parents=True, exist_ok=True)
    local_profile_path().write_text(VALID.replace('"Test GPU"', f'"This machine: {name}"'))


def test_run_profile_is_the_calibrated_one_for_the_device_it_measured():
    cpu = "AMD EPYC 7B13 64-Core Processor"
    assert run_profile("cpu", cpu).key == "cpu"                          # nothing calibrated: the generic CPU
    calibrated(f"{cpu} (2 threads)")
    assert run_profile("cpu", cpu).measured and run_profile("cpu", cpu).key == "this-machine"
    # a CUDA run on the same machine is not judged by the CPU's measurement
    assert run_profile("cuda:0", "NVIDIA H100 80GB HBM3").key == "h100-sxm"
    assert run_profile("cuda:0", "NVIDIA GeForce GTX 1080") is None       # no profile for it: no bound
    assert run_profile("mps", "Apple GPU (MPS, arm64)") is None
    calibrated("NVIDIA H100 80GB HBM3")
    assert run_profile("cuda:0", "NVIDIA H100 80GB HBM3").measured
    assert run_profile("cpu", cpu).key == "cpu"                          # measured on the GPU, not this CPU


def test_run_profile_passes_over_an_unreadable_calibration():
    local_profile_path().parent.mkdir(parents=True)
    local_profile_path().write_text("not = [toml")
    assert run_profile("cpu", "Some CPU").key == "cpu"


def test_config_dir_falls_back_to_xdg(tmp_path, monkeypatch):
    monkeypatch.delenv("PHASESCOPE_CONFIG_DIR")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert config_dir() == tmp_path / "phasescope"


def test_find_profile_by_name_and_path(tmp_path):
    assert find_profile("H100-SXM").key == "h100-sxm"
    path = tmp_path / "mine.toml"
    path.write_text(VALID)
    assert find_profile(str(path)).name == "Test GPU"
    with pytest.raises(InputError, match="does not exist"):
        find_profile(str(tmp_path / "other.toml"))
    with pytest.raises(InputError) as info:
        find_profile("h900")
    assert "h900" in str(info.value) and "h100-sxm" in str(info.value) and "mi300x" in str(info.value)


@pytest.mark.parametrize("device,key", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H200", "h200-sxm"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA A10G", "a10g"),
    ("Tesla T4", "t4"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("NVIDIA GeForce RTX 3090", "rtx-3090"),
    ("NVIDIA B200", "b200"),
    ("AMD Instinct MI300X", "mi300x"),
    ("NVIDIA GeForce GTX 1080", None),
    ("NVIDIA GH200 480GB", None),
])
def test_match_profile(device, key):
    found = match_profile(device)
    assert (found.key if found else None) == key


@noisy
@given(
    name=st.text(min_size=1).filter(str.strip),
    source=st.text(),
    match=st.lists(st.text(alphabet="abcXYZ019 -", min_size=1).filter(lambda m: any(c.isalnum() for c in m)),
                   max_size=3),
    numbers=st.lists(st.floats(min_value=1e-6, max_value=1e6), min_size=5, max_size=5),
)
def test_profile_to_toml_round_trips(tmp_path_factory, name, source, match, numbers):
    profile = GpuProfile(key="rt", name=name, vendor="V", memory_gb=numbers[0], bandwidth_gbs=numbers[1],
                         tflops=dict(zip(DTYPE_KEYS, numbers[2:])), source=source, match=tuple(match), measured=True)
    path = tmp_path_factory.mktemp("rt") / "rt.toml"
    path.write_text(profile_to_toml(profile), encoding="utf-8")
    loaded = load_profile(path)
    assert loaded == GpuProfile(**{**{f: getattr(profile, f) for f in GpuProfile.__dataclass_fields__}, "path": path})


def test_profiles_module_does_not_import_torch():
    code = "import sys, backend.roofline.profiles; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2]).returncode == 0


def test_the_cpu_profile_names_its_bf16_unit_and_an_old_profile_without_the_new_fields_loads(tmp_path):
    cpu = find_profile("cpu")
    assert cpu.is_cpu and cpu.bf16_unit == "AVX512-BF16" and cpu.kernels_tflops == {}
    assert set(cpu.tflops) == {"fp32", "bf16"} and cpu.tflops["bf16"] > cpu.tflops["fp32"]
    path = tmp_path / "old.toml"
    path.write_text(VALID)
    old = load_profile(path)
    assert old.bf16_unit == "" and old.kernels_tflops == {} and not old.is_cpu


def test_the_kernels_rates_and_the_bf16_unit_round_trip(tmp_path):
    profile = GpuProfile(key="rt", name="This machine: Test CPU (2 threads)", vendor="Test", memory_gb=8.0,
                         bandwidth_gbs=40.0, tflops={"bf16": 2.2, "fp32": 0.32}, source="s", measured=True,
                         bf16_unit="AMX", kernels_tflops={"fp32": 0.3, "bf16": 1.1})
    path = tmp_path / "rt.toml"
    path.write_text(profile_to_toml(profile), encoding="utf-8")
    assert load_profile(path) == dataclasses.replace(profile, path=path)
