"""Deterministic output tokens: a stand-in for a model's next-token distribution.

The engine has no weights, yet its outputs must behave like a model's where benchmarks
and tests can tell: repeatable, independent of batching and chunking, ending in EOS at a
plausible length, with negative log-probabilities.

Each position has a *distribution* that depends only on the prompt and the position:
a top token with probability ``p0`` (0.35..0.99) and a geometric tail of alternatives,
the r-th with probability ``(1 - p0) / 2^r``. Greedy decoding (temperature 0) takes the
top token, so its output is a function of the prompt alone. Sampling draws from that
distribution (the top token's share sharpened or flattened by the temperature) with
uniform bits keyed by the request seed (or the engine seed when the request has none),
the prompt and the position. Whether and where EOS comes is decided once per request from
the same keys: a log-normal length, median 200 tokens.

Only word tokens (``FIRST_WORD_ID .. vocab_size - 1``) or EOS are emitted, so every
output decodes to clean text with the built-in tokenizer. Streams are read in position
order, so tokens are drawn 256 positions at a time with numpy and a token costs a couple
of list lookups; alternatives are built only when logprobs are asked for.
"""

from __future__ import annotations

import hashlib
import math
from array import array
from collections.abc import Iterator, Sequence
from statistics import NormalDist

import numpy as np

from simengine.tokenizer import EOS_ID, FIRST_WORD_ID

#: The most alternatives a request may ask for (OpenAI's ``top_logprobs`` limit).
MAX_TOP_LOGPROBS = 20

