"""Tokenizers: from a GGUF file's metadata, from a Hugging Face folder, or bytes for random-weight shapes.

transformers is imported only when a Hugging Face folder (or an unusual GGUF) is loaded, so the
window opens fast; the bundled GGUF builds a `tokenizers` BPE from its own vocabulary and merges.
transformers is optional (the `hf` extra); without it those tokenizers fail in one line naming it.
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from datetime import datetime
from pathlib import Path

from backend.errors import InputError

# Tokens that end a turn or a document in the common chat formats; any in the vocabulary stops generation.
_END_MARKERS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|endoftext|>", "</s>",
                "<|end|>", "<end_of_turn>")
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# GGUF token types (llama.cpp's llama_token_type) that are whole special tokens, never split.
_CONTROL, _USER_DEFINED = 3, 4


class Tokenizer(ABC):
    """encode / decode / chat template, whatever the source."""

    name: str
    vocab_size: int
    eos_ids: frozenset[int]
    chat_template_note: str | None = None  # set when apply_chat_template is not the model's own template

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of the text (with a BOS where the model wants one)."""

    @abstractmethod
    def decode(self, ids: list[int]) -> str:
        """Text of the ids, special tokens left out."""

    @abstractmethod
    def apply_chat_template(self, user_text: str) -> list[int]:
        """One user turn and the assistant header, tokenized, ready to prefill."""

    @staticmethod
    def from_gguf(fields: dict, path: Path) -> Tokenizer:
        """fields: the GGUF metadata (key -> decoded value)."""
        model, pre = fields.get("tokenizer.ggml.model"), fields.get("tokenizer.ggml.pre", "default")
        if model == "gpt2" and pre in _PRE_TOKENIZERS:
            return _BPETokenizer(fields, path.name)
        return _TransformersTokenizer(path.parent, gguf_file=path.name)

    @staticmethod
    def from_hf_folder(folder: Path) -> Tokenizer:
        names = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
        if not any((folder / n).is_file() for n in names):
            tok = ByteTokenizer(_folder_vocab_size(folder))
            tok.name = f"bytes (no tokenizer files in {folder.name})"
            return tok
        return _TransformersTokenizer(folder)


class ByteTokenizer(Tokenizer):
    """For random weights: ids are byte values (mod vocab). The generated text is noise anyway."""

    chat_template_note = "no chat template: the prompt is wrapped as 'User: ...\\nAssistant:'"

    def __init__(self, vocab_size: int):
        self.name = "bytes"
        self.vocab_size = vocab_size
        self.eos_ids = frozenset()  # random weights would stop at arbitrary points

    def encode(self, text: str) -> list[int]:
        return [b % self.vocab_size for b in text.encode("utf-8")]

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def apply_chat_template(self, user_text: str) -> list[int]:
        return self.encode(f"User: {user_text}\nAssistant:")


def _folder_vocab_size(folder: Path) -> int:
    config = json.loads((folder / "config.json").read_text())
    return int(config["vocab_size"])


