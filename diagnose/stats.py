"""Is NEW different from BASE? One statistic, one bootstrap interval, one decision rule.

**What is tested.** Every comparison is the ratio NEW/BASE of one statistic — a mean or a
quantile (``runtime.quantiles``) of the values a run pooled — the very number a report
shows. Its interval is a percentile bootstrap (``diagnose.resample``), seeded, each run
resampled independently:

* independent values (per-request TTFT, TPOT, E2E; throughput time slices): the values
  are resampled and the statistic recomputed;
* clustered values (ITL gaps are not independent: one engine step stalls every running
  request at once, so ``diagnose.compare`` groups them in time blocks): the clusters
  are resampled and the *pooled* statistic of their values recomputed (a cluster
  bootstrap of the pooled p99, not a test of per-request summaries).

With R finite replicates of the ratio, sorted, the interval at ``confidence`` = 1 − α is
``[r(m+1), r(R−m)]``, m = ⌈R·α/2⌉ − 1 replicates trimmed at each end.

**The decision rule.** A value v (1 for "did it change", 1 + X for a gate of +X %) is
excluded by the interval — ``Comparison.side(v)`` — exactly when fewer than R·α/2
replicates lie on the far side of it; nothing else decides. ``significant`` means
"decided, and the interval excludes 1"; the p-value printed with it,
``2·min(#{r ≤ 1}, #{r ≥ 1}) / R``, is below α exactly when the interval excludes 1, so
the two never disagree. A gate reads the same interval against its limit
(``diagnose.compare``): beyond the limit → fail, within it → pass, containing it →
inconclusive.

**Inconclusive.** The data cannot decide when either run has fewer than ``MIN_UNITS``
independent units (requests, clusters, slices), or fewer than ``MIN_TAIL`` values beyond
the quantile (n·(1 − q) for an upper quantile: a p99 of 300 gaps rests on 3, of 1000
gaps on 10). Below those the bootstrap distribution is a handful of order statistics or
resamples and its percentile interval covers far less than it claims, so the result is
``inconclusive`` (never ``significant``), with the reason and the units per run that
would meet both minimums (``needed_units``). ``units_to_separate(v)`` gives the size
at which the interval would exclude v, assuming its width shrinks as 1/√n.

**Different draws.** When BASE and NEW are different draws of the workload
(``compare_stats(..., draws=True)``; ``diagnose.compare`` asks it for every metric of
runs whose seeds differ), the interval must cover how far another draw's statistic lands,
which a percentile bootstrap of one run's units does not: ``diagnose.draws`` widens the
log-ratio replicates to at least a Student t interval of each run's own variance (and,
for stall events, of its time batches), and states what that covers.

**Assumptions.** Units are independent and identically distributed within a run (a run
is a stationary sample of one configuration), the two runs are independent, and the
percentile bootstrap is accurate once the minimums hold (``benchmarks/
compare_calibration.py`` measures the false-positive and detection rates). What it does
not cover is drift between runs (another machine, another hour): for that, repeat runs
as trials (``diagnose.trials.compare_trials``: the trials are the units, their
between-trial variance estimated and carried into the interval by a random-effects
combination).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from diagnose.draws import between_draws
from diagnose.metrics import CONFIDENCE, RESAMPLES
from diagnose.resample import Sample, Seed, resampled_statistics, seed_sequence
from runfmt.abresult import RatioInterval
from runtime.quantiles import QUANTILES, statistic

__all__ = ["CONFIDENCE", "RESAMPLES", "Comparison", "Sample", "compare_stats"]

#: Fewest independent units (requests, clusters, time slices) in each run.
MIN_UNITS = 10
#: Fewest values beyond a quantile in each run (n·(1 − q) for p99, n·q for a low one).
MIN_TAIL = 10


@dataclass(frozen=True)
class Comparison(RatioInterval):
    """NEW/BASE for one metric: the ratio, its interval, and whether the data decide
    (its fields are ``runfmt.abresult.RatioInterval``'s, the JSON of a comparison).

    ``inconclusive`` says why the data cannot decide (``None`` when they can);
    ``units`` is (BASE, NEW) independent units; ``needed_units`` the units per run that
    would meet the minimums when those are what failed.
    """

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
        *,
        inconclusive: str | None = None,
        units: tuple[int, int] = (0, 0),
        needed_units: int | None = None,
        resamples: int | None = None,
    ) -> Comparison:
        """A comparison whose ``significant`` follows this module's rule: decided, and
        the interval ``(ci_low, ci_high)`` excludes 1. ``values`` is ``(base, new)``;
        ``confidence`` is the interval's level (kept for callers; the rule reads the
        interval alone)."""
        del confidence
        low, high = interval
        decided = inconclusive is None
        excludes_one = bool(low > 1.0 or high < 1.0)
        return cls(
            metric, ratio, low, high, p_value, decided and excludes_one, *values, method,
            inconclusive, units, needed_units, resamples,
        )  # fmt: skip

    def side(self, value: float) -> int:
        """+1 when the whole interval is above ``value``, −1 when below, 0 when it holds
        it (or there is no interval)."""
        if self.ci_low > value:
            return 1
        if self.ci_high < value:
            return -1
        return 0

    def units_to_separate(self, value: float) -> int | None:
        """Units per run at which the interval would exclude ``value``, its half-width
        (on the log scale, the side facing ``value``) shrinking as 1/√n; ``None`` when
        no size would (the ratio *is* ``value``) or there is no interval. At least
        ``MIN_UNITS``, or for trials as units (``diagnose.trials``: their t interval
        needs no such minimum) one trial more than there are."""
        bound = self.ci_low if self.ratio > value else self.ci_high
        if not all(math.isfinite(x) and x > 0 for x in (self.ratio, bound, value)):
            return None
        logs = (math.log(self.ratio), math.log(bound), math.log(value))
        needed = units_to_exclude(*logs, max(self.units))
        least = max(self.units) + 1 if self.method.startswith("trials") else MIN_UNITS
        return None if needed is None else max(least, needed)


def units_to_exclude(estimate: float, bound: float, value: float, units: int) -> int | None:
    """Units at which an interval around ``estimate``, whose side facing ``value`` ends at
    ``bound`` with ``units`` units, would exclude ``value``: its half-width shrinks as
    1/√n (on the caller's scale: the log of a ratio, a difference as it is); ``None`` when
    ``estimate`` is ``value`` (no size would)."""
    distance = abs(estimate - value)
    if distance == 0.0:
        return None
    return math.ceil(units * (abs(estimate - bound) / distance) ** 2)


def shortfall(
    sample: Sample, stat: str, names: tuple[str, str] = ("units", "values")
) -> tuple[str, int] | None:
    """Why ``sample`` is too small to compare ``stat`` on, and the units that would do.

    ``None`` when it has ``MIN_UNITS`` units and, for a quantile, ``MIN_TAIL`` values
    beyond it. The units needed keep the sample's values per unit. ``names`` are the
    words for a unit and a value in the reason (``("requests", "gaps")``).
    """
    unit_word, value_word = names
    units, count = sample.n_units, len(sample.values)
    if count == 0:
        return f"no {value_word}", MIN_UNITS
    per_unit = count / units
    beyond = 1.0 if stat == "mean" else min(QUANTILES[stat], 100.0 - QUANTILES[stat]) / 100.0
    needed = max(MIN_UNITS, math.ceil(MIN_TAIL / beyond / per_unit - 1e-9))
    reasons = []
    if units < MIN_UNITS:
        reasons.append(f"{units} {unit_word} (fewer than {MIN_UNITS})")
    if stat != "mean" and count * beyond < MIN_TAIL:
        least = math.ceil(MIN_TAIL / beyond - 1e-9)
        reasons.append(f"{count} {value_word}: a {stat} needs {least} for {MIN_TAIL} beyond it")
    return ("; ".join(reasons), needed) if reasons else None


def percentile_interval(replicates: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """``(low, high, p_value)`` of bootstrap ratio replicates (see the module docstring).

    NaN replicates (0/0) are dropped; the p-value is below 1 − ``confidence`` exactly
    when the interval excludes 1.
    """
    r = np.sort(replicates[~np.isnan(replicates)])
    total = len(r)
    if total == 0:
        return float("nan"), float("nan"), float("nan")
    trim = math.ceil(total * (1.0 - confidence) / 2.0 - 1e-12) - 1
    trim = min(max(trim, 0), (total - 1) // 2)
    at_or_below = int(np.searchsorted(r, 1.0, side="right"))
    at_or_above = total - int(np.searchsorted(r, 1.0, side="left"))
    p_value = min(1.0, 2.0 * min(at_or_below, at_or_above) / total)
    return float(r[trim]), float(r[total - 1 - trim]), p_value


#: How a shortfall names the two samples, and both when they fall short alike.
SIDES = ("BASE", "NEW", "BASE and NEW")


def undecided(
    base: Sample,
    new: Sample,
    stat: str,
    names: tuple[str, str],
    sides: tuple[str, str, str] = SIDES,
) -> tuple[str | None, int | None]:
    """The combined shortfall of two runs: the reasons, each after its side's name
    (``sides``: base's, new's, both's), and the larger size needed."""
    found = [
        (side, shortfall(s, stat, names)) for side, s in zip(sides[:2], (base, new), strict=True)
    ]
    short = [(side, f) for side, f in found if f is not None]
    if not short:
        return None, None
    if len(short) == 2 and short[0][1][0] == short[1][1][0]:
        short = [(sides[2], short[0][1])]
    reason = "; ".join(f"{name}: {f[0]}" for name, f in short)
    return reason, max(f[1] for _, f in short)


def compare_stats(
    base: Sample,
    new: Sample,
    metrics: Mapping[str, str],
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: Seed = 0,
    names: tuple[str, str] = ("units", "values"),
    sides: tuple[str, str, str] = SIDES,
    draws: bool = False,
    batch_means: bool = True,
    effective_dof: bool = True,
) -> list[Comparison]:
    """Compare two independent samples (two runs) on several statistics at once.

    ``metrics`` maps each metric's name to its statistic (``{"itl_p99": "p99"}``). The
    interval is computed whenever both runs have two units, also when the result is
    inconclusive (it is shown, not trusted). ``names`` word the reasons (``shortfall``),
    ``sides`` name the samples in them (``undecided``).
    ``draws``: the runs are different draws of the workload, their units numbered in
    time order; the interval is widened to at least the Student t interval of each run's
    bootstrap variance with its autocorrelation, and (``batch_means``) to the between-draw
    variance the time batches of each run show (``diagnose.draws``); ``effective_dof``:
    each run's t part takes the degrees of freedom of its own variance estimate
    (``diagnose.draws.variance_dof``), else units − 1.
    """
    stats = list(dict.fromkeys(metrics.values()))
    unknown = (float("nan"), float("nan"), float("nan"))
    bounds = dict.fromkeys(stats, unknown)
    method = "bootstrap" if base.clusters is None and new.clusters is None else "cluster bootstrap"
    methods = dict.fromkeys(stats, method)
    if base.n_units >= 2 and new.n_units >= 2:
        seed_base, seed_new = seed_sequence(seed).spawn(2)
        # different draws: each run's resamples' draws per unit, to judge its variance
        counts = tuple(
            np.zeros((resamples, x.n_units), dtype=np.int32) if draws and effective_dof else None
            for x in (base, new)
        )
        base_reps = resampled_statistics(base, stats, resamples, seed_base, counts=counts[0])
        new_reps = resampled_statistics(new, stats, resamples, seed_new, counts=counts[1])
        for s in stats:
            with np.errstate(invalid="ignore", divide="ignore"):
                ratios = new_reps[s] / base_reps[s]
            if draws:
                ratios, methods[s] = between_draws(
                    ratios, (base, new), (base_reps[s], new_reps[s]), s, confidence,
                    batch_means=batch_means, method=method, counts=counts,
                )  # fmt: skip
            bounds[s] = percentile_interval(ratios, confidence)
    units = (base.n_units, new.n_units)
    out = []
    for metric, stat in metrics.items():
        base_value, new_value = statistic(base.values, stat), statistic(new.values, stat)
        low, high, p_value = bounds[stat]
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = float(np.float64(new_value) / base_value)
        reason, needed = undecided(base, new, stat, names, sides)
        out.append(
            Comparison.judge(
                metric,
                ratio,
                (low, high),
                p_value,
                (base_value, new_value),
                methods[stat],
                confidence,
                inconclusive=reason,
                units=units,
                resamples=resamples,
                needed_units=needed,
            )
        )
    return out
