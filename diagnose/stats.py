"""Is NEW different from BASE? Bootstrap intervals for ratios, a rank test, trial-level pooling.

Every comparison prefillscope reports is a ratio NEW/BASE of one statistic (a mean or a
quantile, ``probes.quantiles``) with a confidence interval and a p-value:

* **Interval**: percentile bootstrap, seeded. Each sample is resampled independently and
  the ratio of the resampled statistics is taken; the interval is its central
  ``confidence`` range. (BCa would need a jackknife pass over every unit, which costs as
  much as the bootstrap itself on 10^5 requests, for a correction that is small at the
  sample sizes a benchmark run has; the percentile interval of a ratio is also
  invariant to taking logs.)
* **Clusters**: values that share a cluster (the ITL gaps of one request) are not
  independent, so when a sample has clusters the bootstrap resamples clusters and pools
  their values (a cluster bootstrap), and the rank test compares one value per cluster.
* **Rank test**: Mann–Whitney U (two-sided) on the values, or on per-cluster statistics
  of the same kind (each request's mean or quantile) when clustered.
* **Significant** means the interval excludes 1 *and* the rank test's p < 1 − confidence:
  the interval speaks about the statistic compared, the rank test guards against an
  interval made narrow by a few extreme values.

Resampling is vectorised as weights: a resample is a multinomial count per unit, and
each statistic is read from ``weights @ features``, the features being per-unit sums
(mean) or per-unit counts of values between the thresholds of a grid around the
quantile (a resampled quantile is located on that grid, exactly when the grid holds
every value near the quantile). The features are sparse, so the cost is
O(resamples × (units + values near the quantile)) however many values there are: 10^7
ITL gaps of 10^5 requests cost about what 10^5 TTFTs would. Quantiles of independent
values skip the weights: the order statistics of a resample are drawn directly (two
Beta variates per resample), which is exact.

Several trials per arm (``compare_trials``): the trials are the independent units. When
trials of an arm differ more than their own sampling explains (Cochran's Q), trial-to-
trial variation dominates, and the comparison is made on the per-trial statistics (a
Welch t interval on the log scale); otherwise the pooled cluster bootstrap of all trials
is used, which has more resolution.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import sparse
from scipy import stats as sps

from diagnose.metrics import CONFIDENCE, RESAMPLES
from probes.quantiles import QUANTILES, STATISTICS, statistic

#: Least thresholds in the grid a resampled quantile is located on, and the most
#: units × thresholds (more thresholds for fewer units: exact for small samples).
_GRID = 64
_GRID_CELLS = 500_000
#: Trials differ by more than sampling when Cochran's Q has p below this. Lenient on
#: purpose: with three trials per arm the test is weak, and missing a real trial effect
#: (reporting the narrower pooled interval) is the costlier mistake.
HETEROGENEITY_P = 0.2

#: A seed: an integer, or a ``SeedSequence`` spawned from one.
Seed = int | np.random.SeedSequence
#: Weight-matrix cells generated at once (bounds memory to ~50 MB).
_CHUNK_CELLS = 4_000_000


@dataclass(frozen=True)
class Sample:
    """Values of one metric from one run; ``clusters[i]`` is the unit value i belongs to.

    Build with ``Sample.of``: it drops non-finite values (unknown is not a sample) and
    numbers the clusters 0..n_units-1. Without clusters every value is its own unit.
    """

    values: np.ndarray
    clusters: np.ndarray | None = None

    @classmethod
    def of(cls, values: Any, clusters: Any = None) -> Sample:
        arr = np.asarray(values, dtype=float).ravel()
        keep = np.isfinite(arr)
        if clusters is None:
            return cls(arr[keep])
        codes, _ = pd.factorize(np.asarray(clusters)[keep])
        return cls(arr[keep], codes.astype(np.int64))

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

    def per_unit(self, stats: Sequence[str]) -> dict[str, np.ndarray]:
        """One value of each statistic per cluster (the values themselves when unclustered).

        numpy's linear quantile within each cluster, vectorised over clusters: one sort of
        all values by (cluster, value) serves every statistic.
        """
        if self.clusters is None:
            return dict.fromkeys(stats, self.values)
        order = np.lexsort((self.values, self.clusters))
        ordered = self.values[order]
        sizes = np.bincount(self.clusters, minlength=self.n_units)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        out: dict[str, np.ndarray] = {}
        for stat in stats:
            if stat == "mean":
                out[stat] = np.bincount(self.clusters, weights=self.values) / sizes
                continue
            rank = (sizes - 1) * (QUANTILES[stat] / 100.0)
            below = np.floor(rank).astype(np.int64)
            above = np.minimum(below + 1, sizes - 1)
            lo, hi = ordered[starts + below], ordered[starts + above]
            out[stat] = lo + (rank - below) * (hi - lo)
        return out


@dataclass(frozen=True)
class Comparison:
    """NEW/BASE for one metric: the ratio, its interval, the rank test, the verdict."""

    metric: str
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    significant: bool
    base: float
    new: float
    method: str

    @classmethod
    def judge(
        cls,
        metric: str,
        ratio: float,
        interval: tuple[float, float],
        p_value: float,
        values: tuple[float, float],
        method: str,
        confidence: float,
    ) -> Comparison:
        """A comparison whose ``significant`` follows this module's rule.

        ``interval`` is ``(ci_low, ci_high)`` and ``values`` is ``(base, new)``.
        """
        low, high = interval
        excludes_one = bool(low > 1.0 or high < 1.0)
        significant = excludes_one and bool(p_value < 1.0 - confidence)
        return cls(metric, ratio, low, high, p_value, significant, *values, method)

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not np.isfinite(v) else v)
                for k, v in asdict(self).items()}  # fmt: skip


def _seed_sequence(seed: Seed) -> np.random.SeedSequence:
    return seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)


def _resample_sums(features: sparse.csr_matrix, resamples: int, seed: Seed) -> np.ndarray:
    """``weights @ features`` for ``resamples`` multinomial weight vectors over the units.

    The features are sparse (most of a unit's values fall below or above a quantile's
    grid), so the product costs resamples × non-zeros rather than × units × columns.
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
            grid = np.unique(np.quantile(band, levels, method="inverted_cdf"))
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
    sample: Sample, ordered: np.ndarray, stats: Sequence[str], resamples: int, seed: Seed
) -> dict[str, np.ndarray]:
    """Replicates through weights @ features, all statistics on the same resamples.

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
        sums = _resample_sums(sparse.hstack(blocks, format="csr"), resamples, seed)
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
    sample: Sample, stats: Sequence[str], resamples: int, seed: Seed
) -> dict[str, np.ndarray]:
    """``resamples`` bootstrap replicates of each statistic (cluster bootstrap if clustered).

    Quantiles of independent values are drawn exactly from order statistics; everything
    else goes through the weight matrix.
    """
    unknown = [s for s in stats if s not in STATISTICS]
    if unknown:
        raise KeyError(f"unknown statistic {unknown[0]!r}; known: {', '.join(STATISTICS)}")
    ordered = np.sort(sample.values)
    root = _seed_sequence(seed)
    seeds = dict(zip(stats, root.spawn(len(stats)), strict=True))
    out: dict[str, np.ndarray] = {}
    if sample.clusters is None:
        for stat in stats:
            if stat != "mean":
                q = QUANTILES[stat] / 100.0
                out[stat] = _independent_quantiles(ordered, q, resamples, seeds[stat])
    rest = [s for s in stats if s not in out]
    if rest:
        out |= _clustered_statistics(sample, ordered, rest, resamples, seeds[rest[0]])
    return {s: out[s] for s in stats}


def rank_tests(base: Sample, new: Sample, stats: Sequence[str]) -> dict[str, float]:
    """Two-sided Mann–Whitney U p-value per statistic; per-cluster values when clustered.

    Unclustered samples give every statistic the same values: one test serves them all.
    """
    a, b = new.per_unit(stats), base.per_unit(stats)
    done: dict[tuple[int, int], float] = {}
    for s in stats:
        key = (id(a[s]), id(b[s]))
        if key not in done:
            empty = len(a[s]) == 0 or len(b[s]) == 0
            test = None if empty else sps.mannwhitneyu(a[s], b[s], alternative="two-sided")
            done[key] = float("nan") if test is None else float(test.pvalue)
    return {s: done[(id(a[s]), id(b[s]))] for s in stats}


def compare_stats(
    base: Sample,
    new: Sample,
    metrics: Mapping[str, str],
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: Seed = 0,
) -> list[Comparison]:
    """Compare two independent samples (two runs) on several statistics at once.

    ``metrics`` maps each metric's name to its statistic (``{"itl_p99": "p99"}``).
    """
    stats = list(dict.fromkeys(metrics.values()))
    alpha = 1.0 - confidence
    if base.n_units >= 2 and new.n_units >= 2:
        seed_base, seed_new = _seed_sequence(seed).spawn(2)
        base_reps = resampled_statistics(base, stats, resamples, seed_base)
        new_reps = resampled_statistics(new, stats, resamples, seed_new)
        with np.errstate(invalid="ignore", divide="ignore"):
            bounds = {
                s: np.nanquantile(new_reps[s] / base_reps[s], [alpha / 2.0, 1.0 - alpha / 2.0])
                for s in stats
            }
    else:
        bounds = dict.fromkeys(stats, np.array([np.nan, np.nan]))
    p_values = rank_tests(base, new, stats)
    method = "bootstrap" if base.clusters is None and new.clusters is None else "cluster bootstrap"
    out = []
    for metric, stat in metrics.items():
        base_value, new_value = statistic(base.values, stat), statistic(new.values, stat)
        interval = (float(bounds[stat][0]), float(bounds[stat][1]))
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = float(np.float64(new_value) / base_value)
        values = (base_value, new_value)
        out.append(
            Comparison.judge(metric, ratio, interval, p_values[stat], values, method, confidence)
        )
    return out


def trial_interval(
    base_values: Sequence[float], new_values: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float, float, float, float]:
    """Geometric-mean ratio of per-trial statistics, Welch t interval on logs, and p-value.

    Returns ``(ratio, low, high, p_value)``. Welch's t rather than a rank test: with three
    trials per arm the smallest two-sided Mann–Whitney p-value is 0.1, so a rank test
    could never call a difference.
    """
    a, b = np.log(np.asarray(new_values, float)), np.log(np.asarray(base_values, float))
    diff = a.mean() - b.mean()
    var_a, var_b = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    se = np.sqrt(var_a + var_b)
    if se == 0.0:
        same = float(np.exp(diff))
        return same, same, same, float(diff == 0.0)
    dof = (var_a + var_b) ** 2 / (var_a**2 / (len(a) - 1) + var_b**2 / (len(b) - 1))
    margin = sps.t.ppf(0.5 + confidence / 2.0, dof) * se
    p_value = 2.0 * sps.t.sf(abs(diff) / se, dof)
    return (
        float(np.exp(diff)),
        float(np.exp(diff - margin)),
        float(np.exp(diff + margin)),
        float(p_value),
    )


def _geometric_mean(values: Sequence[float]) -> float:
    return float(np.exp(np.mean(np.log(values))))


def trial_heterogeneity(
    trials: Sequence[Sample], stats: Sequence[str], resamples: int, seed: Seed
) -> dict[str, tuple[float, int]]:
    """Cochran's Q of the per-trial log statistics of one arm, and its degrees of freedom.

    Each trial's sampling variance comes from its own bootstrap; Q compares the spread
    between trials with what that sampling alone explains (Q ~ chi2(k-1) when the
    trials differ only by sampling).
    """
    root = _seed_sequence(seed)
    logs = {s: [] for s in stats}
    variances = {s: [] for s in stats}
    for trial, trial_seed in zip(trials, root.spawn(len(trials)), strict=True):
        replicates = resampled_statistics(trial, stats, resamples, trial_seed)
        for stat in stats:
            logs[stat].append(np.log(statistic(trial.values, stat)))
            with np.errstate(divide="ignore", invalid="ignore"):
                variances[stat].append(np.nanvar(np.log(replicates[stat])))
    out = {}
    for stat in stats:
        weights = 1.0 / np.maximum(np.asarray(variances[stat]), np.finfo(float).tiny)
        values = np.asarray(logs[stat])
        centre = np.sum(weights * values) / np.sum(weights)
        out[stat] = (float(np.sum(weights * (values - centre) ** 2)), len(trials) - 1)
    return out


def compare_trials(
    base_trials: Sequence[Sample],
    new_trials: Sequence[Sample],
    metrics: Mapping[str, str],
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> list[Comparison]:
    """Compare arms of several trials each (ABAB…), trials being the independent units.

    Per metric: when the trials of the arms differ more than their own sampling explains
    (Cochran's Q over both arms, p < ``HETEROGENEITY_P``), trial-to-trial variation
    dominates and the trial-level comparison (``trial_interval``) is reported, with
    ``method="trials"``; otherwise the pooled cluster bootstrap of all trials is. Needs
    at least two trials per arm; three or more give an interval worth reading.
    """
    if len(base_trials) < 2 or len(new_trials) < 2:
        raise ValueError("compare_trials needs at least two trials per arm")
    stats = list(dict.fromkeys(metrics.values()))
    seed_pooled, seed_base, seed_new = _seed_sequence(seed).spawn(3)
    pooled = compare_stats(
        Sample.concat(base_trials),
        Sample.concat(new_trials),
        metrics,
        resamples=resamples,
        confidence=confidence,
        seed=seed_pooled,
    )
    q_base = trial_heterogeneity(base_trials, stats, resamples, seed_base)
    q_new = trial_heterogeneity(new_trials, stats, resamples, seed_new)
    out = []
    for (metric, stat), pooled_cmp in zip(metrics.items(), pooled, strict=True):
        q_value = q_base[stat][0] + q_new[stat][0]
        dof = q_base[stat][1] + q_new[stat][1]
        if sps.chi2.sf(q_value, dof) >= HETEROGENEITY_P:
            out.append(pooled_cmp)
            continue
        per_base = [statistic(s.values, stat) for s in base_trials]
        per_new = [statistic(s.values, stat) for s in new_trials]
        ratio, low, high, p_value = trial_interval(per_base, per_new, confidence)
        means = (_geometric_mean(per_base), _geometric_mean(per_new))
        out.append(
            Comparison.judge(metric, ratio, (low, high), p_value, means, "trials", confidence)
        )
    return out
