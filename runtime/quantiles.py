"""The one quantile definition, and the named summary statistics built on it.

Every quantile the project computes from samples is this module's, so a "p99" means the
same number in ``summary.json``, the comparison of two runs, the A/B verdicts, the
simulator's and the calibration's figures, the workload statistics and the report:
numpy's default (linear interpolation between order statistics) over the finite values.
Unknown values (NaN) are not samples: a request with one output token has no TPOT, and
it must not count as a zero. A leaf module (numpy only), so that the simulator and the
workloads, which import no probes, use it as well; ``tests/runtime/test_one_quantile.py``
fails on a numpy or pandas quantile anywhere else.

One other definition is kept, by name, for the one caller that needs it:
``inverted_cdf_quantiles`` (values of the sample itself, never between two). A server's
histogram has buckets, not samples: its estimate is ``probes.canonical.Histogram``'s
``bucket_quantile``, PromQL's rule.

**The mean** is the exactly rounded one: the sum of the values computed exactly (each float
is an integer times a power of two; ``exact_sum``) and divided by the count once. It does
not depend on the order the values come in, so a mean taken over a table read a row group
at a time (``Selection``) is the same number, to the last bit, as over the whole column.

**In bounded memory** (``Selection``, ``select_passes``): the same statistics over values
that come in parts (a run's row groups), read again for each pass, never all held at once.
Pass 1 counts them and takes their exact sum, minimum and maximum; each further pass
histograms the values inside the interval that holds each wanted order statistic (numpy's
neighbours of the quantile's virtual index ``(n - 1) q``) and narrows it to the one bucket
holding that rank, until the bucket holds at most ``SELECT_CAP`` values, which the last
pass keeps and sorts. The quantile is then ``quantile`` of the two neighbours at the
fractional part of the virtual index: numpy's own interpolation, so the figure is the one
``describe`` gives over the whole column, bit for bit
(``tests/runtime/test_streamed_quantiles.py``).

numpy is imported by the functions, not the module: the CLI shows the statistics' names
in its ``--help`` (``compare --metric``), which must not wait for numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

#: Quantile statistics by name, as percentages.
QUANTILES: dict[str, float] = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}

#: Every statistic a metric can be summarised by.
STATISTICS: tuple[str, ...] = ("mean", *QUANTILES)


def finite(values: Iterable[float] | np.ndarray) -> np.ndarray:
    """The finite values as a float array (NaN/inf dropped: unknown is not a sample)."""
    import numpy as np

    arr = np.asarray(values, dtype=float).ravel()
    return arr[np.isfinite(arr)]


def finite_number(value: object) -> float | None:
    """One value as a float when it is a finite number (a document's figure), else
    ``None`` (absent, null, NaN, infinite, or not a number at all)."""
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def quantile(values: Iterable[float] | np.ndarray, q: float) -> float:
    """The ``q`` quantile (0 to 1) of the finite values, numpy's linear interpolation; NaN
    for no samples. Every quantile a report, a view or a check shows is this one."""
    import numpy as np

    arr = finite(values)
    return float(np.quantile(arr, q)) if arr.size else float("nan")


def quantiles(values: Iterable[float] | np.ndarray, qs: Iterable[float]) -> list[float]:
    """``quantile`` at each of ``qs``, sorting the values once."""
    import numpy as np

    arr, levels = finite(values), list(qs)
    if arr.size == 0:
        return [float("nan")] * len(levels)
    return [float(v) for v in np.quantile(arr, levels)]


def statistic(values: Iterable[float] | np.ndarray, name: str) -> float:
    """One named statistic (``mean`` or a key of ``QUANTILES``); NaN for no samples."""
    import numpy as np

    if name not in STATISTICS:
        raise KeyError(f"unknown statistic {name!r}; known: {', '.join(STATISTICS)}")
    arr = finite(values)
    if arr.size == 0:
        return float("nan")
    if name == "mean":
        return mean(arr)
    return float(np.percentile(arr, QUANTILES[name]))


def describe(values: Iterable[float] | np.ndarray) -> dict[str, float | int | None]:
    """Mean, p50/p90/p95/p99/p99.9 and the sample count; ``None`` values when empty."""
    import numpy as np

    arr = finite(values)
    if arr.size == 0:
        return {name: None for name in STATISTICS} | {"count": 0}
    quantiles = np.percentile(arr, list(QUANTILES.values()))
    out: dict[str, float | int | None] = {"mean": mean(arr)}
    out.update({name: float(q) for name, q in zip(QUANTILES, quantiles, strict=True)})
    out["count"] = int(arr.size)
    return out


def inverted_cdf_quantiles(values: Iterable[float] | np.ndarray, qs: Iterable[float]) -> np.ndarray:
    """At each of ``qs``, the smallest finite value whose share of values at or below it
    reaches the level (numpy's ``inverted_cdf``): always a value of the sample, never one
    between two. Not a figure anyone is shown: ``diagnose.resample`` spreads the grid it
    locates resampled quantiles on with it, and a grid point that is a sample value is an
    order statistic, counted exactly at that point. An array (a grid has thousands of
    levels); NaN at each level when no samples."""
    import numpy as np

    arr, levels = finite(values), np.asarray(list(qs), dtype=float)
    if arr.size == 0:
        return np.full(levels.shape, np.nan)
    return np.quantile(arr, levels, method="inverted_cdf")


#: The exponent of the smallest float64 unit (a subnormal's last bit) once its 53-bit
#: integer mantissa is taken out: every finite float is ``m * 2**e`` with ``e >= _BASE``.
_BASE = -1074 - 53
#: Mantissas are summed in two halves of this many bits, so that the sums stay exact.
_HALF = 26


def exact_sum(values: np.ndarray) -> int:
    """The exact sum of finite floats, as the integer ``S`` with sum ``== S * 2**_BASE``
    (``exact_mean`` rounds it once). Vectorised: each value's 53-bit integer mantissa is
    split in two halves summed per binary exponent (``bincount`` sums integers below
    2**53 exactly), and the few per-exponent totals are added as Python integers."""
    import numpy as np

    arr = np.asarray(values, dtype=float).ravel()
    if arr.size == 0:
        return 0
    mantissa, exponent = np.frexp(arr)
    whole = (mantissa * 2.0**53).astype(np.int64)  # exact: |mantissa| < 1, 53 bits
    shift = exponent.astype(np.int64) - 53 - _BASE
    low_shift = int(shift.min())
    slot = shift - low_shift
    high = whole >> _HALF
    low = whole - (high << _HALF)
    total = 0
    for weights, extra in ((high, _HALF), (low, 0)):
        # at most 2**27 per value: sums of up to 2**26 values stay exact in float64
        for start in range(0, arr.size, 1 << 26):
            part = slice(start, start + (1 << 26))
            sums = np.bincount(slot[part], weights=weights[part].astype(float))
            for k in np.flatnonzero(sums):
                total += int(sums[k]) << (int(k) + low_shift + extra)
    return total


def exact_mean(total: int, count: int) -> float:
    """``exact_sum``'s total over ``count`` values, rounded once; NaN for no values."""
    if count == 0:
        return float("nan")
    return float(Fraction(total, count << -_BASE))


def mean(values: Iterable[float] | np.ndarray) -> float:
    """The exactly rounded mean of the finite values (the module docstring); NaN when none."""
    arr = finite(values)
    return exact_mean(exact_sum(arr), int(arr.size))


#: Most values one wanted order statistic keeps in memory (its last pass sorts them).
SELECT_CAP = 8192
#: Buckets of each histogram pass.
SELECT_BINS = 4096


class _Rank:
    """Where one order statistic (0-based rank ``rank`` of the sorted values) lies: the
    closed interval ``[low, high]`` of values, ``below`` values under it, ``inside`` in it."""

    def __init__(self, rank: int, low: float, high: float, count: int) -> None:
        self.rank, self.low, self.high = rank, low, high
        self.below, self.inside = 0, count
        self.value: float | None = low if low == high else None
        self.counts: np.ndarray | None = None
        self.kept: list[np.ndarray] = []

    @property
    def collecting(self) -> bool:
        return self.inside <= SELECT_CAP

    def begin(self) -> None:
        import numpy as np

        if self.value is None and not self.collecting:
            self.counts = np.zeros(SELECT_BINS, dtype=np.int64)
        self.kept = []

    def edges(self) -> np.ndarray:
        import numpy as np

        return np.linspace(self.low, self.high, SELECT_BINS + 1)

    def feed(self, values: np.ndarray) -> None:
        import numpy as np

        if self.value is not None:
            return
        inside = values[(values >= self.low) & (values <= self.high)]
        if self.collecting:  # distinct values and their counts: a value repeated is kept once
            distinct, counts = np.unique(inside, return_counts=True)
            self.kept.append(np.stack([distinct, counts.astype(float)]))
        else:
            bucket = np.searchsorted(self.edges()[1:-1], inside, side="right")
            self.counts += np.bincount(bucket, minlength=SELECT_BINS)

    def end(self) -> None:
        import numpy as np

        if self.value is not None:
            return
        if self.collecting:
            kept = np.concatenate(self.kept, axis=1)
            order = np.argsort(kept[0], kind="stable")
            cumulative = np.cumsum(kept[1][order])
            at = int(np.searchsorted(cumulative, self.rank - self.below, side="right"))
            self.value, self.kept = float(kept[0][order][at]), []
            return
        edges, cumulative = self.edges(), np.cumsum(self.counts)
        bucket = int(np.searchsorted(cumulative, self.rank - self.below, side="right"))
        low = float(edges[bucket]) if bucket > 0 else self.low
        high = (
            float(np.nextafter(edges[bucket + 1], -np.inf))
            if bucket < SELECT_BINS - 1
            else self.high
        )
        if (low, high) == (self.low, self.high):  # too few floats between them to split:
            self.inside = 0  # keep what is there (a handful of distinct values) next pass
        else:
            self.below += int(cumulative[bucket - 1]) if bucket > 0 else 0
            self.inside = int(self.counts[bucket])
            self.low, self.high = low, high
        self.counts = None
        if self.low == self.high:
            self.value = self.low


class Selection:
    """``describe``'s statistics (and ``max``) of values seen in parts, exactly, in bounded
    memory (the module docstring): feed every part of a pass to ``feed``, call
    ``end_pass``, and pass again while ``more`` is true; then ``describe()``."""

    def __init__(self, levels: Mapping[str, float] = QUANTILES) -> None:
        import numpy as np

        #: each statistic's level as ``np.percentile`` divides it (p99.9 → 0.999…)
        self.levels = {name: float(np.true_divide(pct, 100)) for name, pct in levels.items()}
        self.count, self.total = 0, 0
        self.low, self.high = math.inf, -math.inf
        self.ranks: dict[int, _Rank] | None = None  # None: the first pass is not over

    @property
    def more(self) -> bool:
        """Whether another pass over the values is needed."""
        return self.ranks is None or any(r.value is None for r in self.ranks.values())

    def feed(self, values: Iterable[float] | np.ndarray) -> None:
        arr = finite(values)
        if self.ranks is None:
            self.count += int(arr.size)
            self.total += exact_sum(arr)
            if arr.size:
                self.low, self.high = (
                    min(self.low, float(arr.min())),
                    max(self.high, float(arr.max())),
                )
            return
        for rank in self.ranks.values():
            rank.feed(arr)

    def end_pass(self) -> None:
        if self.ranks is None:
            levels = self.levels.values() if self.count else ()
            wanted = sorted({i for q in levels for i in self._neighbours(q)[:2]})
            self.ranks = {i: _Rank(i, self.low, self.high, self.count) for i in wanted}
        else:
            for rank in self.ranks.values():
                rank.end()
        for rank in self.ranks.values():
            rank.begin()

    def _neighbours(self, q: float) -> tuple[int, int, float]:
        """numpy's two order statistics around quantile ``q`` and the weight between them."""
        virtual = (self.count - 1) * q
        if virtual >= self.count - 1:
            return self.count - 1, self.count - 1, 0.0
        previous = math.floor(virtual)
        return previous, previous + 1, virtual - previous

    def value(self, name: str) -> float:
        """One quantile statistic, through ``quantile``'s interpolation of its neighbours."""
        import numpy as np

        assert self.ranks is not None and not self.more, "passes not finished"
        previous, following, weight = self._neighbours(self.levels[name])
        pair = np.array([self.ranks[previous].value, self.ranks[following].value])
        return quantile(pair, weight)

    def describe(self) -> dict[str, float | int | None]:
        """As ``describe`` over every value fed, with ``max`` (``None`` values when none)."""
        if self.count == 0:
            return {name: None for name in STATISTICS} | {"count": 0, "max": None}
        out: dict[str, float | int | None] = {"mean": exact_mean(self.total, self.count)}
        out.update({name: self.value(name) for name in self.levels})
        return out | {"count": self.count, "max": self.high}


def select_passes(
    parts: Callable[[int], Iterable[Mapping[str, np.ndarray]]],
    levels: Mapping[str, float] | Callable[[str], Mapping[str, float]] = QUANTILES,
) -> dict[str, Selection]:
    """A finished ``Selection`` of each named value stream: ``parts(k)`` gives the parts of
    pass ``k`` (0, 1, …), each a mapping from a name to that part's values, the same parts
    in the same order on every pass (a name first seen in pass 0 gets its ``Selection``,
    of the quantiles ``levels`` names, as percentages, or ``levels(name)`` names). It is
    called once per pass until every statistic is found; nothing is kept of a part but
    what the selections need."""
    levels_of = levels if callable(levels) else lambda _: levels
    selections: dict[str, Selection] = {}
    done = 0
    while done == 0 or any(s.more for s in selections.values()):
        for part in parts(done):
            for name, values in part.items():
                selection = (
                    selections.setdefault(name, Selection(levels_of(name))) if done == 0 else None
                )
                selection = selection or selections[name]
                if selection.more:
                    selection.feed(values)
        for selection in selections.values():
            if selection.more:
                selection.end_pass()
        done += 1
    return selections
