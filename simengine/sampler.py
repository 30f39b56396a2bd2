"""Deterministic output tokens: a stand-in for a model's next-token distribution.

The engine has no weights, yet its outputs must behave like a model's where benchmarks
and tests can tell: repeatable, independent of batching and chunking, ending in EOS at a
plausible length, with negative log-probabilities.

Each position has a *distribution* that depends only on the prompt and the position:
a top token with probability ``p0`` and a geometric tail of alternatives. Greedy decoding
(temperature 0) takes the top token, so its output is a function of the prompt alone.
Sampling draws a rank from that distribution (sharpened or flattened by the temperature)
with a uniform number keyed by the request seed (or the engine seed when the request has
none), the prompt and the position. Whether and where EOS comes is decided once per
request from the same keys: a log-normal length, median 200 tokens.

Only word tokens (``FIRST_WORD_ID .. vocab_size - 1``) or EOS are emitted, so every
output decodes to clean text with the built-in tokenizer. A token costs one 64-bit mix
(a few hundred nanoseconds); alternatives are built only when logprobs are asked for.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

EOS_ID = 2
FIRST_WORD_ID = 259
#: The most alternatives a request may ask for (OpenAI's ``top_logprobs`` limit).
MAX_TOP_LOGPROBS = 20

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MEDIAN_LENGTH = 200.0
_LENGTH_SIGMA = 1.0
_UNIT = 1.0 / (1 << 24)
_P0_BITS = 12
#: log(p0) of the top token for each value of the top ``_P0_BITS`` bits of a position's
#: mix: p0 spans 0.35..0.99, so greedy tokens carry log-probabilities in (-1.2, 0).
_LOG_P0 = [math.log(0.35 + 0.64 * (i + 0.5) / (1 << _P0_BITS)) for i in range(1 << _P0_BITS)]


def _mix(z: int) -> int:
    """splitmix64's finaliser: 64 well-mixed bits from any 64-bit integer."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def _key(*parts: int) -> int:
    h = hashlib.blake2b(digest_size=8)
    for part in parts:
        h.update((part & _MASK).to_bytes(8, "little"))
    return int.from_bytes(h.digest(), "little")


def prompt_key(prompt_token_ids: Sequence[int]) -> int:
    """A 64-bit identity of a whole prompt (every token, not only full blocks)."""
    raw = np.asarray(prompt_token_ids, dtype=np.int64).tobytes()
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little")


class TokenStream:
    """The outputs of one request, position by position; pure, so recomputation is free."""

    __slots__ = ("_dist_key", "_inv_temp", "_sample_key", "_words", "eos_position")

    def __init__(
        self,
        dist_key: int,
        sample_key: int | None,
        temperature: float,
        words: int,
        eos_position: int | None,
    ) -> None:
        self._dist_key = dist_key
        self._sample_key = sample_key
        self._inv_temp = 1.0 / temperature if sample_key is not None else 0.0
        self._words = words
        #: Output index at which EOS is emitted, or None (``ignore_eos``).
        self.eos_position = eos_position

    def _top(self, position: int) -> tuple[int, float, int]:
        """The distribution at ``position``: top token, log of its probability, spare bits."""
        z = _mix((self._dist_key + (position + 1) * _GOLDEN) & _MASK)
        return FIRST_WORD_ID + z % self._words, _LOG_P0[z >> (64 - _P0_BITS)], z

    def _alternative(self, z: int, rank: int) -> int:
        """The rank-th alternative token: distinct from the top token and from each other."""
        top_index = z % self._words
        stride = 1 + (z >> 20) % max(1, self._words // (MAX_TOP_LOGPROBS + 2))
        return FIRST_WORD_ID + (top_index + rank * stride) % self._words

    def token(self, position: int) -> tuple[int, float]:
        """The token emitted at output index ``position`` and its log-probability."""
        top, logp0, z = self._top(position)
        if position == self.eos_position:
            return EOS_ID, logp0
        if self._sample_key is None:
            return top, logp0
        u = _mix((self._sample_key + (position + 1) * _GOLDEN) & _MASK)
        p0 = math.exp(logp0)
        sharp = p0**self._inv_temp
        p_top = sharp / (sharp + (1.0 - p0) ** self._inv_temp)
        if (u >> 40) * _UNIT < p_top:
            return top, logp0
        # Geometric rank: r with probability 2^-r, the tail's shape.
        rank = min(MAX_TOP_LOGPROBS, 17 - ((u >> 8) & 0xFFFF).bit_length())
        return self._alternative(z, rank), math.log((1.0 - p0) * 0.5**rank)

    def top_logprobs(self, position: int, k: int) -> list[tuple[int, float]]:
        """The ``k`` most likely tokens at ``position`` with their log-probabilities."""
        top, logp0, z = self._top(position)
        first = EOS_ID if position == self.eos_position else top
        tail = 1.0 - math.exp(logp0)
        out = [(first, logp0)]
        out.extend(
            (self._alternative(z, r), math.log(tail * 0.5**r))
            for r in range(1, min(k, MAX_TOP_LOGPROBS))
        )
        return out[:k]


class Sampler:
    """Builds each request's TokenStream from the engine seed, the request and its prompt."""

    def __init__(self, seed: int, vocab_size: int) -> None:
        self.seed = seed
        self.words = vocab_size - FIRST_WORD_ID

    def stream(
        self,
        prompt_token_ids: Sequence[int],
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
        return TokenStream(dist_key, sample_key, temperature, self.words, eos)


def _natural_length(key: int) -> int:
    """A log-normal output length (median 200), deterministic for ``key``."""
    u = (_mix(key ^ 0x5DEECE66D) >> 11) / float(1 << 53)
    u = min(max(u, 1e-12), 1 - 1e-12)
    z = NormalDist().inv_cdf(u)
    return max(1, round(_MEDIAN_LENGTH * math.exp(_LENGTH_SIGMA * z)))
