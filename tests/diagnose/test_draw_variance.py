"""Different draws: the interval carries the variance between draws that a bootstrap of one
run's units cannot see (``diagnose.draws``' batch means over time batches)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from diagnose.compare import RunSamples, compare_samples
from diagnose.draws import (
    autocorrelation_inflation,
    autocorrelation_lags,
    draw_batches,
    draw_variance,
    draw_widening,
    mean_bound,
)
from diagnose.gate import SIGNIFICANT
from diagnose.stats import Sample, compare_stats
from probes.stall_events import RunStalls, StallEvents
from probes.token_gaps import TokenGaps

RESAMPLES = 400


def drifting_run(rng: np.random.Generator, units: int = 120, level: float = 1.0) -> np.ndarray:
    """One draw: values whose level wanders through the run (AR(1), ρ = 0.8, as a queue
    that builds and drains), with a little independent noise per unit. Two draws share
    the mean, but each run's own mean sits wherever its wander took it."""
    wander = np.empty(units)
    wander[0] = rng.normal(0.0, 1.0)
    for i in range(1, units):
        wander[i] = 0.8 * wander[i - 1] + rng.normal(0.0, math.sqrt(1 - 0.8**2))
    return level * np.exp(0.1 * wander + rng.normal(0.0, 0.01, units))


def called_different(pairs: list[tuple[np.ndarray, np.ndarray]], draws: bool, stat: str) -> int:
    found = 0
    for i, (base, new) in enumerate(pairs):
        (c,) = compare_stats(
            Sample.of(base), Sample.of(new), {"m": stat}, resamples=RESAMPLES, seed=i, draws=draws
        )
        found += c.significant
    return found


@pytest.mark.parametrize("stat", ["mean", "p50"])
def test_a_a_pairs_of_drifting_draws_are_significant_only_without_the_between_draw_part(stat):
    rng = np.random.default_rng(7)
    pairs = [(drifting_run(rng), drifting_run(rng)) for _ in range(60)]
    # per-unit resampling sees the 1 % noise, not the wander: a third or more of the A/A
    # pairs "differ" (a 5 % rate would give about 3)
    assert called_different(pairs, draws=False, stat=stat) >= 20
    # with the batch means of each run's time batches the pairs are A/A again (of 60
    # pairs, 6 is the upper end of a 5 % rate's binomial spread)
    assert called_different(pairs, draws=True, stat=stat) <= 6


def test_a_planted_change_beyond_the_wander_is_still_detected():
    rng = np.random.default_rng(11)
    pairs = [(drifting_run(rng), drifting_run(rng, level=1.5)) for _ in range(30)]
    assert called_different(pairs, draws=True, stat="mean") == 30


def test_a_run_level_offset_inside_each_run_widens_the_interval_and_its_verdict_agrees():
    # BASE: a burst of slow units in the middle of the run; NEW: steady, its mean 5 % under
    # BASE's. Per unit the difference is decided; by time batches it is not.
    rng = np.random.default_rng(3)
    base = np.r_[np.full(40, 1.0), np.full(40, 1.3), np.full(40, 1.0)] + rng.normal(0, 0.01, 120)
    new = np.full(120, 1.05) + rng.normal(0, 0.01, 120)
    one, two = (
        compare_stats(Sample.of(base), Sample.of(new), {"m": "mean"}, resamples=RESAMPLES,
                      draws=draws)[0]
        for draws in (False, True)
    )  # fmt: skip
    assert one.significant and one.method == "bootstrap"
    assert two.ci_high - two.ci_low > 3 * (one.ci_high - one.ci_low)
    assert "widened" in two.method and "the seeds differ" in two.method
    # one rule: significant exactly when the widened interval excludes 1, and p agrees
    assert two.significant == (two.ci_low > 1.0 or two.ci_high < 1.0)
    assert two.significant == (two.p_value < 0.05)
    assert not two.significant


def test_draw_variance_is_batch_means_of_units_in_time_order():
    values = np.r_[np.full(14, 1.0), np.full(13, 2.0)]
    variance, dof = draw_variance(Sample.of(values), "mean")
    # 27 units → 27^⅓ = 3 contiguous batches of 9: all 1, five 1 and four 2, all 2
    logs = np.log([1.0, 13.0 / 9.0, 2.0])
    assert dof == 2
    assert variance == pytest.approx(np.var(logs, ddof=1) / 3)
    # the same values interleaved in time: every batch alike, hardly any spread
    alternating = np.r_[np.tile([1.0, 2.0], 13), 1.0]
    assert draw_variance(Sample.of(alternating), "mean")[0] < variance / 20
    assert [draw_batches(n) for n in (2, 11, 27, 120, 1000)] == [2, 2, 3, 5, 10]


