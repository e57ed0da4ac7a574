"""GPU profiles: a device's peak dense FLOP/s per dtype and its memory bandwidth, from TOML.

The shipped profiles live in `profiles/*.toml` (vendor datasheet figures); this machine's
measured profile, written by `calibrate`, lives in the user's configuration folder as
`this-machine.toml`. No torch here: the CLI lists profiles without loading it.

A CPU profile has two compute roofs: fp32 (the FMA units) and bf16 (its matrix unit, named by
`bf16_unit`), the one the CPU kernels' bfloat16 products run at (backend/roofline/roofs.py
says which a product runs under); a calibrated one also holds [kernels_tflops], the project's
own kernels' measured product rates in each arithmetic.
"""
from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import profiles as _shipped
from backend.errors import InputError
from backend.files import config_dir
from backend.precision import Precision, precision

SHIPPED_DIR: Path = _shipped.HERE   # the top-level `profiles` package: found the same way installed or not
LOCAL_KEY = "this-machine"

# Short keys used in [tflops]: the dtype a product's arithmetic runs in. Quantized weights have
# one too (backend.precision): the CPU kernels multiply GGUF blocks in fp32, int8 weight-only
# runs at its activations' dtype.
# fp8 (E4M3 tensor cores: Hopper, Ada, Blackwell, MI300) and fp4 (Blackwell: NVFP4, MXFP4) appear only where
# the datasheet gives them: a run at a precision its profile has no peak for is refused.
DTYPE_KEYS = ("bf16", "fp16", "fp32", "fp8", "fp4")
_KEY_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1, "fp4": 1}

_REQUIRED = ("name", "vendor", "memory_gb", "bandwidth_gbs", "tflops", "source")
_OPTIONAL = ("match", "measured", "price_per_hour", "price_source", "simulation", "bf16_unit", "kernels_tflops")
# A CPU's bfloat16 peak is its matrix unit's: AMX tiles, AVX512-BF16 dot products, or neither
# (torch's bf16 matmul then widens to float32). calibrate records which; "" where unknown.
BF16_UNITS = ("AMX", "AVX512-BF16", "none")


def as_precision(dtype) -> Precision:
    """A Precision for any accepted spelling: a precision name, a torch dtype, a short key, a Precision."""
    if isinstance(dtype, Precision):
        return dtype
    text = str(dtype).lower().removeprefix("torch.")
    if text in _KEY_BYTES:   # a bare peak key: the float dtype of that name
        text = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "fp8": "fp8", "fp4": "nvfp4"}[text]
    return precision(text)


def dtype_key(dtype) -> str:
    """The peak key ('fp32', 'bf16', 'fp16') a run at this dtype or precision computes at."""
    if isinstance(dtype, str) and dtype in DTYPE_KEYS:   # already a key
        return dtype
    return as_precision(dtype).compute


def dtype_bytes(dtype) -> int:
    """Bytes per element of the activations (and the KV cache) at this dtype or precision."""
    key = str(dtype)
    return _KEY_BYTES[key] if key in _KEY_BYTES else as_precision(dtype).activation_bytes


@dataclass(slots=True, frozen=True)
class GpuProfile:
    key: str                    # file stem: what --profile takes
    name: str                   # display name
    vendor: str
    memory_gb: float
    bandwidth_gbs: float        # decimal GB/s, as datasheets give it
    tflops: dict[str, float] = field(hash=False)   # dense peak TFLOP/s per dtype key
    source: str = ""
    match: tuple[str, ...] = ()  # device-name patterns that preselect this profile
    path: Path | None = None
    measured: bool = False      # True for this machine's calibrated profile
    price_per_hour: float | None = None   # US dollars per device-hour; None: no cost line in the summary
    price_source: str = ""
    simulation: dict = field(default_factory=dict, hash=False)   # the cost model's terms (sim.step_time)
    bf16_unit: str = ""         # a CPU's: which unit its bf16 peak came from (BF16_UNITS; "" unknown)
    # a CPU's: the project's own C kernels' measured product rates (TFLOP/s) per arithmetic, fp32 and bf16
    kernels_tflops: dict[str, float] = field(default_factory=dict, hash=False)

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(k for k in DTYPE_KEYS if k in self.tflops)

    def peak_key(self, dtype) -> str | None:
        """The [tflops] key that prices a run at this dtype or precision; None where the profile has none."""
        key = dtype_key(dtype)
        return key if key in self.tflops else None

    def has_peak(self, dtype) -> bool:
        return self.peak_key(dtype) is not None

    def peak_flops(self, dtype) -> float:
        """Dense peak FLOP/s for a dtype; InputError when the profile has no figure for it."""
        key = self.peak_key(dtype)
        if key is None:
            raise InputError(f"profile {self.key!r} has no {dtype_key(dtype)} peak (it has: {', '.join(self.dtypes)})")
        return self.tflops[key] * 1e12

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_gbs * 1e9

    def ridge(self, dtype) -> float:
        """Arithmetic intensity (FLOP/byte) above which a step is compute-bound on this device."""
        return self.peak_flops(dtype) / self.bandwidth_bytes_per_s

    @property
    def is_cpu(self) -> bool:
        """The generic CPU profile, or a calibrated one of a CPU (calibrate names it
        'This machine: <cpu> (N threads)')."""
        return (self.key == "cpu" or self.vendor.lower() == "generic" or "cpu" in self.name.lower()
                or (self.measured and self.name.endswith("threads)")))


