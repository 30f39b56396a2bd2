"""Bootstrap replicates of a mean or quantile, vectorised; clusters resampled as units.

A resample is a multinomial count per unit (a request, or one value when there are no
clusters), and each statistic is read from ``weights @ features``, the features being
per-unit sums (mean) or per-unit counts of values between the thresholds of a grid
around the quantile (a resampled quantile is located on that grid, exactly when the
grid holds every value near the quantile). The features are sparse, so the cost is
O(resamples × (units + values near the quantile)) however many values there are: 10^7
ITL gaps of 10^5 requests cost about what 10^5 TTFTs would. Quantiles of independent
values skip the weights: the order statistics of a resample are drawn directly (two
Beta variates per resample), which is exact.

A resample of clustered values pools the values of the drawn clusters and recomputes
the statistic of the pool (a cluster bootstrap): the replicate is of the pooled
statistic the report shows, not of a per-cluster summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import sparse

from runtime.quantiles import QUANTILES, STATISTICS, inverted_cdf_quantiles

#: Least thresholds in the grid a resampled quantile is located on, and the most
#: units × thresholds (more thresholds for fewer units: exact for small samples).
_GRID = 64
_GRID_CELLS = 500_000

#: A seed: an integer, or a ``SeedSequence`` spawned from one.
Seed = int | np.random.SeedSequence
#: Weight-matrix cells generated at once (bounds memory to ~50 MB).
_CHUNK_CELLS = 4_000_000


@dataclass(frozen=True)
class Sample:
    """Values of one metric from one run; ``clusters[i]`` is the unit value i belongs to.

    Build with ``Sample.of``: it drops non-finite values (unknown is not a sample) and
    numbers the clusters 0..n_units-1 in the order of their labels (time blocks stay in
    time order). Without clusters every value is its own unit, in the given order.
    """

    values: np.ndarray
    clusters: np.ndarray | None = None
    #: The variance of the log statistic that the whole run shares and no unit shows (a
    #: level every unit of the run sits at alike: ``diagnose.draws.grid_variance``); only
    #: a comparison of different draws reads it. 0: none known.
    level_variance: float = 0.0

    @classmethod
    def of(cls, values: Any, clusters: Any = None, *, level_variance: float = 0.0) -> Sample:
        arr = np.asarray(values, dtype=float).ravel()
        keep = np.isfinite(arr)
        if clusters is None:
            return cls(arr[keep], level_variance=level_variance)
        codes, _ = pd.factorize(np.asarray(clusters)[keep], sort=True)
        return cls(arr[keep], codes.astype(np.int64), level_variance)

    @classmethod
    def concat(cls, samples: Sequence[Sample]) -> Sample:
        """Pool samples (trials), keeping each one's clusters distinct."""
        values = np.concatenate([s.values for s in samples]) if samples else np.empty(0)
        if all(s.clusters is None for s in samples):
            return cls(values)
        offsets = np.cumsum([0, *(s.n_units for s in samples[:-1])])
        codes = [s.unit_codes() + offset for s, offset in zip(samples, offsets, strict=True)]
        return cls(values, np.concatenate(codes))

    @property
    def n_units(self) -> int:
        if self.clusters is None:
            return len(self.values)
        return int(self.clusters.max()) + 1 if len(self.clusters) else 0

    def unit_codes(self) -> np.ndarray:
        return self.clusters if self.clusters is not None else np.arange(len(self.values))


def seed_sequence(seed: Seed) -> np.random.SeedSequence:
    return seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)