def test_clusters_are_numbered_in_time_order_whatever_order_the_values_come_in():
    sample = Sample.of([5.0, 6.0, 1.0, 2.0], clusters=[7, 7, 2, 3])
    assert sample.clusters.tolist() == [2, 2, 0, 1]


def test_no_widening_when_the_bootstrap_is_already_wider():
    logs = np.random.default_rng(0).normal(0.0, 0.5, 1000)
    same, factor = draw_widening(logs, [(1e-6, 3), (1e-6, 3)], 0.95)
    assert factor == 1.0 and same is logs
    wide, factor = draw_widening(logs, [(0.25, 3), (0.25, 3)], 0.95)
    assert factor > 1.0
    assert np.std(wide) == pytest.approx(factor * np.std(logs))


def test_stall_events_come_in_the_order_of_their_starts():
    gap_s = np.full(40, 0.01)
    gap_end_s = np.arange(1, 41) * 0.1
    gap_s[9] = 0.05  # ends at 1.0: inside the prefill [0.9, 1.2]
    events = StallEvents.measure(
        [2.5, 0.9, math.nan], [2.8, 1.2, 3.0], [0.3, 0.3, 0.1], gap_s, gap_end_s
    )
    assert events.stall_s.tolist() == pytest.approx([0.05, 0.01])
    assert events.alone == 1


def stall_run(lost_s: np.ndarray) -> RunSamples:
    """A run whose long prompts' events cost ``lost_s`` each, in the order they started,
    each stretching one decode gap into a stall gap."""
    n = len(lost_s)
    events = StallEvents(np.full(n, 0.1), np.asarray(lost_s, float), np.ones(n), stalled_gaps=n)
    empty = np.empty(0)
    gaps = TokenGaps(empty, np.empty(0, dtype=np.int64), empty, np.empty(0, dtype=object))
    return RunSamples(
        path=Path("run"), run=None, latencies=pd.DataFrame({"ttft_s": [1.0]}), gaps=gaps,
        throughput=pd.DataFrame(), requests=len(lost_s),
        stalls=RunStalls("long-prompt", events, 1000),
    )  # fmt: skip


def test_stall_events_of_two_draws_whose_queues_built_differently_are_not_called_different():
    # Long prompts queue behind one another, so each event costs more than the one before
    # as the queue builds; how fast it built is the draw's. Both runs' events span 20-30 s
    # lost, in different shapes: per event, BASE's mean is decided apart from NEW's.
    ramp = np.linspace(0.0, 1.0, 24)
    base, new = stall_run(20 + 10 * ramp**2), stall_run(20 + 10 * np.sqrt(ramp))
    one = compare_samples(base, new, metrics=["stall_lost"], resamples=RESAMPLES)
    (row,) = one.rows
    assert row.status == SIGNIFICANT and one.draws is None
    two = compare_samples(
        base, new, metrics=["stall_lost"], resamples=RESAMPLES, draws="the seeds differ"
    )
    (row,) = two.rows
    assert row.status != SIGNIFICANT and "widened" in row.comparison.method
    assert row.comparison.ci_low < 1.0 < row.comparison.ci_high
    # a planted doubling of every event is still decided between the two draws
    doubled = compare_samples(
        base, stall_run(2 * (20 + 10 * np.sqrt(ramp))), metrics=["stall_lost"],
        resamples=RESAMPLES, draws="the seeds differ",
    )  # fmt: skip
    assert doubled.rows[0].status == SIGNIFICANT and doubled.rows[0].comparison.ci_low > 1.25


def correlated_run(rng: np.random.Generator, units: int = 200) -> np.ndarray:
    """One draw whose neighbouring units share a shock (MA(1), θ = 1: lag-1 correlation
    ½, none beyond): requests a block apart meet the same queue. The run's mean varies
    twice as much between draws as independent units would say."""
    shocks = rng.normal(0.0, 1.0, units + 1)
    return np.exp(0.05 * (shocks[1:] + shocks[:-1]))