def local_profile_path() -> Path:
    return config_dir() / f"{LOCAL_KEY}.toml"


def _number(path: Path, name: str, value) -> float:
    # bool is an int subclass in Python; `memory_gb = true` is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"profile {path}: field '{name}' must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"profile {path}: field '{name}' must be a positive finite number, got {value!r}")
    return float(value)


def _text(path: Path, name: str, value, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise InputError(f"profile {path}: field '{name}' must be a string, got {type(value).__name__} {value!r}")
    if not allow_empty and not value.strip():
        raise InputError(f"profile {path}: field '{name}' must not be empty")
    return value


def parse_profile(data: dict, path: Path, measured: bool = False) -> GpuProfile:
    """Validate a parsed TOML table; every refusal names the file and the field."""
    path = Path(path)
    for key in data:
        if key not in _REQUIRED and key not in _OPTIONAL:
            raise InputError(f"profile {path}: unknown field '{key}' (known: {', '.join(_REQUIRED + _OPTIONAL)})")
    for key in _REQUIRED:
        if key not in data:
            raise InputError(f"profile {path}: missing field '{key}'")

    tflops_table = data["tflops"]
    if not isinstance(tflops_table, dict):
        raise InputError(f"profile {path}: field 'tflops' must be a table like [tflops] with bf16/fp16/fp32 numbers")
    if not tflops_table:
        raise InputError(f"profile {path}: field 'tflops' must give at least one of {', '.join(DTYPE_KEYS)}")
    tflops = {}
    for key, value in tflops_table.items():
        if key not in DTYPE_KEYS:
            raise InputError(f"profile {path}: field 'tflops.{key}' is not a known dtype (known: {', '.join(DTYPE_KEYS)})")
        tflops[key] = _number(path, f"tflops.{key}", value)

    match = data.get("match", [])
    if not isinstance(match, list) or not all(isinstance(m, str) and _words(m) for m in match):
        raise InputError(f"profile {path}: field 'match' must be a list of non-empty strings, got {match!r}")
    is_measured = data.get("measured", False)
    if not isinstance(is_measured, bool):
        raise InputError(f"profile {path}: field 'measured' must be true or false, got {is_measured!r}")

    price = data.get("price_per_hour")
    if price is not None:
        price = _number(path, "price_per_hour", price)
        if not str(data.get("price_source", "")).strip():
            raise InputError(f"profile {path}: field 'price_per_hour' needs a 'price_source' (where the price is from)")
    price_source = _text(path, "price_source", data.get("price_source", ""), allow_empty=True)
    simulation = data.get("simulation", {})
    if not isinstance(simulation, dict):
        raise InputError(f"profile {path}: field 'simulation' must be a table like [simulation] with the cost model's terms")
    _check_simulation(path, simulation)
    bf16_unit = _text(path, "bf16_unit", data.get("bf16_unit", ""), allow_empty=True)
    if bf16_unit and bf16_unit not in BF16_UNITS:
        raise InputError(f"profile {path}: field 'bf16_unit' must be one of {', '.join(BF16_UNITS)}, got {bf16_unit!r}")
    kernels_table = data.get("kernels_tflops", {})
    if not isinstance(kernels_table, dict):
        raise InputError(f"profile {path}: field 'kernels_tflops' must be a table like [kernels_tflops] "
                         f"with fp32/bf16 numbers")
    kernels_tflops = {}
    for key, value in kernels_table.items():
        if key not in ("fp32", "bf16"):
            raise InputError(f"profile {path}: field 'kernels_tflops.{key}' is not fp32 or bf16")
        kernels_tflops[key] = _number(path, f"kernels_tflops.{key}", value)

    return GpuProfile(
        key=path.stem,
        name=_text(path, "name", data["name"]),
        vendor=_text(path, "vendor", data["vendor"]),
        memory_gb=_number(path, "memory_gb", data["memory_gb"]),
        bandwidth_gbs=_number(path, "bandwidth_gbs", data["bandwidth_gbs"]),
        tflops=tflops,
        source=_text(path, "source", data["source"], allow_empty=True),
        match=tuple(match),
        path=path,
        measured=measured or is_measured,
        price_per_hour=price,
        price_source=price_source,
        simulation=dict(simulation),
        bf16_unit=bf16_unit,
        kernels_tflops=kernels_tflops,
    )


# the cost model's terms a [simulation] table may hold (backend.sim.step_time.CostModel)
SIMULATION_TERMS = ("mfu", "afu", "mbu", "step_ms", "token_ms", "request_ms", "layer_us", "prefill_layer_us", "link_eff", "efu", "serial",
                    "efu_rows", "request_layer_us", "link_latency_x", "pcie_link_eff")
# the engine families whose host terms a [simulation.<family>] sub-table may hold, and those terms
# (backend.sim.engines: the families' enum, --engine)
ENGINE_KEYS = ("vllm", "sglang", "trtllm", "compiled")
ENGINE_TERMS = ("step_ms", "request_ms", "layer_us", "link_latency_x")
MAX_EFFICIENCY = 4.0   # a calibrated peak is one measured matmul, which tuned kernels can beat
# what a fitted profile remembers of its runs beside the terms (backend/sim/fitted.py): text, and one count
FIT_FACTS = ("model", "dtype", "matmul_unit", "peaks")
FIT_COUNTS = ("matmul_min_rows", "band_runs")
FIT_BANDS = ("band_ttft_p50", "band_tpot_p50")   # calibrate --from: the fit's own band, a fraction


def _check_simulation(path: Path, table: dict) -> None:
    """A [simulation] table: efficiencies in (0, MAX_EFFICIENCY], overheads >= 0 ms, a source and a fitted flag;
    and per precision key a sub-table of the same ([simulation.fp8]: the terms an fp8 run takes over the rest), per
    engine family one of host terms ([simulation.vllm]: backend.sim.engines)."""
    for key, value in table.items():
        where = f"profile {path}: field 'simulation.{key}'"
        if key in ENGINE_KEYS and isinstance(value, dict):
            wrong = sorted(set(value) - set(ENGINE_TERMS) - {"source"})
            if wrong:
                raise InputError(f"profile {path}: field 'simulation.{key}.{wrong[0]}' is not an engine's host term "
                                 f"(known: {', '.join(ENGINE_TERMS)})")
            _check_simulation(path, value)
            continue
        if key in DTYPE_KEYS and isinstance(value, dict):
            for sub, v in value.items():
                if sub in DTYPE_KEYS:
                    raise InputError(f"{where}.{sub}: precision tables do not nest")
            _check_simulation(path, value)
            continue
        if key == "source" or key in FIT_FACTS:
            _text(path, f"simulation.{key}", value, allow_empty=True)
        elif key in FIT_BANDS:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e6:
                raise InputError(f"{where} must be a fraction >= 0, got {value!r}")
        elif key in FIT_COUNTS:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
                raise InputError(f"{where} must be a whole number >= 0, got {value!r}")
        elif key == "fitted":
            if not isinstance(value, bool):
                raise InputError(f"{where} must be true or false, got {value!r}")
        elif key not in SIMULATION_TERMS:
            raise InputError(f"{where} is not a cost model term (known: {', '.join(SIMULATION_TERMS)})")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(f"{where} must be a number, got {value!r}")
        elif key.endswith(("_ms", "_us", "_rows")) and value < 0:
            raise InputError(f"{where} is milliseconds and must not be negative, got {value!r}")
        elif key in ("efu", "serial") and not 0 <= value <= MAX_EFFICIENCY:   # 0: not used
            raise InputError(f"{where} must be in [0, {MAX_EFFICIENCY:g}], got {value!r}")
        elif key not in ("efu", "serial") and not key.endswith(("_ms", "_us", "_rows")) and not 0 < value <= MAX_EFFICIENCY:
            raise InputError(f"{where} is a fraction of the peak and must be in (0, {MAX_EFFICIENCY:g}], got {value!r}")


def load_profile(path, measured: bool = False) -> GpuProfile:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"profile {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(f"profile {path}: not TOML (the file is not UTF-8 text)") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"profile {path}: not TOML ({exc})") from None
    return parse_profile(data, path, measured=measured)


def list_profiles() -> list[GpuProfile]:
    """The shipped profiles sorted by key, then this machine's measured one if calibrated."""
    profiles = [load_profile(p) for p in sorted(SHIPPED_DIR.glob("*.toml"))]
    local = local_profile_path()
    if local.is_file():
        profiles.append(load_profile(local, measured=True))
    return profiles


def find_profile(name_or_path) -> GpuProfile:
    """A profile by key (case-insensitive) or by the path of a TOML file."""
    text = str(name_or_path).strip()
    path = Path(text).expanduser()
    if path.is_file():
        return load_profile(path)
    if text.endswith(".toml") or os.sep in text:
        raise InputError(f"profile file {text} does not exist")
    shipped = SHIPPED_DIR / f"{text.lower()}.toml"
    if shipped.is_file():
        return load_profile(shipped)   # whatever state this machine's measured profile is in
    profiles = list_profiles()
    for profile in profiles:
        if profile.key.lower() == text.lower():
            return profile
    known = ", ".join(p.key for p in profiles)
    raise InputError(f"unknown profile {text!r} (known: {known}; or give the path of a .toml file)")


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", text.lower()) if w]


def match_profile(device_name: str) -> GpuProfile | None:
    """The shipped profile for a device name such as torch.cuda.get_device_name() gives.

    A pattern matches when each of its words is a whole word of the device name, so "L4"
    does not match "NVIDIA L40S"; among matches, the pattern with the most words wins.
    """
    words = set(_words(device_name))
    best, best_len = None, 0
    for profile in list_profiles():
        for pattern in profile.match:
            pattern_words = _words(pattern)
            if len(pattern_words) > best_len and words.issuperset(pattern_words):
                best, best_len = profile, len(pattern_words)
    return best


def _toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _toml_string(value)
    return repr(float(value))


def profile_to_toml(profile: GpuProfile) -> str:
    """The TOML text of a profile; load_profile reads it back to an equal profile."""
    lines = [
        f"name = {_toml_string(profile.name)}",
        f"vendor = {_toml_string(profile.vendor)}",
        f"memory_gb = {float(profile.memory_gb)!r}",
        f"bandwidth_gbs = {float(profile.bandwidth_gbs)!r}",
    ]
    if profile.match:
        lines.append("match = [" + ", ".join(_toml_string(m) for m in profile.match) + "]")
    if profile.measured:
        lines.append("measured = true")
    lines.append(f"source = {_toml_string(profile.source)}")
    if profile.price_per_hour is not None:
        lines.append(f"price_per_hour = {float(profile.price_per_hour)!r}")
        lines.append(f"price_source = {_toml_string(profile.price_source)}")
    if profile.bf16_unit:
        lines.append(f"bf16_unit = {_toml_string(profile.bf16_unit)}")
    lines += ["", "[tflops]"]
    lines += [f"{key} = {float(value)!r}" for key, value in profile.tflops.items()]
    if profile.kernels_tflops:
        lines += ["", "[kernels_tflops]"]
        lines += [f"{key} = {float(value)!r}" for key, value in profile.kernels_tflops.items()]
    if profile.simulation:
        lines += ["", "[simulation]"]
        tables = {k: v for k, v in profile.simulation.items() if isinstance(v, dict)}
        for key, value in profile.simulation.items():
            if key not in tables:
                lines.append(f"{key} = {_toml_value(value)}")
        for key, table in tables.items():
            lines += ["", f"[simulation.{key}]"]
            lines += [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def describes(profile: GpuProfile, device_name: str) -> bool:
    """Whether a calibrated profile was measured on the device of this name (its name holds the device's words)."""
    wanted = set(_words(device_name))
    return bool(wanted) and wanted <= set(_words(profile.name))


def run_profile(device: str, device_name: str) -> GpuProfile | None:
    """The roofline of the device a run ran on: what its summary's bounds are judged against.

    This machine's calibrated profile when it was measured on that device (its name holds
    the device's name, as calibrate writes it); else, on a CPU, the generic CPU profile, and
    on a CUDA device the shipped profile matching its name. None when there is none (an
    unknown GPU, an Apple GPU never calibrated). A calibrated file that cannot be read is
    passed over, not fatal: the run itself is over by the time its summary is printed.
    """
    kind = str(device).split(":", 1)[0].lower()
    wanted = set(_words(device_name))
    local_path = local_profile_path()
    if local_path.is_file() and wanted:
        try:
            local = load_profile(local_path, measured=True)
        except InputError:
            local = None
        if local is not None and describes(local, device_name):
            return local
    if kind == "cpu":
        return load_profile(SHIPPED_DIR / "cpu.toml")
    if kind == "cuda":
        try:
            return match_profile(device_name)
        except InputError:   # the calibrated file again, read by list_profiles
            return None
    return None
