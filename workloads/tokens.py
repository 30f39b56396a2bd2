"""Keyed token runs: the token at position ``p`` of the run keyed ``k`` is a pure function.

Prompts are mostly repetition (a system prompt, a document, a trace's 512-token
blocks), so they are stored as keyed runs and only turned into token ids when a request
is sent or replayed through the prefix model. Two properties make that cheap and exact:

* **Counter-based.** A token is ``scramble(mix(k) + p)`` scaled into the vocabulary, so a
  whole prompt of many runs is materialised by one vectorised numpy pass, with no
  per-run generator to seed (seeding a generator costs more than drawing 512 tokens).
* **Prefix-consistent.** The first ``m`` tokens of a run do not depend on its length, so
  a partial last block of a trace is a prefix of the same block in full, and a run can
  be cut anywhere and still share its beginning with every other cut.
"""

from __future__ import annotations

import numpy as np

#: Token ids below this are avoided when drawing prompts: tokenizers keep special and
#: byte-fallback tokens at the low end of the vocabulary.
LOW_TOKEN_ID = 256

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_S27, _S29, _S30, _S31, _S32 = (np.uint64(s) for s in (27, 29, 30, 31, 32))


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser over a uint64 array (wrapping arithmetic, in place)."""
    x += _GOLDEN
    x ^= x >> _S30
    x *= _MUL1
    x ^= x >> _S27
    x *= _MUL2
    x ^= x >> _S31
    return x


def _scramble(x: np.ndarray) -> np.ndarray:
    """A lighter multiply-xorshift for per-token counters (their run starts are fully mixed).

    Per-token cost dominates materialising a trace, and only the high 32 bits are used.
    """
    x *= _MUL1
    x ^= x >> _S29
    x *= _MUL2
    return x


def lowest_token(vocab_size: int) -> int:
    """The smallest id a drawn token may take for a vocabulary of ``vocab_size`` ids."""
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be at least 2, got {vocab_size}")
    return min(LOW_TOKEN_ID, max(1, vocab_size // 8))


def keyed_tokens(
    keys: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, vocab_size: int
) -> np.ndarray:
    """Concatenated tokens of runs ``keys[i]`` from position ``offsets[i]``, ``lengths[i]`` long."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    low = lowest_token(vocab_size)
    starts = _mix(np.asarray(keys, dtype=np.uint64).copy())
    starts += np.asarray(offsets, dtype=np.uint64)
    starts -= (np.cumsum(lengths) - lengths).astype(np.uint64)  # wraps; undone by arange
    counter = np.repeat(starts, lengths)
    counter += np.arange(total, dtype=np.uint64)
    high = _scramble(counter)
    high >>= _S32
    high *= np.uint64(vocab_size - low)
    high >>= _S32
    tokens = high.view(np.int64)
    tokens += low
    return tokens
