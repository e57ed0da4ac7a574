"""The models already on this disk: where the tools users run keep them, and whether this engine runs each.

Looked for, without reading any weights (a GGUF's header, a safetensors header, a config.json):
  - the Hugging Face cache: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub
    (models--OWNER--NAME/snapshots/REVISION/: a config.json with safetensors, or GGUF files);
  - LM Studio's folders: ~/.lmstudio/models and ~/.cache/lm-studio/models (PUBLISHER/REPO/*.gguf);
  - Ollama's store: $OLLAMA_MODELS, else ~/.ollama/models (each manifest names its model layer's
    blob, which is a GGUF file);
  - llama.cpp's download cache: $LLAMA_CACHE, else ~/.cache/llama.cpp;
  - the folders the user added (`models --local --add-folder DIR`, remembered in model-folders.txt
    of the configuration folder), searched two levels deep.
Each entry says its architecture, parameters, format and bits per weight, file size, whether it
fits this machine's free memory, and, for one this engine cannot run, why (`reason`).
"""
from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from backend.errors import InputError
from backend.files import config_dir

FOLDERS_FILE = "model-folders.txt"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
# bytes per element of the safetensors dtypes
_SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                      "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


@dataclass(slots=True)
class FoundModel:
    path: str                    # what --model takes
    name: str
    where: str                   # Hugging Face cache, LM Studio, Ollama, llama.cpp cache, added folder
    arch: str                    # the config's architecture, or the GGUF's general.architecture
    params: int | None
    format: str                  # "GGUF Q4_1 + Q8_0 + F32", "safetensors BF16"
    bits_per_weight: float | None
    size_bytes: int
    fits: bool | None            # its weights fit this machine's free memory (None: unknown)
    reason: str = ""             # why this engine cannot run it ("" when it can)

    @property
    def runs(self) -> bool:
        return not self.reason


def hf_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME")
    return Path(home) / "hub" if home else Path.home() / ".cache" / "huggingface" / "hub"


def ollama_store() -> Path:
    return Path(os.environ.get("OLLAMA_MODELS") or Path.home() / ".ollama" / "models")


def llama_cpp_cache() -> Path:
    return Path(os.environ.get("LLAMA_CACHE") or Path.home() / ".cache" / "llama.cpp")


