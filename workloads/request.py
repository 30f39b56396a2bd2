"""What a request sends: prompts as lazy token segments, and the request itself.

Prompts are kept as *segments* rather than token lists because real workloads are
large (the Mooncake conversation trace is ~10^8 prompt tokens) and mostly repetition:
a shared system prompt, a document, a conversation history. A segment is either a run of
tokens drawn deterministically from a seed key, or explicit tokens (text a server
returned in an earlier turn). Equal keys give equal tokens, which is exactly what makes
prefixes shared, and tokens are only materialised when a request is sent or replayed
through the prefix model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from workloads.prefix import CacheScope
from workloads.tokens import LOW_TOKEN_ID, keyed_tokens

__all__ = ["LOW_TOKEN_ID", "Prompt", "RequestSpec", "Segment"]

_KEY_MASK = (1 << 64) - 1


@dataclass(frozen=True)
class Segment:
    """A run of prompt tokens: ``length`` tokens drawn from ``key``, or ``tokens`` as given."""

    length: int
    key: int | None = None
    tokens: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if (self.key is None) == (self.tokens is None):
            raise ValueError("a segment has either a seed key or explicit tokens")
        if self.tokens is not None and len(self.tokens) != self.length:
            raise ValueError("segment length must equal the number of explicit tokens")
        if self.length < 0:
            raise ValueError(f"segment length must be >= 0, got {self.length}")

    def token_ids(self, vocab_size: int) -> np.ndarray:
        return Prompt((self,)).token_ids(vocab_size)


@dataclass(frozen=True)
class Prompt:
    """A prompt as an ordered tuple of segments."""

    segments: tuple[Segment, ...]

    @classmethod
    def of_tokens(cls, tokens: Sequence[int]) -> Prompt:
        return cls((Segment(len(tokens), tokens=tuple(int(t) for t in tokens)),))

    @cached_property
    def _length(self) -> int:
        return sum(s.length for s in self.segments)

    def __len__(self) -> int:
        return self._length

    def token_ids(self, vocab_size: int, start: int = 0) -> np.ndarray:
        """The prompt's tokens from position ``start`` for a vocabulary of ``vocab_size`` ids."""
        pieces: list[tuple[Segment, int]] = []
        pos = 0
        for s in self.segments:
            if pos + s.length > start:
                pieces.append((s, max(0, start - pos)))
            pos += s.length
        keyed = [(s, skip) for s, skip in pieces if s.key is not None]
        drawn = keyed_tokens(
            np.array([s.key & _KEY_MASK for s, _ in keyed], dtype=np.uint64),
            np.array([skip for _, skip in keyed], dtype=np.uint64),
            np.array([s.length - skip for s, skip in keyed], dtype=np.int64),
            vocab_size,
        )
        if len(keyed) == len(pieces):
            return drawn
        out = np.empty(max(0, len(self) - start), dtype=np.int64)
        at = used = 0
        for s, skip in pieces:
            n = s.length - skip
            if s.tokens is None:
                out[at : at + n] = drawn[used : used + n]
                used += n
            else:
                out[at : at + n] = s.tokens[skip:]
            at += n
        return out

    def extended(self, *more: Segment) -> Prompt:
        return Prompt(self.segments + tuple(s for s in more if s.length))


@dataclass(frozen=True)
class RequestSpec:
    """One request of a plan, everything decided before sending (frozen: a derived
    request is a ``dataclasses.replace`` copy).

    ``intended_s`` is the open-loop send time from t=0; ``None`` means the request is
    released by something at run time (a closed-loop user, the previous turn of a
    session). ``text`` is set when the plan sends text of an exact token count instead
    of token ids. ``expected_cached_tokens`` is the prefix oracle's, set once on a
    copy of the plan before it is sent (``None``: not known before the run).
    """

    id: str
    prompt: Prompt
    max_tokens: int
    intended_s: float | None = None
    kind: str = "request"
    group: int | None = None
    tenant: str | None = None
    lora: str | None = None
    session: int | None = None
    turn: int | None = None
    think_time_s: float = 0.0
    warmup: bool = False
    expected_cached_tokens: int | None = None
    text: str | None = None
    #: A chat conversation sent as it is (a dataset's); ``prompt`` holds its template ids.
    messages: tuple[dict, ...] | None = None
    #: A later turn whose ``prompt`` already holds its session's history (a dataset's
    #: recorded conversation): released by its session, but nothing is composed at run time.
    carries_history: bool = False

    @property
    def composes_history(self) -> bool:
        """A later turn of a session whose prompt the load generator composes at run time
        from the server's answers (unknown before the run)."""
        return self.session is not None and bool(self.turn) and not self.carries_history

    @property
    def prompt_len(self) -> int:
        return len(self.prompt)

    def scope(self, model: str = "") -> CacheScope:
        """The cache identity a server would give this request."""
        return CacheScope(model=model, lora=self.lora, cache_salt=self.tenant)