_MASK = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_BLOCK = 256
_MEDIAN_LENGTH = 200.0
_LENGTH_SIGMA = 1.0
_UNIT = 1.0 / (1 << 24)
_P0_SHIFT = np.uint64(64 - 12)
#: The top token's probability for each value of the top 12 bits of a position's mix.
_P0 = 0.35 + 0.64 * (np.arange(1 << 12) + 0.5) / (1 << 12)
_LOG_P0 = np.log(_P0)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over a uint64 array (wrapping): 64 well-mixed bits each.
    Works in place on ``z`` (a temporary of the caller's)."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


#: ``(i + 1) · golden`` for each index ``i`` of a block (wrapping).
_BLOCK_STEPS = np.arange(1, _BLOCK + 1, dtype=np.uint64) * _GOLDEN


def _position_bits(key: int, base: int) -> np.ndarray:
    """The mix of ``key + (position + 1) · golden`` for the block of positions starting
    at ``base``: wrapping, so it is ``(key + base · golden) + (i + 1) · golden``."""
    start = (key + base * int(_GOLDEN)) & _MASK
    return _mix(np.uint64(start) + _BLOCK_STEPS)


def _alternatives(z: np.ndarray, ranks: np.ndarray, words: int) -> np.ndarray:
    """The rank-th alternative token of each position: distinct from its top token and from
    the other ranks (rank · stride < words for every rank up to MAX_TOP_LOGPROBS)."""
    stride = np.uint64(1) + (z >> np.uint64(20)) % np.uint64(
        max(1, words // (MAX_TOP_LOGPROBS + 2))
    )
    return FIRST_WORD_ID + (z % np.uint64(words) + ranks * stride) % np.uint64(words)


def _alternative_logprobs(p0: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    return np.log((1.0 - p0) * 0.5**ranks)


def _rank_of(v: np.ndarray) -> np.ndarray:
    """Rank r ≥ 1 with probability 2^-r (the tail's shape) from 16 uniform bits ``v``."""
    v = v.astype(np.float64)
    bit_length = np.where(v > 0, np.floor(np.log2(np.maximum(v, 1.0))) + 1, 0)
    return np.minimum(MAX_TOP_LOGPROBS, 17 - bit_length).astype(np.uint64)


#: ``_rank_of`` for every 16-bit value, so a draw looks ranks up.
_RANKS = _rank_of(np.arange(1 << 16, dtype=np.uint64))


def _geometric_ranks(u: np.ndarray) -> np.ndarray:
    """The rank drawn by bits 8..23 of each of ``u``."""
    return _RANKS[(u >> np.uint64(8)) & np.uint64(0xFFFF)]


def _key(*parts: int) -> int:
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update((part & _MASK).to_bytes(8, "little"))
    return int.from_bytes(h.digest(), "little")


def prompt_key(prompt_token_ids: Sequence[int] | np.ndarray) -> int:
    """A 64-bit identity of a whole prompt (every token, not only full blocks)."""
    raw = np.asarray(prompt_token_ids, dtype=np.int64).tobytes()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little")


#: Drawn blocks by everything a draw depends on: ``(dist key, sample key, temperature,
#: words, EOS position, block base)`` → mix bits, tokens, log-probabilities. A stream is a
#: pure function of its keys, so requests repeating a prompt (and seed) repeat its draws:
#: a replay sends each of a hundred prompts thousands of times. The oldest entry goes
#: past ``DRAWS_KEPT`` (about 6 KiB each).
Draws = dict[tuple[int, int | None, float, int, int | None, int], tuple[np.ndarray, ...]]
DRAWS_KEPT = 4096


class TokenStream:
    """The outputs of one request, position by position; pure, so recomputation is free."""

    __slots__ = (
        "_arrays",
        "_base",
        "_dist_key",
        "_draws",
        "_logprobs",
        "_raw",
        "_sample_key",
        "_temperature",
        "_tokens",
        "_words",
        "_z",
        "eos_position",
    )

    def __init__(
        self,
        dist_key: int,
        sample_key: int | None,
        temperature: float,
        words: int,
        eos_position: int | None,
        draws: Draws | None = None,
    ) -> None:
        self._draws = draws
        self._dist_key = dist_key
        self._sample_key = sample_key
        self._temperature = temperature
        self._words = words
        #: Output index at which EOS is emitted, or None (``ignore_eos``).
        self.eos_position = eos_position
        self._base = -_BLOCK
        #: The drawn block's tokens and log-probabilities as arrays, and as lists once
        #: ``token`` or ``token_ids`` read them (``append_ids`` needs no lists).
        self._arrays: tuple[np.ndarray, np.ndarray] = (np.zeros(0), np.zeros(0))
        self._tokens: list[int] | None = None
        self._logprobs: list[float] | None = None
        #: The drawn block's tokens as int64 bytes, once ``append_ids`` reads them.
        self._raw: bytes | None = None
        self._z = np.zeros(0, dtype=np.uint64)

    def token(self, position: int) -> tuple[int, float]:
        """The token emitted at output index ``position`` and its log-probability."""
        i = position - self._base
        if not 0 <= i < _BLOCK:
            i = self._draw(position)
        if self._tokens is None or self._logprobs is None:
            self._tokens, self._logprobs = (a.tolist() for a in self._arrays)
        return self._tokens[i], self._logprobs[i]

    def token_ids(self, start: int, count: int) -> list[int]:
        """The tokens at output indices ``start .. start + count - 1`` (what ``token``
        returns one position at a time), drawn a block at a time."""
        out: list[int] = []
        for i, take in self._spans(start, count):
            if self._tokens is None:
                self._tokens = self._arrays[0].tolist()
            out.extend(self._tokens[i : i + take])
        return out

    def append_ids(self, out: array, start: int, count: int) -> None:
        """Append ``token_ids(start, count)`` to the int64 array ``out``, as bytes (token
        ids are below 2^63, so a uint64 block's bytes are the same int64 values)."""
        i = start - self._base
        if i >= 0 and i + count <= _BLOCK:  # within the drawn block (a decode's usual case)
            raw = self._raw
            if raw is None:
                raw = self._raw = self._arrays[0].tobytes()
            out.frombytes(raw[i * 8 : (i + count) * 8])
            return
        for i, take in self._spans(start, count):
            out.frombytes(self._arrays[0][i : i + take].tobytes())

    def _spans(self, start: int, count: int) -> Iterator[tuple[int, int]]:
        """Positions ``start .. start + count - 1`` as (index in the drawn block, how
        many), drawing each block as it is reached."""
        position, end = start, start + count
        while position < end:
            i = position - self._base
            if not 0 <= i < _BLOCK:
                i = self._draw(position)
            take = min(_BLOCK - i, end - position)
            yield i, take
            position += take

    def top_logprobs(self, position: int, k: int) -> list[tuple[int, float]]:
        """The ``k`` most likely tokens at ``position`` with their log-probabilities."""
        i = position - self._base
        if not 0 <= i < _BLOCK:
            i = self._draw(position)
        z = self._z[i : i + 1]
        idx = z >> _P0_SHIFT
        top = EOS_ID if position == self.eos_position else int(FIRST_WORD_ID + z[0] % self._words)
        ranks = np.arange(1, min(k, MAX_TOP_LOGPROBS), dtype=np.uint64)
        alts = _alternatives(z, ranks, self._words).tolist()
        lps = _alternative_logprobs(_P0[idx], ranks).tolist()
        return [(top, float(_LOG_P0[idx][0])), *zip(alts, lps, strict=True)][:k]

    def _draw(self, position: int) -> int:
        """Draw the block of ``_BLOCK`` positions holding ``position``; its index in it."""
        self._base = position - position % _BLOCK
        draws = self._draws
        if draws is None:
            self._z, tokens, logprobs = self._block()
        else:
            key = (
                self._dist_key, self._sample_key, self._temperature, self._words,
                self.eos_position, self._base,
            )  # fmt: skip
            block = draws.get(key)
            if block is None:
                block = draws[key] = self._block()
                if len(draws) > DRAWS_KEPT:
                    del draws[next(iter(draws))]
            self._z, tokens, logprobs = block
        self._arrays = (tokens, logprobs)
        self._tokens = self._logprobs = self._raw = None
        return position - self._base

    def _block(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The mix bits, tokens and log-probabilities of the block at ``_base``."""
        z = _position_bits(self._dist_key, self._base)
        idx = z >> _P0_SHIFT
        tokens = FIRST_WORD_ID + z % np.uint64(self._words)
        logprobs = _LOG_P0[idx]
        if self._sample_key is not None:
            p0 = _P0[idx]
            sharp = p0 ** (1.0 / self._temperature)
            p_top = sharp / (sharp + (1.0 - p0) ** (1.0 / self._temperature))
            u = _position_bits(self._sample_key, self._base)
            off_top = (u >> np.uint64(40)) * _UNIT >= p_top
            ranks = _geometric_ranks(u)
            tokens = np.where(off_top, _alternatives(z, ranks, self._words), tokens)
            logprobs = np.where(off_top, _alternative_logprobs(p0, ranks), logprobs)
        eos = self.eos_position
        if eos is not None and 0 <= eos - self._base < _BLOCK:
            tokens = tokens.astype(np.int64)  # a copy: ``FIRST_WORD_ID + ...`` may be uint64
            tokens[eos - self._base] = EOS_ID  # EOS is the top token there
            logprobs = logprobs.copy()
            logprobs[eos - self._base] = _LOG_P0[idx[eos - self._base]]
        return z, tokens, logprobs


class Sampler:
    """Builds each request's TokenStream from the engine seed, the request and its prompt."""

    def __init__(self, seed: int, vocab_size: int) -> None:
        self.seed = seed
        self.words = vocab_size - FIRST_WORD_ID
        #: Blocks drawn lately, shared by this sampler's streams (see ``Draws``).
        self.draws: Draws = {}

    def stream(
        self,
        prompt_token_ids: Sequence[int] | np.ndarray,
        *,
        temperature: float,
        seed: int | None,
        ignore_eos: bool,
        max_tokens: int,
    ) -> TokenStream:
        """The request's outputs; greedy ones depend on the prompt only."""
        dist_key = prompt_key(prompt_token_ids)
        greedy = temperature <= 0
        sample_key = None if greedy else _key(dist_key, self.seed if seed is None else seed, 1)
        eos = None
        if not ignore_eos:
            length = _natural_length(dist_key if greedy else sample_key)
            eos = length - 1 if length <= max_tokens else None
        return TokenStream(dist_key, sample_key, temperature, self.words, eos, self.draws)


def _natural_length(key: int) -> int:
    """A log-normal output length (median 200), deterministic for ``key``."""
    u = (_key(key, 0x5DEECE66D) >> 11) / float(1 << 53)
    u = min(max(u, 1e-12), 1 - 1e-12)
    z = NormalDist().inv_cdf(u)
    return max(1, round(_MEDIAN_LENGTH * math.exp(_LENGTH_SIGMA * z)))
