"""Named, order-independent randomness: one seed, many independent streams.

A plan must not change its prompts because someone switched the arrival process, nor
its arrival times because a length distribution changed. Every random decision therefore
draws from its own stream, named by what it decides (``rng(seed, "arrivals")``,
``rng(seed, "lengths", "suffix")``), and every token run gets a key derived from what
it *is* (``derive_key(seed, "prefix", group)``) rather than from how many draws came
before it. Same seed and same names → same plan, whatever else changed.
"""

from __future__ import annotations

import hashlib

import numpy as np

_KEY_BITS = 63


def derive_key(seed: int, *parts: object) -> int:
    """A 63-bit key for the thing named by ``parts`` under ``seed`` (stable across runs)."""
    text = "\x1f".join([str(seed), *(str(p) for p in parts)]).encode()
    value = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")
    return value >> (64 - _KEY_BITS)


def rng(seed: int, *parts: object) -> np.random.Generator:
    """An independent generator for the decision named by ``parts``."""
    return np.random.Generator(np.random.PCG64(derive_key(seed, *parts)))
