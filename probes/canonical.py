"""The canonical server series every flavour is normalised to.

Engines name the same facts differently (vLLM's ``num_requests_running``, SGLang's
``num_running_reqs``, llama.cpp's ``requests_processing``). The diagnosis and the reports
speak only these canonical names (declared in ``runfmt.series``, which this module
re-exports with the values' provenance), and every value carries its provenance so that a
report can say *how* it knows: read from a series (``measured``), computed from other
series through a model (``derived``), or not exposed at all (``unknown`` — never 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from runfmt.series import (
    HISTOGRAM_UNITS,
    HISTOGRAMS,
    HIT_TIERS,
    SERIES,
    STEP_KINDS,
    Hist,
    Kind,
    Series,
)

if TYPE_CHECKING:
    from runfmt.summary_server import Reading

__all__ = [
    "HISTOGRAMS",
    "HISTOGRAM_UNITS",
    "HIT_TIERS",
    "POOL_BUCKETS",
    "SERIES",
    "STEP_KINDS",
    "Hist",
    "Histogram",
    "Kind",
    "Provenance",
    "Series",
    "Value",
]


class Provenance(StrEnum):
    MEASURED = "measured"
    DERIVED = "derived"
    UNKNOWN = "unknown"


#: Block-pool buckets an engine may expose directly (disjoint buckets).
POOL_BUCKETS: tuple[str, ...] = ("active", "reclaimable", "free")


@dataclass(frozen=True)
class Value:
    """One canonical value and how we know it; ``value`` is None exactly when unknown."""

    value: float | None
    provenance: Provenance
    source: str | None = None

    @classmethod
    def unknown(cls, reason: str) -> Value:
        return cls(None, Provenance.UNKNOWN, reason)

    @property
    def known(self) -> bool:
        return self.value is not None

    def reading(self) -> Reading:
        """This value as the summary's ``server`` section holds it (the summary's types
        imported here: the probe process reads values and writes no summary)."""
        from runfmt.summary_server import Reading

        return Reading(self.value, str(self.provenance), self.source)


@dataclass(frozen=True)
class Histogram:
    """A cumulative Prometheus histogram: upper bounds (ending at +Inf) and counts."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    count: float
    sum: float

    def minus(self, earlier: Histogram) -> Histogram:
        """Observations made since ``earlier``; a reset (count fell, buckets changed)
        means everything in ``self`` is new, as Prometheus's ``increase`` assumes."""
        if (
            earlier.bounds != self.bounds
            or self.count < earlier.count
            or any(a < b for a, b in zip(self.cumulative, earlier.cumulative, strict=True))
        ):
            return self
        return Histogram(
            self.bounds,
            tuple(a - b for a, b in zip(self.cumulative, earlier.cumulative, strict=True)),
            self.count - earlier.count,
            self.sum - earlier.sum,
        )

    def plus(self, other: Histogram) -> Histogram:
        """Sum of two histograms with the same buckets (replicas, successive windows)."""
        if other.bounds != self.bounds:
            raise ValueError("cannot add histograms with different buckets")
        return Histogram(
            self.bounds,
            tuple(a + b for a, b in zip(self.cumulative, other.cumulative, strict=True)),
            self.count + other.count,
            self.sum + other.sum,
        )

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    def bucket(self, q: float) -> tuple[float, float] | None:
        """``(lower, upper)`` bounds of the bucket holding the q-quantile (upper ``inf`` past
        the last finite bound); None when the histogram is empty."""
        found = self._locate(q)
        return None if found is None else (found[0], found[1])

    def _locate(self, q: float) -> tuple[float, float, float, float, float] | None:
        """The q-quantile's bucket: its bounds, the counts below and up to it, the rank."""
        total = self.cumulative[-1] if self.cumulative else 0.0
        if total <= 0:
            return None
        rank = q * total
        lower_bound, lower_count = 0.0, 0.0
        for bound, cum in zip(self.bounds, self.cumulative, strict=True):
            if cum >= rank:
                return lower_bound, bound, lower_count, cum, rank
            lower_bound, lower_count = bound, cum
        return lower_bound, math.inf, lower_count, lower_count, rank

    def bucket_quantile(self, q: float) -> float | None:
        """The q-quantile by linear interpolation inside the bucket that holds it — the
        estimate PromQL's ``histogram_quantile`` makes. Falls in +Inf → the last finite
        bound (a floor, not a value). None when the histogram is empty."""
        found = self._locate(q)
        if found is None:
            return None
        lower_bound, bound, lower_count, cum, rank = found
        if math.isinf(bound):
            return lower_bound
        if cum == lower_count:
            return bound
        return lower_bound + (bound - lower_bound) * (rank - lower_count) / (cum - lower_count)
