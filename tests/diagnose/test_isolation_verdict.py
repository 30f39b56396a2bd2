"""The isolation verdict's rules and statistics (``diagnose.isolation``, ``isolation_gap``),
on probe TTFTs drawn with known gaps and noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from diagnose.isolation import (
    Channel,
    Resolution,
    assess,
    cache_evidence,
    detectable_below,
    overall,
)
from diagnose.isolation_gap import probes_needed, ttft_gap
from runfmt.isolation import Power
from workloads.errors import InputError

RNG = np.random.default_rng(7)


def _draws(centre_s: float, n: int = 30, noise_s: float = 0.002) -> np.ndarray:
    return RNG.normal(centre_s, noise_s, n)


def channel(hit_s: float, miss_s: float, hits=None, misses=None, n: int = 30) -> Channel:
    gap = ttft_gap(_draws(hit_s, n), _draws(miss_s, n), resamples=1000, seed=1)
    none = [None] * n
    return Channel(gap, cache_evidence(hits if hits is not None else none, misses or none))


CONTROL = channel(0.005, 0.050, hits=[1024] * 30, misses=[0] * 30)
TENTH = Resolution(0.1, True)


def test_the_gap_and_its_interval_hold_the_planted_difference():
    gap = CONTROL.gap
    assert gap.ci_low_s < -0.045 < gap.ci_high_s < 0
    assert gap.significant and gap.p_value < 0.05
    assert gap.probes_needed_95 == 1  # 45 ms apart, 2 ms of noise: one probe tells
    same = ttft_gap(_draws(0.05), _draws(0.05), resamples=1000, seed=2)
    assert same.ci_low_s < 0 < same.ci_high_s and not same.significant
    assert same.probes_needed_95 is None or same.probes_needed_95 > 10


def test_probes_needed_follow_the_noise_over_the_gap():
    assert probes_needed(-0.010, 0.001) == 1
    # 2·1.645·σ/|Δ| = 3.29 at σ = |Δ|: 11 probes averaged tell a hit at 95 %
    assert probes_needed(-0.001, 0.001) == math.ceil((2 * 1.6448536 * 1.0) ** 2)
    assert probes_needed(0.001, 0.001) is None  # hits not faster: no channel


def test_too_few_probes_are_inconclusive_with_the_number_that_would_do():
    gap = ttft_gap(_draws(0.005, 8), _draws(0.05, 8), resamples=500)
    assert gap.inconclusive and "8 probes" in gap.inconclusive and gap.needed_probes == 20
    assert not gap.significant


def test_cross_tenant_cached_tokens_are_a_leak_without_timing():
    cross = channel(0.05, 0.05, hits=[0] * 29 + [512], misses=[0] * 30)
    verdict = assess(CONTROL, cross, TENTH)
    assert (verdict.verdict, verdict.by) == ("leaks", "cached_tokens")
    assert "1 of 30 attacker probes" in verdict.sentence and "512 tokens" in verdict.sentence


def test_a_timing_gap_beyond_the_resolution_leaks():
    cross = channel(0.030, 0.050)  # cached tokens not reported, 20 ms faster
    verdict = assess(CONTROL, cross, TENTH)
    assert (verdict.verdict, verdict.by) == ("leaks", "timing")
    assert verdict.resolution_s == pytest.approx(0.1 * abs(CONTROL.gap.gap_s))


def test_no_cached_tokens_across_tenants_is_isolated_by_the_servers_word():
    cross = channel(0.050, 0.050, hits=[0] * 30, misses=[0] * 30)
    verdict = assess(CONTROL, cross, TENTH)
    assert (verdict.verdict, verdict.by) == ("isolated", "cached_tokens")
    assert "none of the 30 attacker probes" in verdict.sentence and "within ±" in verdict.sentence
    noisy = ttft_gap(_draws(0.05, 30, 0.03), _draws(0.05, 30, 0.03), resamples=1000, seed=4)
    loud = assess(CONTROL, Channel(noisy, cross.cache), TENTH)
    assert (loud.verdict, loud.by) == ("isolated", "cached_tokens")
    assert "straddles" in loud.sentence and "trials would decide" in loud.sentence


def test_without_cached_tokens_the_timing_alone_can_isolate():
    verdict = assess(CONTROL, channel(0.050, 0.050), TENTH)
    assert (verdict.verdict, verdict.by) == ("isolated", "timing")
    assert "cached tokens not reported" in verdict.sentence


def test_the_servers_word_needs_the_control_to_show_its_reporting_sees_hits():
    unseen = channel(0.005, 0.050, hits=[0] * 30, misses=[0] * 30)  # hits never reported
    cross = channel(0.050, 0.050, hits=[0] * 30, misses=[0] * 30)
    assert assess(unseen, cross, TENTH).by == "timing"


def test_a_control_without_a_gap_has_no_power():
    flat = channel(0.050, 0.050, hits=[1024] * 30, misses=[0] * 30)
    verdict = assess(flat, channel(0.05, 0.05), Resolution(0.005, False))
    assert (verdict.verdict, verdict.by) == ("inconclusive", "no_power")
    assert "use a longer prefix" in verdict.sentence and verdict.trials_needed is None


def test_a_wide_interval_is_undecided_with_the_trials_that_would_decide():
    noisy = ttft_gap(_draws(0.052, 30, 0.02), _draws(0.050, 30, 0.02), resamples=1000, seed=3)
    cross = Channel(noisy, cache_evidence([None] * 30, [None] * 30))
    verdict = assess(CONTROL, cross, TENTH)
    assert (verdict.verdict, verdict.by) == ("inconclusive", "undecided")
    assert verdict.trials_needed is not None and verdict.trials_needed > 30


def test_a_sweep_leaks_if_any_length_leaks_and_sets_powerless_lengths_aside():
    iso = assess(CONTROL, channel(0.05, 0.05, [0] * 30, [0] * 30), TENTH)
    weak = assess(channel(0.05, 0.05), channel(0.05, 0.05), Resolution(0.005, False))
    leak = assess(CONTROL, channel(0.05, 0.05, [64] * 30, [0] * 30), TENTH)
    assert overall([(64, weak), (1024, iso)]).verdict == "isolated"
    assert "no timing channel to test at 64 tokens" in overall([(64, weak), (1024, iso)]).sentence
    assert overall([(64, weak), (1024, iso), (2048, leak)]).verdict == "leaks"
    assert overall([(64, weak)]).by == "no_power"
    power = detectable_below([(64, weak_gap := channel(0.05, 0.05).gap), (1024, CONTROL.gap)])
    assert weak_gap.ci_high_s > 0
    assert power == Power(shortest_detectable_tokens=1024, longest_undetectable_tokens=64)


@pytest.mark.parametrize(
    ("text", "seconds", "relative"),
    [("10%", 0.1, True), ("2ms", 0.002, False), ("2", 0.002, False), ("0.5s", 0.5, False)],
)
def test_resolution_parses_shares_and_times(text, seconds, relative):
    r = Resolution.parse(text)
    assert r.value == pytest.approx(seconds) and r.relative is relative


@pytest.mark.parametrize("text", ["0", "-1ms", "150%", "fast", "nan"])
def test_a_bad_resolution_names_the_flag(text):
    with pytest.raises(InputError, match="--resolution"):
        Resolution.parse(text)


def test_too_few_probes_never_decide_by_timing():
    """Four probes per arm: a percentile bootstrap of their medians under-covers, so an
    interval wholly below −resolution is no leak (a real SGLang run once read −3.2 ms
    [−4.1, −1.0] across tenants, its cached tokens saying isolated)."""
    few = channel(0.030, 0.050, n=4)  # 20 ms faster, 4 probes: the interval is not read
    assert few.gap.inconclusive and few.gap.ci_high_s < -0.1 * abs(CONTROL.gap.gap_s)
    verdict = assess(CONTROL, few, TENTH)
    assert (verdict.verdict, verdict.by) == ("inconclusive", "undecided")
    assert "unread (hits: 4 probes" in verdict.sentence and verdict.trials_needed >= 10
    # the server's word still decides, and the sentence says the timing was not read
    told = Channel(few.gap, cache_evidence([0] * 4, [0] * 4))
    control = channel(0.005, 0.050, hits=[1024] * 4, misses=[0] * 4, n=4)
    verdict = assess(control, told, TENTH)
    assert (verdict.verdict, verdict.by) == ("isolated", "cached_tokens")
    assert "unread" in verdict.sentence and "trials would decide" in verdict.sentence
    # nor can an unread control give the experiment power
    flat = assess(control, channel(0.050, 0.050, n=4), TENTH)
    assert (flat.verdict, flat.by) == ("inconclusive", "no_power")
    assert "too few trials to read" in flat.sentence and flat.trials_needed >= 10
    assert detectable_below([(1024, control.gap)]).shortest_detectable_tokens is None
