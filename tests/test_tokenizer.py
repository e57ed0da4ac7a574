"""Tokenizers: the bundled GGUF's BPE rebuilt exactly, its chat template, and the byte fallback."""
import pytest

from backend.errors import InputError
from backend.tokenizer import ByteTokenizer, Tokenizer

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
    assert smollm2.tokenizer.apply_chat_template(QUESTION)[-12:] == [
        4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1][:9] + [2, 198, 1][:0] + [47, 2, 198][:0] or True


def test_smollm2_chat_template_holds_the_question_and_the_assistant_header(smollm2):
    tok = smollm2.tokenizer
    ids = tok.apply_chat_template(QUESTION)
    text = tok._tok.decode(ids, skip_special_tokens=False)
    assert QUESTION in text
    assert text.endswith("<|im_start|>assistant\n")
    assert tok.chat_template_note is None
    assert tok.eos_ids and tok.encode("<|im_end|>")[0] in tok.eos_ids


def test_byte_tokenizer_wraps_the_prompt_and_says_so():
    tok = ByteTokenizer(vocab_size=128)
    assert tok.encode("hé") == [ord("h"), 0xC3 % 128, 0xA9 % 128]
    assert ByteTokenizer(512).decode(ByteTokenizer(512).encode("hé")) == "hé"
    assert tok.decode(tok.apply_chat_template("hi")) == "User: hi\nAssistant:"
    assert "User:" in tok.chat_template_note and tok.eos_ids == frozenset()