def resample_sums(
    features: sparse.csr_matrix, resamples: int, seed: Seed, *, counts: np.ndarray | None = None
) -> np.ndarray:
    """``weights @ features`` for ``resamples`` multinomial weight vectors over the units.

    The features are sparse (most of a unit's values fall below or above a quantile's
    grid), so the product costs resamples × non-zeros rather than × units × columns.
    ``counts`` (resamples × units), when given, is filled with the weights: how many
    times each resample drew each unit.
    """
    rng = np.random.default_rng(seed)
    units = features.shape[0]
    by_column = features.T.tocsr()
    per_chunk = max(1, _CHUNK_CELLS // units)
    out = np.empty((resamples, features.shape[1]))
    for start in range(0, resamples, per_chunk):
        rows = min(per_chunk, resamples - start)
        picks = rng.integers(0, units, size=(rows, units))
        picks += np.arange(rows)[:, None] * units
        weights = np.bincount(picks.ravel(), minlength=rows * units).reshape(rows, units)
        if counts is not None:
            counts[start : start + rows] = weights
        out[start : start + rows] = (by_column @ weights.T.astype(float)).T
    return out


def _mean_features(sample: Sample) -> sparse.csr_matrix:
    """Per-unit [sum, count]: a resampled mean is the ratio of the weighted columns."""
    codes = sample.unit_codes()
    sums = np.bincount(codes, weights=sample.values, minlength=sample.n_units)
    counts = np.bincount(codes, minlength=sample.n_units).astype(float)
    return sparse.csr_matrix(np.column_stack([sums, counts]))


@dataclass(frozen=True)
class _QuantileGrid:
    """Thresholds around quantile ``q`` and per-unit counts of values between them.

    ``features[:, 0]`` counts a unit's values < ``grid[0]``, ``features[:, k + 1]`` those
    in ``(grid[k-1], grid[k]]`` (``[grid[0], grid[0]]`` for k = 0), and the last column
    those above ``grid[-1]``. Weighted by a resample and summed cumulatively
    (``locate``), they give its order statistics near ``q``: exactly when the grid holds
    every distinct value of its band (``exact``), else interpolated between grid points.
    The quantile is then numpy's linear one between two order statistics.
    """

    q: float
    half_width: float
    grid: np.ndarray
    exact: bool
    features: sparse.csr_matrix

    @classmethod
    def build(
        cls, sample: Sample, ordered: np.ndarray, q: float, half_width: float
    ) -> _QuantileGrid:
        last = len(ordered) - 1
        low, high = max(0.0, q - half_width), min(1.0, q + half_width)
        band = ordered[int(np.floor(low * last)) : int(np.ceil(high * last)) + 1]
        points = max(_GRID, _GRID_CELLS // sample.n_units)
        grid = np.unique(band)
        exact = len(grid) <= points
        if not exact:
            levels = np.linspace(0.0, 1.0, points)
            grid = np.unique(inverted_cdf_quantiles(band, levels))
        slot = np.searchsorted(grid, sample.values, "left") + (sample.values >= grid[0])
        width = len(grid) + 2
        units = sample.n_units
        counts = np.bincount(sample.unit_codes() * width + slot, minlength=units * width)
        features = sparse.csr_matrix(counts.reshape(units, width).astype(float))
        return cls(q, half_width, grid, exact, features)

    def _order_statistic(self, sums: np.ndarray, rank: np.ndarray) -> np.ndarray:
        """The ``rank``-th smallest value (1-based) of each resample, rank inside the grid."""
        at_or_below = sums[:, 1:-1]
        k = np.argmax(at_or_below >= rank[:, None], axis=1)
        if self.exact:
            return self.grid[k]
        rows = np.arange(len(sums))
        prev = np.maximum(k - 1, 0)
        lo_count, hi_count = at_or_below[rows, prev], at_or_below[rows, k]
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = np.where(k > 0, (rank - lo_count) / (hi_count - lo_count), 1.0)
        return self.grid[prev] + frac * (self.grid[k] - self.grid[prev])

    def locate(self, sums: np.ndarray) -> np.ndarray | None:
        """The resampled quantiles from cumulative weighted counts, or ``None`` when one
        falls outside the grid."""
        total = sums[:, -1]
        position = (total - 1.0) * self.q  # numpy's linear rule, 0-based
        lower = np.floor(position)
        rank_lo, rank_hi = lower + 1.0, np.minimum(lower + 2.0, total)
        if bool((sums[:, 0] >= rank_lo).any()) or bool((sums[:, -2] < rank_hi).any()):
            return None
        lo = self._order_statistic(sums, rank_lo)
        hi = self._order_statistic(sums, rank_hi)
        return lo + (position - lower) * (hi - lo)


def _independent_quantiles(ordered: np.ndarray, q: float, resamples: int, seed: Seed) -> np.ndarray:
    """Exact bootstrap replicates of numpy's linear quantile of independent values.

    A resample of n values is ``ordered[floor(n * V)]`` for n uniform V, a monotone map,
    so its j-th smallest value is ``ordered[floor(n * V_(j))]`` where the uniform order
    statistic V_(j) ~ Beta(j, n - j + 1), and V_(j+1) = V_(j) + (1 - V_(j)) Beta(1, n - j).
    Two Beta draws per resample replace n draws.
    """
    rng = np.random.default_rng(seed)
    n = len(ordered)
    position = (n - 1) * q
    j = int(np.floor(position)) + 1  # 1-based rank of the lower order statistic
    lower = rng.beta(j, n - j + 1, resamples)
    upper = lower + (1.0 - lower) * rng.beta(1, n - j, resamples) if j < n else lower
    lo = ordered[np.minimum((n * lower).astype(np.int64), n - 1)]
    hi = ordered[np.minimum((n * upper).astype(np.int64), n - 1)]
    return lo + (position - (j - 1)) * (hi - lo)


def _clustered_statistics(
    sample: Sample,
    ordered: np.ndarray,
    stats: Sequence[str],
    resamples: int,
    seed: Seed,
    counts: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Replicates through weights @ features, all statistics on the same resamples
    (their weights written to ``counts`` when given).

    A quantile whose replicates fall outside its grid gets a grid twice as wide and the
    same weights again.
    """
    units = sample.n_units
    grids = {}
    for stat in stats:
        if stat != "mean":
            q = QUANTILES[stat] / 100.0
            # ±4 standard errors of the level for independent units; widened when clustered
            width = 4.0 * np.sqrt(q * (1.0 - q) / units) + 1.0 / units
            grids[stat] = _QuantileGrid.build(sample, ordered, q, width)
    out: dict[str, np.ndarray] = {}
    want_mean = "mean" in stats
    while grids or want_mean:
        blocks = ([_mean_features(sample)] if want_mean else []) + [
            g.features for g in grids.values()
        ]
        sums = resample_sums(sparse.hstack(blocks, format="csr"), resamples, seed, counts=counts)
        if want_mean:
            out["mean"] = sums[:, 0] / sums[:, 1]
            sums, want_mean = sums[:, 2:], False
        for stat, grid in list(grids.items()):
            width = grid.features.shape[1]
            located = grid.locate(np.cumsum(sums[:, :width], axis=1))
            sums = sums[:, width:]
            if located is None:
                grids[stat] = _QuantileGrid.build(sample, ordered, grid.q, 2 * grid.half_width)
            else:
                out[stat] = located
                del grids[stat]
    return out


def resampled_statistics(
    sample: Sample,
    stats: Sequence[str],
    resamples: int,
    seed: Seed,
    *,
    counts: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """``resamples`` bootstrap replicates of each statistic (cluster bootstrap if clustered).

    Quantiles of independent values are drawn exactly from order statistics; everything
    else goes through the weight matrix. ``counts`` (resamples × units), when given, is
    filled with each resample's draws per unit, every statistic then read from those
    same weights (what ``diagnose.stats`` needs to judge its own variance estimate).
    """
    unknown = [s for s in stats if s not in STATISTICS]
    if unknown:
        raise KeyError(f"unknown statistic {unknown[0]!r}; known: {', '.join(STATISTICS)}")
    ordered = np.sort(sample.values)
    root = seed_sequence(seed)
    seeds = dict(zip(stats, root.spawn(len(stats)), strict=True))
    out: dict[str, np.ndarray] = {}
    if sample.clusters is None and counts is None:
        for stat in stats:
            if stat != "mean":
                q = QUANTILES[stat] / 100.0
                out[stat] = _independent_quantiles(ordered, q, resamples, seeds[stat])
    rest = [s for s in stats if s not in out]
    if rest:
        out |= _clustered_statistics(sample, ordered, rest, resamples, seeds[rest[0]], counts)
    return {s: out[s] for s in stats}
