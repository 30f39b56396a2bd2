"""Bootstrap intervals, the one decision rule, inconclusive data and pooled trials' units."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from diagnose.resample import resampled_statistics
from diagnose.stats import (
    MIN_TAIL,
    MIN_UNITS,
    Comparison,
    Sample,
    compare_stats,
    percentile_interval,
    shortfall,
)
from runfmt.codec import encode
from runfmt.units import p_text

ALL = {"mean": "mean", "p50": "p50", "p95": "p95", "p99": "p99"}


def _contains_one(c: Comparison) -> bool:
    return c.ci_low <= 1.0 <= c.ci_high


def test_same_distribution_intervals_cover_one_about_95_percent_of_the_time() -> None:
    reps = 150
    covered = dict.fromkeys(ALL, 0)
    false_alarms = 0
    for r in range(reps):
        rng = np.random.default_rng(1000 + r)
        a, b = rng.lognormal(0.0, 0.5, 300), rng.lognormal(0.0, 0.5, 300)
        for c in compare_stats(Sample.of(a), Sample.of(b), ALL, resamples=400, seed=r):
            covered[c.metric] += _contains_one(c)
            false_alarms += c.significant
    for metric, count in covered.items():
        assert 0.90 <= count / reps <= 0.99, (metric, count / reps)
    assert false_alarms / (reps * len(ALL)) <= 0.05


def test_a_planted_30_percent_shift_is_significant() -> None:
    rng = np.random.default_rng(7)
    base, new = rng.lognormal(0.0, 0.5, 500), 1.3 * rng.lognormal(0.0, 0.5, 500)
    result = compare_stats(Sample.of(base), Sample.of(new), ALL | {"p90": "p90"})
    by_metric = {c.metric: c for c in result}
    for metric in ("mean", "p50", "p90", "p95"):
        c = by_metric[metric]
        assert c.significant, c
        assert c.ci_low < 1.3 < c.ci_high
        assert c.p_value < 1e-6
        assert c.ratio == pytest.approx(c.new / c.base)
    assert by_metric["p50"].base == np.percentile(base, 50)


def test_cluster_bootstrap_respects_correlated_gaps_where_the_naive_one_does_not() -> None:
    # Each request has its own speed: its 25 gaps share a level, so they are not 25
    # independent observations. Resampling requests keeps the interval honest.
    naive = clustered = 0
    reps = 40
    for r in range(reps):
        rng = np.random.default_rng(5000 + r)
        arms = []
        for _ in range(2):
            level = np.repeat(rng.lognormal(0.0, 0.3, 60), 25)
            arms.append((level * rng.lognormal(0.0, 0.1, level.size), np.repeat(np.arange(60), 25)))
        (a, ca), (b, cb) = arms
        metric = {"itl_mean": "mean"}
        naive += _contains_one(compare_stats(Sample.of(a), Sample.of(b), metric, resamples=300)[0])
        both = compare_stats(Sample.of(a, ca), Sample.of(b, cb), metric, resamples=300)[0]
        clustered += _contains_one(both)
        assert both.method == "cluster bootstrap"
    assert clustered / reps >= 0.85
    assert naive / reps <= 0.6


def test_vectorised_replicates_match_explicit_cluster_resampling() -> None:
    rng = np.random.default_rng(11)
    sizes = rng.integers(5, 40, 80)
    clusters = np.repeat(np.arange(80), sizes)
    values = np.repeat(rng.lognormal(0, 0.3, 80), sizes) * rng.lognormal(0, 0.2, clusters.size)
    members = [values[clusters == i] for i in range(80)]
    fast = resampled_statistics(Sample.of(values, clusters), ["mean", "p90", "p999"], 3000, seed=1)
    slow: dict[str, list[float]] = {"mean": [], "p90": [], "p999": []}
    for _ in range(2000):
        pooled = np.concatenate([members[i] for i in rng.integers(0, 80, 80)])
        slow["mean"].append(pooled.mean())
        slow["p90"].append(np.percentile(pooled, 90))
        slow["p999"].append(np.percentile(pooled, 99.9))
    for stat, explicit in slow.items():
        # Same distribution (the p99.9 one is lumpy: a few order statistics carry it all).
        assert sps.ks_2samp(fast[stat], explicit).statistic < 0.06, stat
        assert np.mean(fast[stat]) == pytest.approx(np.mean(explicit), rel=0.01), stat


def test_exact_order_statistic_replicates_match_explicit_resampling() -> None:
    rng = np.random.default_rng(12)
    values = rng.lognormal(0.0, 0.5, 300)
    fast = resampled_statistics(Sample.of(values), ["p50", "p99", "p999"], 4000, seed=2)
    explicit = np.percentile(values[rng.integers(0, 300, (4000, 300))], [50, 99, 99.9], axis=1)
    for stat, slow in zip(("p50", "p99", "p999"), explicit, strict=True):
        assert np.mean(fast[stat]) == pytest.approx(np.mean(slow), rel=0.005), stat
        assert np.std(fast[stat]) == pytest.approx(np.std(slow), rel=0.1), stat
        for q in (5, 50, 95):
            assert np.percentile(fast[stat], q) == pytest.approx(np.percentile(slow, q), rel=0.02)


def test_results_are_seeded_and_unknown_values_are_dropped() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.exponential(size=200), rng.exponential(size=200)
    with_nan = Sample.of(np.concatenate([a, [np.nan, np.inf]]))
    assert len(with_nan.values) == 200
    first = compare_stats(with_nan, Sample.of(b), {"p99": "p99"}, seed=5)
    again = compare_stats(Sample.of(a), Sample.of(b), {"p99": "p99"}, seed=5)
    assert first == again
    seeds = {compare_stats(Sample.of(a), Sample.of(b), {"m": "mean"}, seed=s)[0].ci_low
             for s in (5, 6)}  # fmt: skip
    assert len(seeds) == 2
    assert set(encode(first[0])) >= {"metric", "ratio", "ci_low", "ci_high", "significant"}


def test_too_small_samples_give_no_interval_and_no_verdict() -> None:
    (c,) = compare_stats(Sample.of([1.0]), Sample.of([2.0, 3.0]), {"m": "mean"})
    assert c.ratio == 2.5
    assert encode(c)["ci_low"] is None
    assert c.significant is False
    assert c.inconclusive == "BASE: 1 units (fewer than 10); NEW: 2 units (fewer than 10)"


def test_pooled_trials_keep_their_requests_apart() -> None:
    # Request "r0" of one trial is not request "r0" of the next.
    first = Sample.of([1.0, 2.0, 3.0], ["r0", "r0", "r1"])
    second = Sample.of([4.0, 5.0], ["r0", "r1"])
    pooled = Sample.concat([first, second, Sample.of([6.0])])
    assert pooled.clusters is not None
    assert pooled.clusters.tolist() == [0, 0, 1, 2, 3, 4]
    assert pooled.n_units == 5


def test_interval_p_value_and_significance_agree_on_randomised_inputs() -> None:
    # One rule: significant ⇔ decided and the interval excludes 1 ⇔ decided and p < α.
    rng = np.random.default_rng(31)
    seen = {True: 0, False: 0}
    for trial in range(60):
        units = int(rng.integers(12, 120))
        per_unit = int(rng.integers(1, 60))
        shift = float(rng.choice([1.0, 1.0, 1.05, 1.2, 2.0]))
        confidence = float(rng.choice([0.8, 0.9, 0.95, 0.99]))
        arms = []
        for scale in (1.0, shift):
            level = np.repeat(rng.lognormal(0.0, 0.3, units), per_unit)
            values = scale * level * rng.lognormal(0.0, 0.4, level.size)
            clusters = np.repeat(np.arange(units), per_unit) if per_unit > 1 else None
            arms.append(Sample.of(values, clusters))
        stats = {"mean": "mean", "p50": "p50", "p95": "p95", "p99": "p99"}
        for c in compare_stats(*arms, stats, resamples=300, confidence=confidence, seed=trial):
            excludes = c.ci_low > 1.0 or c.ci_high < 1.0
            assert c.significant == (excludes and c.inconclusive is None), c
            assert (c.p_value < 1.0 - confidence) == excludes, c
            assert (c.side(1.0) != 0) == excludes
            seen[c.significant] += 1
    assert min(seen.values()) > 20  # both outcomes were exercised


def test_percentile_interval_excludes_one_exactly_when_p_is_below_alpha() -> None:
    rng = np.random.default_rng(32)
    for _ in range(2000):
        size = int(rng.integers(1, 60))
        # Coarse values so that replicates tie with 1 and with each other.
        replicates = rng.integers(0, 5, size) / 2.0 + rng.choice([0.0, np.nan], size, p=[0.9, 0.1])
        confidence = float(rng.choice([0.5, 0.8, 0.9, 0.95]))
        low, high, p_value = percentile_interval(replicates, confidence)
        if np.isnan(p_value):
            assert np.isnan(replicates).all()
            continue
        assert low <= high
        assert (p_value < 1.0 - confidence) == (low > 1.0 or high < 1.0)


def test_a_quantile_resting_on_too_few_values_is_inconclusive_with_the_size_that_would_do() -> None:
    rng = np.random.default_rng(33)
    # 30 requests × 10 gaps: a p99 of 300 gaps rests on 3 of them.
    small = Sample.of(rng.lognormal(0, 0.3, 300), np.repeat(np.arange(30), 10))
    reason, needed = shortfall(small, "p99", ("requests", "gaps"))
    assert reason == f"300 gaps: a p99 needs {100 * MIN_TAIL} for {MIN_TAIL} beyond it"
    assert needed == 100  # 1000 gaps at 10 per request
    assert shortfall(small, "p50") is None and shortfall(small, "mean") is None
    few = Sample.of(rng.lognormal(0, 0.3, 40), np.repeat(np.arange(4), 10))
    assert shortfall(few, "mean", ("requests", "gaps")) == (
        f"4 requests (fewer than {MIN_UNITS})",
        MIN_UNITS,
    )
    big = Sample.of(rng.lognormal(0, 0.3, 3000), np.repeat(np.arange(100), 30))
    (c,) = compare_stats(small, big, {"p99": "p99"})
    assert c.inconclusive is not None and c.inconclusive.startswith("BASE: 300 values")
    assert not c.significant and c.needed_units == 100
    # A planted 3× change is no more decidable on 3 tail values than no change is.
    (tripled,) = compare_stats(small, Sample.of(3 * big.values, big.clusters), {"p99": "p99"})
    assert tripled.ci_low > 1.0 and not tripled.significant and tripled.inconclusive


def test_units_to_separate_scales_the_interval_as_one_over_root_n() -> None:
    c = Comparison.judge(
        "x", 1.2, (1.2 / 1.1, 1.2 * 1.1), 0.3, (1.0, 1.2), "bootstrap", 0.95, units=(50, 40)
    )
    # Half-width log(1.1) must shrink below log(1.2 / 1.1): (log 1.1 / log(1.2/1.1))² × 50.
    expected = int(np.ceil(50 * (np.log(1.1) / np.log(1.2 / 1.1)) ** 2))
    assert c.units_to_separate(1.1) == expected == 60
    assert c.units_to_separate(1.2) is None  # the ratio is the limit: no size separates it
    # Against a limit above the ratio the upper side of the interval counts.
    assert c.units_to_separate(1.5) == max(
        MIN_UNITS, int(np.ceil(50 * (np.log(1.1) / np.log(1.25)) ** 2))
    )
    # And it is what a real bootstrap does: 4× the units, about half the width.
    rng = np.random.default_rng(34)
    widths = []
    for units in (100, 400):
        arms = [Sample.of(rng.lognormal(0, 0.5, units)) for _ in range(2)]
        (m,) = compare_stats(*arms, {"m": "mean"}, seed=1)
        widths.append(np.log(m.ci_high / m.ci_low))
    assert widths[1] / widths[0] == pytest.approx(0.5, abs=0.12)


def test_a_bootstrap_p_of_zero_reads_as_below_its_resolution() -> None:
    """No replicate beyond 1 bounds p by 2/resamples; it never prints as p=0."""
    assert p_text(0.0, 2000) == "p < 0.001"
    assert p_text(0.0, 1000) == "p < 0.002"
    assert p_text(0.0123, 2000) == "p=0.012"
