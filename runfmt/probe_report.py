"""``probe --json``'s ``pool``: the KV block pool's buckets as one scrape shows them.

Each bucket is a ``runfmt.summary_server.Reading``'s fields (``value``, ``None`` when
unknown, its ``provenance`` and ``source``) with the ``unit`` the engine counts its pool in
(``blocks`` or ``tokens``) and, for a bucket the evidence only bounds, ``bounds`` (lower,
upper). ``probes.pool.PoolBreakdown.recorded`` builds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runfmt.codec import EMPTY, key


@dataclass(frozen=True)
class PoolBucket:
    """One bucket of the pool (or its total)."""

    value: float | None = None
    provenance: str | None = None
    source: str | None = None
    unit: str | None = None
    bounds: tuple[float, ...] | None = key(omit_none=True, default=None)
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class PoolReport:
    """The pool's three disjoint buckets and its usable size."""

    active_blocks: PoolBucket = field(default_factory=PoolBucket)
    reclaimable_blocks: PoolBucket = field(default_factory=PoolBucket)
    free_blocks: PoolBucket = field(default_factory=PoolBucket)
    total_blocks: PoolBucket = field(default_factory=PoolBucket)
    extra: Mapping[str, Any] = field(default_factory=EMPTY)
