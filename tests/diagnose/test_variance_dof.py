"""Different draws: the Student t floor takes the degrees of freedom of each run's own
bootstrap variance (``diagnose.draws.variance_dof``), not units − 1. A variance that rests
on a few units, or a quantile's variance (it hangs on the few values near the quantile), is
a noisy estimate, and a t interval that trusts it as if it had units − 1 degrees of freedom
calls too many A/A pairs different."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from diagnose.compare import RunSamples, compare_samples
from diagnose.draws import draw_widening, studentized_part, variance_dof
from diagnose.metrics import metric_spec
from diagnose.resample import resampled_statistics, seed_sequence
from diagnose.stats import Sample, compare_stats, percentile_interval
from probes.token_gaps import TokenGaps

RESAMPLES = 400
UNITS = 40


def few_noisy_units(rng: np.random.Generator, noisy: int = 2, level: float = 1.0) -> np.ndarray:
    """One draw of ``UNITS`` units that are all alike but for ``noisy`` of them, which carry
    all the variance: a variance estimate resting on two units has about two degrees of
    freedom, whatever the units."""
    logs = rng.normal(0.0, 0.002, UNITS)
    logs[rng.choice(UNITS, noisy, replace=False)] += rng.normal(0.0, 0.05, noisy)
    return level * np.exp(logs)


def draws_of(values: np.ndarray, stat: str, seed: int, sample: Sample | None = None):
    """A run's log replicates of ``stat`` and each resample's draws per unit."""
    sample = sample or Sample.of(values)
    counts = np.zeros((RESAMPLES, sample.n_units), dtype=np.int32)
    replicates = resampled_statistics(sample, [stat], RESAMPLES, seed, counts=counts)[stat]
    return np.log(replicates), counts


def called_with_units_less_one(base: np.ndarray, new: np.ndarray, seed: int) -> bool:
    """What the floor decided before: the same bootstrap, each run's t part with units − 1
    degrees of freedom (no draw counts)."""
    samples = Sample.of(base), Sample.of(new)
    seeds = seed_sequence(seed).spawn(2)
    reps = [
        resampled_statistics(x, ["mean"], RESAMPLES, s)["mean"]
        for x, s in zip(samples, seeds, strict=True)
    ]
    parts = [studentized_part(np.log(r), x, "mean") for r, x in zip(reps, samples, strict=True)]
    assert [p[1] for p in parts] == [UNITS - 1, UNITS - 1]
    logs, _ = draw_widening(np.log(reps[1] / reps[0]), parts, 0.95)
    low, high, _ = percentile_interval(np.exp(logs), 0.95)
    return bool(low > 1.0 or high < 1.0)


def called(base: np.ndarray, new: np.ndarray, seed: int) -> bool:
    (c,) = compare_stats(
        Sample.of(base), Sample.of(new), {"m": "mean"}, resamples=RESAMPLES, seed=seed,
        draws=True, batch_means=False,
    )  # fmt: skip
    # one rule: the widened interval, its p-value and "significant" agree
    assert c.significant == (c.ci_low > 1.0 or c.ci_high < 1.0) == (c.p_value < 0.05)
    return c.significant


def test_a_variance_resting_on_two_units_has_about_two_degrees_of_freedom():
    rng = np.random.default_rng(5)
    dofs = [variance_dof(*draws_of(few_noisy_units(rng), "mean", i)) for i in range(40)]
    # units − 1 would be 39; the estimate sees that two units carry the variance
    assert 2.0 <= np.median(dofs) <= 6.0
    assert np.percentile(dofs, 90) < 12.0
    # alike units: the plug-in variance has its units − 1 (the cap) in most runs
    alike = [
        variance_dof(*draws_of(np.exp(rng.normal(0.0, 0.05, UNITS)), "mean", i)) for i in range(40)
    ]
    assert np.median(alike) == UNITS - 1
    assert min(alike) >= 5.0


def test_a_a_pairs_whose_variance_rests_on_two_units_are_a_a_again_with_its_dof():
    rng = np.random.default_rng(5)
    pairs = [(few_noisy_units(rng), few_noisy_units(rng)) for _ in range(400)]
    before = sum(called_with_units_less_one(b, n, i) for i, (b, n) in enumerate(pairs))
    after = sum(called(b, n, i) for i, (b, n) in enumerate(pairs))
    # with units − 1 the t interval trusts a two-unit variance: 7 % of A/A pairs "differ"
    # (a 5 % rate gives 20 of 400, its binomial spread ±9)
    assert before >= 26
    # with each run's own degrees of freedom: at most the 5 % the interval claims
    assert after <= 16


def test_a_planted_change_is_still_decided_with_few_degrees_of_freedom():
    rng = np.random.default_rng(8)
    pairs = [(few_noisy_units(rng), few_noisy_units(rng, level=1.015)) for _ in range(100)]
    assert sum(called(b, n, i) for i, (b, n) in enumerate(pairs)) >= 90


def clustered_run(rng: np.random.Generator, clusters: int = 21, per: int = 19) -> Sample:
    """Requests in time blocks (a block effect and each request's own spread), as the
    different-draws comparison resamples them: the pooled median's bootstrap variance
    rests on the block scores and the values near the median."""
    level = np.repeat(rng.normal(0.0, 0.3, clusters), per)
    values = np.exp(level + rng.normal(0.0, 0.5, clusters * per))
    return Sample.of(values, np.repeat(np.arange(clusters), per))


def test_a_quantiles_dof_is_the_variability_of_its_variance_across_draws():
    # A pooled p50 over 21 blocks: units − 1 = 20 would claim the variance estimate varies
    # between draws by a relative variance of 2/20 = 0.10. It varies by ~0.18 (about 11
    # degrees of freedom), and each run's own estimate says so on average.
    rng = np.random.default_rng(13)
    variances, predicted = [], []
    for i in range(150):
        logs, counts = draws_of(np.empty(0), "p50", i, clustered_run(rng))
        variances.append(np.var(logs))
        predicted.append(2.0 / variance_dof(logs, counts))
    variances = np.asarray(variances)
    observed = variances.var() / variances.mean() ** 2
    assert observed > 0.14  # far more than units − 1 says
    assert np.mean(predicted) == pytest.approx(observed, rel=0.25)


def test_no_counts_no_units_no_dof():
    logs = np.log(np.linspace(1.0, 2.0, 50))
    assert variance_dof(logs, None) is None
    assert variance_dof(logs, np.ones((50, 1), dtype=np.int32)) is None
    # replicates of no spread: no variance to judge
    assert variance_dof(np.zeros(50), np.ones((50, 3), dtype=np.int32)) is None


def test_one_draw_is_compared_as_before():
    # same-seed comparisons do not read the draws per unit: the Beta order statistics of
    # independent values, no widening
    rng = np.random.default_rng(2)
    base, new = Sample.of(rng.normal(10, 1, 300)), Sample.of(rng.normal(10, 1, 300))
    (one,) = compare_stats(base, new, {"m": "p50"}, resamples=RESAMPLES, seed=4)
    reps = [
        resampled_statistics(x, ["p50"], RESAMPLES, s)["p50"]
        for x, s in zip((base, new), seed_sequence(4).spawn(2), strict=True)
    ]
    assert (one.ci_low, one.ci_high) == percentile_interval(reps[1] / reps[0], 0.95)[:2]
    assert one.method == "bootstrap"


def stalled_streams(rng: np.random.Generator, streams: int = 10, tokens: int = 2000) -> RunSamples:
    """Decode streams whose gaps are 50 ms but for a dozen stall steps, all in the run's
    first 30 s, each stalling every stream for four steps of 0.5 s (an ``interference``
    run: the long prompts come early, the streams outlast them). About 2.4 % of the gaps
    are stalls, so the pooled p99 sits on them, in a few of the run's time blocks."""
    at = np.sort(rng.uniform(0.0, 30.0, 12))
    gaps = np.full((streams, tokens), 0.05)
    for t in at:
        k = int(np.searchsorted(np.cumsum(gaps[0]), t))
        gaps[:, k : k + 4] = 0.5
    token_gaps = TokenGaps(
        gaps.ravel(), np.repeat(np.arange(streams), tokens), np.cumsum(gaps, axis=1).ravel(),
        np.arange(streams).astype(object),
    )  # fmt: skip
    return RunSamples(
        path=Path("run"), run=None, latencies=pd.DataFrame({"ttft_s": [1.0]}), gaps=token_gaps,
        throughput=pd.DataFrame(), requests=streams,
    )  # fmt: skip


def test_itl_gaps_keep_units_less_one_degrees_of_freedom():
    # A pooled p99 that rests on the few time blocks with stalls: a resample that draws too
    # few of them drops it ten-fold, and its variance estimate has a degree of freedom or
    # two. Gaps keep units − 1 (diagnose.compare: their blocks are not alike by design).
    rng = np.random.default_rng(3)
    base, new = stalled_streams(rng), stalled_streams(rng)
    (row,) = compare_samples(
        base, new, metrics=["itl_p99"], resamples=RESAMPLES, draws="the seeds differ"
    ).rows
    units = row.comparison.units
    assert f"{units[0] - 1:.1f}, {units[1] - 1:.1f} dof" in row.comparison.method
    spec = metric_spec("itl_p99")
    (own,) = compare_stats(
        base.sample(spec, draws=True), new.sample(spec, draws=True), {"m": "p99"},
        resamples=RESAMPLES, draws=True, batch_means=False,
    )  # fmt: skip
    dofs = own.method.split("lags; ")[1].split(" dof")[0].split(", ")
    assert all(float(d) < 5.0 for d in dofs)
    assert own.ci_high / own.ci_low > 2.0 * (row.comparison.ci_high / row.comparison.ci_low)
