"""Stall events and the min-effect reading of a comparison, on inputs with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from diagnose.ab_effect import (
    EQUIVALENT,
    INCONCLUSIVE,
    SIGNIFICANT,
    effect_status,
    unit_word,
    units_to_decide,
)
from diagnose.ab_events import (
    EVENT_STALL,
    compare_events,
    event_summary,
    event_values,
    scaled,
)
from diagnose.stats import Comparison
from probes.stall_events import StallEvents


def stream(start: float, stop: float, step: float, stalls: dict[float, float]) -> np.ndarray:
    """Token times of one decode stream: a token every ``step``, and at each stall time t
    the next token ``stalls[t]`` late."""
    times, t = [], start
    while t < stop:
        times.append(t)
        late = next((extra for at, extra in stalls.items() if t <= at < t + step), 0.0)
        t += step + late
    return np.asarray(times)


def gaps_of(*streams: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.concatenate([np.diff(s) for s in streams]),
        np.concatenate([s[1:] for s in streams]),
    )


def test_each_prefill_gets_the_worst_gap_beside_it_and_the_time_it_cost():
    # two streams at 10 ms; a prefill in [1.0, 1.3] stalls both by 290 ms once; a second
    # in [2.0, 2.1] stalls nothing; a third after the streams ended is alone
    first = stream(0.0, 3.0, 0.01, {1.1: 0.29})
    second = stream(0.005, 3.0, 0.01, {1.1: 0.29})
    gap_s, end_s = gaps_of(first, second)
    events = StallEvents.measure([1.0, 2.0, 5.0], [1.3, 2.1, 5.5], [0.4, 0.2, 0.6], gap_s, end_s)
    assert len(events) == 2 and events.alone == 1
    assert events.stall_s == pytest.approx([0.30, 0.01], abs=1e-6)
    # each stream lost 290 ms to the first prefill: its one 300 ms gap over its 10 ms step
    assert events.lost_s == pytest.approx([0.58, 0.0], abs=1e-6)
    assert list(events.ttft_s) == [0.4, 0.2]
    pooled = StallEvents.concat([events, events])
    assert len(pooled) == 4 and pooled.alone == 2
    assert event_values(pooled, "event_lost") == pytest.approx([0.58, 0.0, 0.58, 0.0], abs=1e-6)


def events_of(stalls: list[float]) -> StallEvents:
    values = np.asarray(stalls)
    return StallEvents(values, values * 10, np.full(len(values), 2.0))


RNG = np.random.default_rng(7)
TWELVE = events_of(list(0.3 * RNG.lognormal(0, 0.1, 12)))
OTHER_TWELVE = events_of(list(0.3 * RNG.lognormal(0, 0.1, 12)))


def trials_of(events: StallEvents, per_trial: int) -> list[StallEvents]:
    """``events`` cut into trials of ``per_trial`` events, in order."""
    return [
        StallEvents(*(events.field(f)[i : i + per_trial] for f in ("stall_s", "lost_s", "ttft_s")))
        for i in range(0, len(events), per_trial)
    ]


def test_trials_are_the_units_a_doubled_stall_is_found_and_too_few_cannot_decide():
    base = trials_of(TWELVE, 4)
    found = compare_events(
        base, [scaled(t, EVENT_STALL, 2.0) for t in base], resamples=2000, confidence=0.95
    )
    stall = found[EVENT_STALL]
    assert stall.significant and stall.ratio == pytest.approx(2.0)
    # three trials per arm, each its mean over its four events
    assert stall.units == (3, 3) and stall.method.startswith("trials as units (each trial's")
    assert 1.8 < stall.ci_low < 2.0 < stall.ci_high < 2.2
    assert not found["event_ttft"].significant  # left alone
    assert effect_status(stall, 0.10) == SIGNIFICANT and unit_word(stall) == "trials"
    six = trials_of(events_of(list(TWELVE.stall_s[:6])), 2)
    few = compare_events(
        six, [scaled(t, EVENT_STALL, 2.0) for t in six], resamples=500, confidence=0.95
    )
    assert few[EVENT_STALL].inconclusive and not few[EVENT_STALL].significant
    assert "6 events (fewer than 10)" in few[EVENT_STALL].inconclusive
    # ten events at the two per trial these have: five trials per arm
    assert units_to_decide(few[EVENT_STALL], 0.10) == 5


def test_an_arm_summary_holds_each_mean_within_its_interval():
    block = event_summary(TWELVE, resamples=500, confidence=0.95, seed=0)
    assert block.count == 12 and block.alone == 0
    low, high = block.figures["event_stall_interval_s"]
    mean = block.figures["event_stall_mean_s"]
    assert mean == pytest.approx(TWELVE.stall_s.mean()) and low < mean < high


def comparison(ratio: float, low: float, high: float, units: int = 12) -> Comparison:
    return Comparison.judge(
        "m", ratio, (low, high), 0.5, (1.0, ratio), "events", 0.95, units=(units, units)
    )


@pytest.mark.parametrize(
    ("interval", "status"),
    [
        ((1.0, 0.95, 1.05), EQUIVALENT),  # within ±10 %
        ((0.995, 0.993, 0.997), EQUIVALENT),  # significant, and too small to matter
        ((0.5, 0.4, 0.6), SIGNIFICANT),
        ((0.04, 0.04, 3.09), INCONCLUSIVE),  # −96 % [−96, +209]: says nothing
        ((1.02, 0.88, 1.15), INCONCLUSIVE),  # near no change, but ±10 % not ruled out
    ],
)
def test_min_effect_reads_an_interval_three_ways(interval, status):
    assert effect_status(comparison(*interval), 0.10) == status


def test_the_data_that_would_decide_follows_compare_s_rule():
    far = comparison(0.04, 0.04, 3.09)
    # beyond the band: the size at which the interval would exclude no change
    assert units_to_decide(far, 0.10) == far.units_to_separate(1.0)
    near = comparison(1.02, 0.88, 1.15)
    # within it: the size at which the interval fits inside ±10 %, its farther side first
    assert units_to_decide(near, 0.10) == max(
        near.units_to_separate(0.9), near.units_to_separate(1.1)
    )
    assert units_to_decide(near, 0.10) > 12
    assert units_to_decide(comparison(0.5, 0.4, 0.6), 0.10) is None  # decided
