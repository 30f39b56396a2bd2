"""The embedded engine's built-in tokenizer: deterministic, dependency-free, exact.

The engine has no real model, so it needs no real vocabulary; what it needs is a
tokenizer that (a) turns any text into token ids and back *exactly*, (b) makes the
sampler's output read as words rather than byte soup, and (c) is cheap enough to run on
every request. The layout of the ids is shared with the sampler:

====================  =======================================================
id                    meaning
====================  =======================================================
0                     ``<unk>`` (also padding)
1                     ``<s>`` (BOS), prepended to text prompts
2                     ``</s>`` (EOS), the sampler's stop token
3 .. 258              the 256 byte values 0x00 .. 0xFF (byte fallback)
259 .. vocab_size-1   synthetic *word tokens*
====================  =======================================================

Word token ``259 + i`` is a leading space followed by one to three consonant-vowel
syllables (``" ba"``, ``" kemo"``, ``" tivusa"`` …): short, pronounceable and pairwise
distinct. They are numbered one-syllable words first, then two, then three, each group in
lexicographic syllable order, so the vocabulary depends on ``vocab_size`` only.

Encoding splits text into pieces, a *word piece* being a space followed by a maximal run of
lowercase ASCII letters. A word piece that is a vocabulary word becomes its id; everything
else (other pieces, and word pieces that are not in the vocabulary) becomes byte tokens of
its UTF-8 encoding. Hence ``decode(encode(t)) == t`` for every string, and
``encode(decode(ids)) == ids`` for any sequence of word-token ids (decoding word tokens
yields exactly the pieces that encoding splits back out). Decoding joins the bytes of every
token and reads them as UTF-8, replacing invalid sequences with U+FFFD as real
detokenizers do; special tokens are skipped unless asked for.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import product

UNK_ID = 0
BOS_ID = 1
EOS_ID = 2
BYTE_OFFSET = 3
FIRST_WORD_ID = BYTE_OFFSET + 256
DEFAULT_VOCAB_SIZE = 32000

_SPECIAL_TEXT = {UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_SYLLABLES = tuple(c + v for c, v in product(_CONSONANTS, _VOWELS))
_MAX_SYLLABLES = 3
_WORD_PIECE = re.compile(r"( [a-z]+)")


def max_vocab_size() -> int:
    """The largest vocabulary the syllable scheme can fill with distinct words."""
    return FIRST_WORD_ID + sum(len(_SYLLABLES) ** n for n in range(1, _MAX_SYLLABLES + 1))


def _words(count: int) -> list[str]:
    words: list[str] = []
    for n in range(1, _MAX_SYLLABLES + 1):
        for combo in product(_SYLLABLES, repeat=n):
            if len(words) == count:
                return words
            words.append(" " + "".join(combo))
    return words


class Tokenizer:
    """Text ↔ token ids for a vocabulary of ``vocab_size`` ids (see the module docstring)."""

    def __init__(self, vocab_size: int = DEFAULT_VOCAB_SIZE) -> None:
        if not FIRST_WORD_ID < vocab_size <= max_vocab_size():
            raise ValueError(
                f"vocab_size must be in {FIRST_WORD_ID + 1}..{max_vocab_size()}, got {vocab_size}"
            )
        self.vocab_size = vocab_size
        words = _words(vocab_size - FIRST_WORD_ID)
        self._word_id = {w: FIRST_WORD_ID + i for i, w in enumerate(words)}
        self._byte_ids = [[BYTE_OFFSET + b] for b in range(256)]
        # Every id's bytes; special tokens decode to nothing unless asked for.
        self._bytes: list[bytes] = [b"", b"", b""]
        self._bytes += [bytes([b]) for b in range(256)]
        self._bytes += [w.encode("ascii") for w in words]
        self._text: list[str] = [_SPECIAL_TEXT[i] for i in range(BYTE_OFFSET)]
        self._text += [bytes([b]).decode("latin-1") if b < 0x80 else "\ufffd" for b in range(256)]
        self._text += words

    # -- encoding ----------------------------------------------------------------------
    def encode(self, text: str, *, add_bos: bool = False) -> list[int]:
        """Token ids of ``text``; with ``add_bos`` the BOS id comes first."""
        ids = [BOS_ID] if add_bos else []
        word_id = self._word_id
        for i, piece in enumerate(_WORD_PIECE.split(text)):
            if not piece:
                continue
            wid = word_id.get(piece) if i % 2 else None
            if wid is None:
                ids.extend(BYTE_OFFSET + b for b in piece.encode("utf-8"))
            else:
                ids.append(wid)
        return ids

    # -- decoding ----------------------------------------------------------------------
    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        """The text of ``ids``; raises ``ValueError`` for an id outside the vocabulary."""
        if len(ids) == 1 and FIRST_WORD_ID <= ids[0] < self.vocab_size:
            return self._text[ids[0]]  # the streaming case: one sampled word per event
        table = self._bytes
        try:
            if ids and min(ids) < 0:
                raise IndexError
            if skip_special_tokens:
                raw = b"".join([table[i] for i in ids])
            else:
                raw = b"".join(
                    [_SPECIAL_TEXT[i].encode() if i < BYTE_OFFSET else table[i] for i in ids]
                )
        except (IndexError, TypeError):
            bad = self.first_invalid(ids)
            raise ValueError(f"token id {bad} is outside the vocabulary") from None
        return raw.decode("utf-8", "replace")

    def token_text(self, token_id: int) -> str:
        """How one token reads on its own (for logprobs): a byte ≥ 0x80 alone is U+FFFD."""
        return self._text[token_id]

    def first_invalid(self, ids: Sequence[object]) -> object | None:
        """The first element of ``ids`` that is not a valid token id, or ``None``."""
        size = self.vocab_size
        for i in ids:
            if type(i) is not int or not 0 <= i < size:
                return i
        return None