def added_folders() -> list[Path]:
    path = config_dir() / FOLDERS_FILE
    try:
        return [Path(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError:
        return []


def add_folder(folder: str) -> Path:
    """Remember a folder to search (written to the configuration folder); InputError if it is none."""
    from backend.files import write_files
    path = Path(folder).expanduser().resolve()
    if not path.is_dir():
        raise InputError(f"{folder}: not a folder")
    folders = [f for f in added_folders() if f != path] + [path]
    write_files(config_dir(), {FOLDERS_FILE: "".join(f"{f}\n" for f in folders)})
    return path


def find_models(free_bytes: int | None = None) -> list[FoundModel]:
    """Every model found in the places above, each once (by resolved path), in that order."""
    found: list[FoundModel] = []
    seen: set[Path] = set()

    def add(path: Path, where: str, name: str) -> None:
        key = path.resolve()
        if key in seen:
            return
        seen.add(key)
        entry = _inspect(path, where, name)
        if entry is not None:
            entry.fits = None if free_bytes is None else entry.size_bytes <= free_bytes
            found.append(entry)

    for snapshot in sorted(hf_cache().glob("models--*/snapshots/*")):
        repo = snapshot.parent.parent.name.removeprefix("models--").replace("--", "/")
        if (snapshot / "config.json").is_file():
            add(snapshot, "Hugging Face cache", repo)
        for gguf in sorted(snapshot.glob("*.gguf")):
            add(gguf, "Hugging Face cache", f"{repo}/{gguf.name}")
    for root in (Path.home() / ".lmstudio" / "models", Path.home() / ".cache" / "lm-studio" / "models"):
        for gguf in sorted(root.glob("*/*/*.gguf")):
            add(gguf, "LM Studio", f"{gguf.parent.parent.name}/{gguf.parent.name}/{gguf.name}")
    for manifest in sorted((ollama_store() / "manifests").glob("*/*/*/*")):
        blob = _ollama_blob(manifest)
        if blob is not None:
            add(blob, "Ollama", f"{manifest.parent.name}:{manifest.name}")
    for gguf in sorted(llama_cpp_cache().glob("*.gguf")):
        add(gguf, "llama.cpp cache", gguf.name)
    for folder in added_folders():
        for path in sorted([*folder.glob("*.gguf"), *folder.glob("*/*.gguf")]):
            add(path, "added folder", str(path.relative_to(folder)))
        for config in sorted([*folder.glob("config.json"), *folder.glob("*/config.json")]):
            add(config.parent, "added folder", config.parent.name)
    return found


def _ollama_blob(manifest: Path) -> Path | None:
    """The GGUF blob an Ollama manifest names as its model layer (None: not a manifest, or no blob)."""
    try:
        layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers", [])
        digest = next(layer["digest"] for layer in layers if layer.get("mediaType") == OLLAMA_MODEL_LAYER)
    except (OSError, ValueError, AttributeError, KeyError, StopIteration, TypeError):
        return None
    blob = ollama_store() / "blobs" / digest.replace(":", "-")
    return blob if blob.is_file() else None


def _inspect(path: Path, where: str, name: str) -> FoundModel | None:
    try:
        return _inspect_folder(path, where, name) if path.is_dir() else _inspect_gguf(path, where, name)
    except Exception as exc:  # noqa: BLE001 -- a broken file is listed with why, never a traceback
        size = path.stat().st_size if path.is_file() else 0
        return FoundModel(str(path), name, where, "?", None, "unreadable", None, size, None,
                          f"cannot be read: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")


def _inspect_gguf(path: Path, where: str, name: str) -> FoundModel:
    from backend.loaders.gguf import ARCHITECTURES
    from backend.loaders.gguf_file import read_gguf
    file = read_gguf(path)
    arch = file.fields.get("general.architecture", "?")
    counts = {t.name: math.prod(t.shape) for t in file.tensors.values()}
    elements = sum(counts.values())
    data_bytes = sum(t.data.nbytes for t in file.tensors.values())
    kinds: dict[str, int] = {}
    for t in file.tensors.values():
        kinds[t.tensor_type.name] = kinds.get(t.tensor_type.name, 0) + counts[t.name]
    fmt = "GGUF " + " + ".join(sorted(kinds, key=lambda k: -kinds[k]))
    reason = "" if arch in ARCHITECTURES else f"architecture {arch} is not supported yet"
    return FoundModel(str(path), name, where, arch, elements, fmt, data_bytes * 8 / elements if elements else None,
                      path.stat().st_size, None, reason)


def _inspect_folder(folder: Path, where: str, name: str) -> FoundModel:
    from backend.loaders.hf import ARCHITECTURES, shape_from_config
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    names = config.get("architectures") or ["?"]
    reason = ""
    try:
        shape_from_config(config, folder)
    except InputError as exc:
        reason = (f"architecture {names[0]} is not supported yet" if not set(names) & set(ARCHITECTURES)
                  else str(exc).removeprefix(f"{folder}: "))
    files = sorted(folder.glob("*.safetensors"))
    elements, data_bytes, dtypes = 0, 0, {}
    for f in files:
        for dtype, count in _safetensors_elements(f):
            elements += count
            data_bytes += count * _SAFETENSORS_BYTES.get(dtype, 0)
            dtypes[dtype] = dtypes.get(dtype, 0) + count
    if not files:
        reason = reason or "no *.safetensors weights in the folder"
    fmt = "safetensors " + " + ".join(sorted(dtypes, key=lambda k: -dtypes[k])) if dtypes else "config only"
    size = sum(f.stat().st_size for f in files)
    return FoundModel(str(folder), name, where, names[0], elements or None, fmt,
                      data_bytes * 8 / elements if elements else None, size, None, reason)


def _safetensors_elements(path: Path):
    """(dtype, elements) of each tensor in a safetensors file, from its JSON header alone."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    for key, meta in header.items():
        if key == "__metadata__":
            continue
        count = 1
        for dim in meta["shape"]:
            count *= dim
        yield meta["dtype"], count
