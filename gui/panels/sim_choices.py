"""What a simulated run can be given, read from the backend's own tables so the window and the CLI
offer the same names: the precisions, the shipped model configs, the links between devices, and
whether a model name has a shape the simulator can price (and whether it is a mixture of experts)."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from backend.errors import InputError

KV_DTYPES = ("auto", "fp8", "bfloat16", "float16")   # --kv-dtype: auto is the activations' dtype


def sim_dtypes() -> list[str]:
    """--dtype's choices under --simulate: auto and every precision name (backend.precision.NAMES);
    one a profile cannot run (nvfp4 on an H100) is refused by the backend in one line. The GGUF block
    formats (priced as this engine's CPU kernels run them) come last."""
    from backend.precision import BLOCK_FORMATS, NAMES
    return ["auto", *(n for n in NAMES if n not in BLOCK_FORMATS), *(n for n in NAMES if n in BLOCK_FORMATS)]


def shipped_configs() -> dict[str, str]:
    """The shipped model configs (key -> config.json path), e.g. "llama-3.1-70b"
    (backend.roofline.model_configs.SHIPPED_CONFIGS)."""
    from backend.roofline.model_configs import SHIPPED_CONFIGS
    return {key: str(path) for key, path in SHIPPED_CONFIGS.items()}


def engine_choices() -> list[tuple[str, str]]:
    """(name, what it is) of each engine --engine takes (backend.sim.engines), the default first."""
    from backend.sim.engines import DEFAULT_ENGINE, ENGINE_CHOICES, ENGINE_HELP, EngineFamily
    names = [DEFAULT_ENGINE.value] + [n for n in ENGINE_CHOICES if n != DEFAULT_ENGINE.value]
    return [(n, ENGINE_HELP[EngineFamily(n)]) for n in names]


def link_names() -> list[str]:
    """The links --link takes (backend.sim.links.list_links)."""
    from backend.sim.links import list_links
    return [str(name) for name in list_links()]


def sim_shape(name: str):
    """The ModelShape the simulator prices for a shape name, a shipped config key or a config.json
    path, found as a simulated run finds it (backend.sim.model.resolve_model); InputError
    (one line) for a name it cannot price."""
    from backend.sim.model import resolve_model
    return resolve_model(name)


@lru_cache(maxsize=64)
def _checked(name: str, mtime: float):
    try:
        return sim_shape(name), ""
    except InputError as exc:
        return None, str(exc)


def check_sim_model(name: str) -> tuple[object | None, str]:
    """(shape, "") when the simulator can price `name`, else (None, why); a config.json is read
    again when it changes on the disk."""
    path = Path(name).expanduser()
    try:
        mtime = path.stat().st_mtime if path.suffix.lower() == ".json" else 0.0
    except OSError:
        mtime = -1.0
    return _checked(name, mtime)


def check_deployment(deployment, shape, model_name: str) -> str:
    """Why the model cannot take this layout (TP that does not divide its heads, ...), in the
    backend's one line (backend.sim.parallel.validate); "" when it can."""
    from backend.sim.parallel import validate
    try:
        validate(deployment, shape, model_name)
    except InputError as exc:
        return str(exc)
    return ""


def is_moe(shape) -> bool | None:
    """Whether a shape routes tokens to experts (None: not known)."""
    return None if shape is None else getattr(shape, "num_experts", 0) > 0