def _render_chat(template: str, user_text: str, bos: str, eos: str) -> str:
    """Render a Hugging Face chat template the way transformers does (sandboxed jinja2)."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals |= {"raise_exception": raise_exception, "strftime_now": lambda fmt: datetime.now().strftime(fmt)}
    try:
        return env.from_string(template).render(messages=[{"role": "user", "content": user_text}],
                                                add_generation_prompt=True, bos_token=bos, eos_token=eos)
    except jinja2.exceptions.TemplateError as exc:
        raise InputError(f"the model's chat template failed: {exc}") from None


def _byte_level(split: str | None):
    from tokenizers import Regex, pre_tokenizers

    if split is None:
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)  # GPT-2's own split
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def _smollm():
    from tokenizers import pre_tokenizers

    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), _byte_level(None)])


# llama.cpp's tokenizer.ggml.pre -> the matching pre-tokenizer (and whether BPE skips merges for whole words).
_PRE_TOKENIZERS = {
    "default": (lambda: _byte_level(None), False), "gpt2": (lambda: _byte_level(None), False),
    "smollm": (_smollm, False), "starcoder": (_smollm, False), "refact": (_smollm, False),
    "llama-bpe": (lambda: _byte_level(_LLAMA3_SPLIT), True), "qwen2": (lambda: _byte_level(_QWEN2_SPLIT), False),
}


class _BPETokenizer(Tokenizer):
    """Byte-level BPE rebuilt from a GGUF's tokenizer.ggml.* arrays."""

    def __init__(self, fields: dict, file_name: str):
        from tokenizers import AddedToken, decoders, models
        from tokenizers import Tokenizer as RustTokenizer

        tokens: list[str] = fields["tokenizer.ggml.tokens"]
        merges = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"]]
        make_pre, ignore_merges = _PRE_TOKENIZERS[fields.get("tokenizer.ggml.pre", "default")]
        self._tok = RustTokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges, ignore_merges=ignore_merges))
        self._tok.pre_tokenizer = make_pre()
        self._tok.decoder = decoders.ByteLevel()
        types = fields.get("tokenizer.ggml.token_type") or []
        special = [t for t, kind in zip(tokens, types) if kind in (_CONTROL, _USER_DEFINED)]
        self._tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])

        self.name = f"{file_name} ({fields.get('tokenizer.ggml.pre', 'gpt2')} BPE)"
        self.vocab_size = len(tokens)
        bos = fields.get("tokenizer.ggml.bos_token_id")
        eos = fields.get("tokenizer.ggml.eos_token_id")
        self._bos = tokens[bos] if bos is not None else ""
        self._eos = tokens[eos] if eos is not None else ""
        self._add_bos = bool(fields.get("tokenizer.ggml.add_bos_token")) and bos is not None
        self._template = fields.get("tokenizer.chat_template")
        ends = {fields.get(k) for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                        "tokenizer.ggml.eom_token_id")} - {None}
        ends |= {tokens.index(m) for m in _END_MARKERS if m in special}
        self.eos_ids = frozenset(ends)

    def encode(self, text: str) -> list[int]:
        ids = self._tok.encode(text, add_special_tokens=False).ids
        return [self._tok.token_to_id(self._bos)] + ids if self._add_bos else ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=True)

    def apply_chat_template(self, user_text: str) -> list[int]:
        if not self._template:
            raise InputError(f"{self.name}: the model has no chat template (tokenizer.chat_template)")
        # The template writes the BOS itself where the model wants one.
        return self._tok.encode(_render_chat(self._template, user_text, self._bos, self._eos),
                                add_special_tokens=False).ids


# transformers is an optional dependency (the `hf` extra): most models never need it.
HF_EXTRA_HINT = "pip install 'phasescope[hf]' (or pip install transformers)"


def _auto_tokenizer(source: Path):
    """transformers' AutoTokenizer, or an InputError in one line saying what to install."""
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "transformers":
            raise InputError(f"{source}: this tokenizer needs transformers, which is not installed; "
                             f"install it with {HF_EXTRA_HINT}") from None
        raise InputError(f"{source}: this tokenizer needs transformers, which failed to import "
                         f"({type(exc).__name__}: {exc})".splitlines()[0]) from None
    return AutoTokenizer


class _TransformersTokenizer(Tokenizer):
    """transformers' AutoTokenizer: Hugging Face folders, and GGUF tokenizers we do not rebuild ourselves."""

    def __init__(self, folder: Path, gguf_file: str | None = None):
        source = folder / gguf_file if gguf_file else folder
        AutoTokenizer = _auto_tokenizer(source)
        try:
            self._tok = AutoTokenizer.from_pretrained(str(folder), gguf_file=gguf_file) if gguf_file \
                else AutoTokenizer.from_pretrained(str(folder))
        except Exception as exc:  # noqa: BLE001 -- transformers raises many kinds; the user needs the file and reason
            raise InputError(f"{source}: cannot load the tokenizer ({type(exc).__name__}: {exc})".splitlines()[0]) from None
        self.name = f"{source.name} ({type(self._tok).__name__})"
        self.vocab_size = len(self._tok)
        ends = set()
        if self._tok.eos_token_id is not None:
            ends.add(self._tok.eos_token_id)
        added = self._tok.get_added_vocab()
        ends |= {added[m] for m in _END_MARKERS if m in added}
        generation = folder / "generation_config.json"
        if generation.is_file():
            eos = json.loads(generation.read_text()).get("eos_token_id")
            ends |= set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        self.eos_ids = frozenset(ends)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text)

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=True)

    def apply_chat_template(self, user_text: str) -> list[int]:
        if not self._tok.chat_template:
            raise InputError(f"{self.name}: the model has no chat template")
        text = self._tok.apply_chat_template([{"role": "user", "content": user_text}],
                                             add_generation_prompt=True, tokenize=False)
        return self._tok.encode(text, add_special_tokens=False)