def test_autocorrelation_inflation_reads_the_correlation_between_neighbouring_units():
    rng = np.random.default_rng(5)
    independent = Sample.of(np.exp(rng.normal(0.0, 0.05, 2000)))
    neighbours = Sample.of(correlated_run(rng, 2000))
    # independent units: only the bootstrap's plug-in factor n/(n − 1) (and noise)
    assert autocorrelation_inflation(independent, "mean") == pytest.approx(1.0, abs=0.15)
    # MA(1): long-run variance 2× the lag-0 one; Bartlett over 13 lags sees 1 + 13/14
    assert autocorrelation_inflation(neighbours, "mean") == pytest.approx(1.93, rel=0.15)
    assert autocorrelation_inflation(neighbours, "p50") == pytest.approx(1.93, rel=0.2)
    assert autocorrelation_lags(2000) == 13 and autocorrelation_lags(21) == 3
    # a negative correlation (alternating units) never narrows below the plug-in factor
    alternating = Sample.of(np.tile([1.0, 2.0], 50))
    assert autocorrelation_inflation(alternating, "mean") == pytest.approx(100 / 99)
    # time blocks hold their neighbours' correlation by construction: the plug-in factor
    blocked = Sample.of(neighbours.values, np.arange(2000) // 10)
    assert autocorrelation_inflation(blocked, "mean") == pytest.approx(200 / 199)


@pytest.mark.parametrize("stat", ["mean", "p50"])
def test_a_a_pairs_of_correlated_draws_are_decided_by_the_autocorrelation_not_batches(stat):
    rng = np.random.default_rng(17)
    pairs = [(correlated_run(rng), correlated_run(rng)) for _ in range(60)]

    def called(draws: bool) -> int:
        return sum(
            compare_stats(Sample.of(base), Sample.of(new), {"m": stat}, resamples=RESAMPLES,
                          seed=i, draws=draws, batch_means=False)[0].significant
            for i, (base, new) in enumerate(pairs)
        )  # fmt: skip

    # independent units: the interval is √2 too narrow, about 17 % of A/A pairs "differ"
    assert called(False) >= 6
    # the Student t interval with the units' autocorrelation (no batch means): A/A again
    assert called(True) <= 4


def test_the_studentized_widening_names_itself_and_keeps_one_rule():
    rng = np.random.default_rng(23)
    base, new = Sample.of(correlated_run(rng)), Sample.of(correlated_run(rng) * 1.01)
    (same,) = compare_stats(base, new, {"m": "mean"}, resamples=RESAMPLES)
    (two,) = compare_stats(base, new, {"m": "mean"}, resamples=RESAMPLES, draws=True,
                           batch_means=False)  # fmt: skip
    assert same.method == "bootstrap"  # one draw: as before, no widening
    assert "Student t interval" in two.method and "the seeds differ" in two.method
    assert "time batches" not in two.method
    assert two.ci_high - two.ci_low > 1.3 * (same.ci_high - same.ci_low)
    assert two.significant == (two.ci_low > 1.0 or two.ci_high < 1.0)
    assert two.significant == (two.p_value < 0.05)


def test_a_mean_of_events_varies_between_draws_no_more_than_one_event_does():
    # A large budget prefills a queue of long prompts in one step: NEW's first nine events
    # stall 0.42 s, its last six (three prompts queued, twice) 1.25 s; BASE's all 0.05 s.
    # Two time batches per run read the halves' difference as a variance with one degree
    # of freedom (t = 12.7): an interval from /36 to x560 around a 15x change. However its
    # events correlate, a run's mean varies between draws no more than one event does.
    rng = np.random.default_rng(4)
    base = stall_run(0.05 * rng.lognormal(0.0, 0.01, 15))
    new = stall_run(np.r_[np.full(9, 0.42), np.full(6, 1.25)] * rng.lognormal(0.0, 0.01, 15))
    draws = "the seeds differ"
    (row,) = compare_samples(
        base, new, metrics=["stall_lost"], resamples=RESAMPLES, draws=draws
    ).rows
    assert row.status == SIGNIFICANT and row.comparison.ci_low > 3.0
    assert "no more than one value does" in row.comparison.method
    (back,) = compare_samples(
        new, base, metrics=["stall_lost"], resamples=RESAMPLES, draws=draws
    ).rows
    assert back.status == SIGNIFICANT and back.comparison.ci_high < 1 / 3.0
    values = new.stalls.events.lost_s
    bound = mean_bound(Sample.of(values), "mean")
    assert bound == (pytest.approx(np.var(values, ddof=1) / np.mean(values) ** 2), 14)
    assert mean_bound(Sample.of(values), "p50") is None
