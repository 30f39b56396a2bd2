"""The built-in tokenizer: id layout, exact round trips, byte fallback."""

from __future__ import annotations

import numpy as np
import pytest

from simengine.tokenizer import (
    BOS_ID,
    BYTE_OFFSET,
    EOS_ID,
    FIRST_WORD_ID,
    Tokenizer,
    max_vocab_size,
)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer(32000)


def test_layout_specials_bytes_and_words(tok: Tokenizer) -> None:
    assert tok.encode("A") == [BYTE_OFFSET + ord("A")]
    assert tok.encode("x", add_bos=True) == [BOS_ID, BYTE_OFFSET + ord("x")]
    words = [tok.token_text(i) for i in range(FIRST_WORD_ID, tok.vocab_size)]
    assert len(set(words)) == len(words) == 32000 - FIRST_WORD_ID
    assert all(w[0] == " " and w[1:].isalpha() and w[1:].islower() for w in words)
    assert max(len(w) for w in words) <= 7
    assert words[:3] == [" ba", " be", " bi"]


def test_vocabulary_depends_on_size_only() -> None:
    small = Tokenizer(1000)
    assert small.decode(list(range(FIRST_WORD_ID, 1000))) == Tokenizer(32000).decode(
        list(range(FIRST_WORD_ID, 1000))
    )
    with pytest.raises(ValueError):
        Tokenizer(FIRST_WORD_ID)
    with pytest.raises(ValueError):
        Tokenizer(max_vocab_size() + 1)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Hello, world!",
        " ba kemo tivusa",
        " bax  ba\n\tbe",
        "naïve café 日本語 🙂",
        "\x00\x01 ba\x7f",
        "UPPER Case ba",
    ],
)
def test_decode_encode_round_trip(tok: Tokenizer, text: str) -> None:
    assert tok.decode(tok.encode(text)) == text


def test_word_ids_round_trip_exactly(tok: Tokenizer) -> None:
    rng = np.random.default_rng(7)
    ids = rng.integers(FIRST_WORD_ID, tok.vocab_size, size=5000).tolist()
    text = tok.decode(ids)
    assert tok.encode(text) == ids
    assert len(text.split(" ")) == len(ids) + 1


def test_vocabulary_words_become_one_token_other_text_bytes(tok: Tokenizer) -> None:
    ids = tok.encode(" ba hello")
    assert ids[0] == FIRST_WORD_ID
    assert ids[1:] == [BYTE_OFFSET + b for b in b" hello"]
    assert tok.encode("ba") == [BYTE_OFFSET + ord("b"), BYTE_OFFSET + ord("a")]


def test_specials_skipped_unless_asked(tok: Tokenizer) -> None:
    ids = [BOS_ID, FIRST_WORD_ID, EOS_ID]
    assert tok.decode(ids) == " ba"
    assert tok.decode(ids, skip_special_tokens=False) == "<s> ba</s>"


def test_invalid_utf8_decodes_with_replacement(tok: Tokenizer) -> None:
    assert tok.decode([BYTE_OFFSET + 0xE6, FIRST_WORD_ID]) == "\ufffd ba"
    assert tok.token_text(BYTE_OFFSET + 0xC3) == "\ufffd"


@pytest.mark.parametrize("bad", [-1, 32000, 10**9])
def test_out_of_vocabulary_ids_rejected(tok: Tokenizer, bad: int) -> None:
    with pytest.raises(ValueError, match=str(bad)):
        tok.decode([FIRST_WORD_ID, bad])
    assert tok.first_invalid([5, bad, 6]) == bad
    assert tok.first_invalid([5, 6]) is None
    assert tok.first_invalid([True]) is True
