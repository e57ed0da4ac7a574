"""Tokenizers: the bundled GGUF's BPE rebuilt exactly, its chat template, and the byte fallback."""
import sys

import pytest

from backend.errors import InputError
from backend.loaders.tokenizer import ByteTokenizer, Tokenizer

QUESTION = "What is the capital of France?"


def test_smollm2_round_trips_ascii(smollm2):
    tok = smollm2.tokenizer
    text = "Prefill is compute-bound; decode is memory-bound. 12345 + 678 = 13023!\n\tTabs  and  spaces."
    ids = tok.encode(text)
    assert all(0 <= i < tok.vocab_size for i in ids)
    assert tok.decode(ids) == text
    assert len(ids) < len(text) / 2  # real merges, not bytes


def test_smollm2_encodes_like_transformers(smollm2):
    # Expected ids from transformers' own GGUF tokenizer for this file (AutoTokenizer, gguf_file=...).
    assert smollm2.tokenizer.encode("Hello world, 12345 test") == [19556, 905, 28, 216, 33, 34, 35, 36, 37, 1028]
    assert smollm2.tokenizer.apply_chat_template(QUESTION) == [
        1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182, 2,
        198, 1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198]


def test_smollm2_chat_template_holds_the_question_and_the_assistant_header(smollm2):
    tok = smollm2.tokenizer
    ids = tok.apply_chat_template(QUESTION)
    question = tok.encode(QUESTION)
    assert any(ids[i:i + len(question)] == question for i in range(len(ids)))
    header = tok.encode("<|im_start|>assistant\n")  # special tokens in text are matched whole
    assert header[0] == 1 and ids[-len(header):] == header
    assert tok.chat_template_note is None
    assert tok.eos_ids and tok.encode("<|im_end|>") == [2] and 2 in tok.eos_ids


def test_byte_tokenizer_wraps_the_prompt_and_says_so():
    tok = ByteTokenizer(vocab_size=128)
    assert tok.encode("hé") == [ord("h"), 0xC3 % 128, 0xA9 % 128]
    assert ByteTokenizer(512).decode(ByteTokenizer(512).encode("hé")) == "hé"
    assert tok.decode(tok.apply_chat_template("hi")) == "User: hi\nAssistant:"
    assert "User:" in tok.chat_template_note and tok.eos_ids == frozenset()


def save_hf_tokenizer(folder, chat_template: str | None):
    """A small byte-level BPE saved the way a Hugging Face model folder holds it."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer as RustTokenizer, decoders, models, pre_tokenizers, trainers

    rust = RustTokenizer(models.BPE())
    rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    rust.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    rust.train_from_iterator(["the capital of France is Paris", "what is the capital"] * 20, trainer)
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=rust, eos_token="<|im_end|>")
    if chat_template:
        tok.chat_template = chat_template
    folder.mkdir()
    tok.save_pretrained(folder)
    (folder / "config.json").write_text('{"vocab_size": 300}')
    return Tokenizer.from_hf_folder(folder)


def test_hf_folder_tokenizer_uses_its_chat_template(tmp_path):
    template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    tok = save_hf_tokenizer(tmp_path / "with", template)
    assert tok.decode(tok.encode("the capital of France")) == "the capital of France"
    ids = tok.apply_chat_template("what is the capital")
    assert tok.decode(ids) == "user\nwhat is the capital\nassistant\n"  # special tokens are dropped in text
    assert ids[0] == tok.encode("<|im_start|>")[0] and tok.encode("<|im_end|>")[0] in tok.eos_ids


def test_missing_chat_template_is_an_input_error(tmp_path):
    tok = save_hf_tokenizer(tmp_path / "without", None)
    with pytest.raises(InputError, match="no chat template"):
        tok.apply_chat_template("hi")


def test_folder_without_tokenizer_files_falls_back_to_bytes(tmp_path):
    (tmp_path / "config.json").write_text('{"vocab_size": 100}')
    tok = Tokenizer.from_hf_folder(tmp_path)
    assert isinstance(tok, ByteTokenizer) and tok.vocab_size == 100 and "no tokenizer files" in tok.name


@pytest.mark.parametrize("gguf", [False, True], ids=["hf-folder", "gguf"])
def test_without_transformers_the_tokenizer_says_which_extra_to_install(tmp_path, monkeypatch, gguf):
    # transformers is optional (the `hf` extra); None in sys.modules makes its import fail as if absent.
    monkeypatch.setitem(sys.modules, "transformers", None)
    if gguf:   # a GGUF whose tokenizer we do not rebuild ourselves goes to transformers too
        path = tmp_path / "model.gguf"
        call = lambda: Tokenizer.from_gguf({"tokenizer.ggml.model": "llama"}, path)
    else:
        (tmp_path / "tokenizer.json").write_text("{}")
        path, call = tmp_path, lambda: Tokenizer.from_hf_folder(tmp_path)
    with pytest.raises(InputError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert "transformers" in message and "phasescope[hf]" in message
