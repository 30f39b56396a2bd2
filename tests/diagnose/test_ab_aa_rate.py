"""The A/B's whole decision on planted trials: how often arms that do not differ get a winner.

Each arm is three trials of four stall events, as ``diagnose ab`` runs them. Within a
trial the events are correlated (AR(1) on the log, lag-one correlation 0.6: long
prefills that queue share the gaps they overlap) and each trial has its own level (a
between-trial effect: another moment of the machine, another draw). The long prompts'
TTFT moves with the stall. The decision is ``ab_verdict.decide`` over
``ab_events.compare_events`` (trials as units) with the rule's ``decision_family``
(each comparison a winner may be named on at 97.5 %) — what ``diagnose.ab.judge`` runs.
Everything is seeded; nothing reads a clock.
"""

from __future__ import annotations

import numpy as np
import pytest

from diagnose.ab import make_arms
from diagnose.ab_events import EVENT_METRICS, EVENT_STALL, compare_events, event_values
from diagnose.ab_verdict import Decision, decide, decision_family
from diagnose.resample import Sample
from diagnose.stats import Comparison
from diagnose.trials import compare_trials
from probes.slo import Slo
from probes.stall_events import StallEvents
from runfmt.abresult import Conditions
from runfmt.metrics import json_name

TRIALS, EVENTS = 3, 4
TTFT = "event_ttft"


def trial(rng: np.random.Generator, factor: float, tau: float, sigma: float) -> StallEvents:
    """One trial's events: its own level (s.d. ``tau`` on the log), AR(1) events about it
    (s.d. ``sigma``, lag-one correlation 0.6), the stall times ``factor``."""
    phi = 0.6
    level = rng.normal(0.0, tau)
    noise = np.empty(EVENTS)
    noise[0] = rng.normal(0.0, sigma)
    for i in range(1, EVENTS):
        noise[i] = phi * noise[i - 1] + np.sqrt(1 - phi**2) * rng.normal(0.0, sigma)
    stall = 0.3 * np.exp(level + noise)
    lost = 10 * stall * np.exp(rng.normal(0.0, 0.2, EVENTS))
    ttft = 2.0 * np.exp(0.6 * (level + noise) + rng.normal(0.0, 0.1, EVENTS))
    return StallEvents(stall * factor, lost, ttft)


def experiment(seed: int, factor: float = 1.0, tau: float = 0.25, sigma: float = 0.3):
    """Two arms' trials; the second arm's stall times ``factor``."""
    rng = np.random.default_rng(seed)
    return [[trial(rng, f, tau, sigma) for _ in range(TRIALS)] for f in (1.0, factor)]


def verdict(arms_events: list[list[StallEvents]], seed: int = 0):
    """The decision on the stall (per event) and the long prompts' TTFT, no SLO."""
    arms = make_arms([512, 512], ["t", "t"])
    family = decision_family(EVENT_STALL, TTFT, None, len(arms), 0.95)

    def compare(base: int, new: int) -> dict[str, Comparison]:
        a, b = arms_events[base], arms_events[new]
        out = compare_events(
            a, b, resamples=200, confidence=0.95, seed=seed, levels=family.levels()
        )
        # the pooled-gap view the head shows beside the events (not decided on)
        (itl,) = compare_trials(
            [Sample.of(t.stall_s) for t in a], [Sample.of(t.stall_s) for t in b],
            {"itl_p99": "p99"}, resamples=200, seed=seed,
        )  # fmt: skip
        return out | {"itl_p99": itl}

    stats = [
        {json_name(m): float(np.mean([event_values(t, m).mean() for t in arm]))
         for m in EVENT_METRICS}
        for arm in arms_events
    ]  # fmt: skip
    decision = Decision(arms, stats, compare, 0, None, TTFT, EVENT_STALL, "events", 0.10, family)
    return decide(decision, Conditions())


def test_correlated_events_in_a_a_trials_rarely_name_a_winner():
    # events pooled over trials and resampled as independent, each metric at 95 %, named
    # a winner in 41 of these 100 (the between-trial level and the correlation are read as
    # a difference); trials as units with the family's level: 1 of 100
    winners = [verdict(experiment(seed), seed).winner for seed in range(100)]
    assert sum(w is not None for w in winners) <= 5


def test_a_planted_stall_is_found_on_the_stall():
    # a same-plan A/B: trials close to one another (tau 5 %), events within 10 %
    for seed in range(20):
        found = verdict(experiment(seed, factor=2.0, tau=0.05, sigma=0.1), seed)
        assert (found.arm, found.decided_by) == ("512/A", (EVENT_STALL,)), found.sentence
        assert "97.5 % (Bonferroni)" in found.rule


def events_of(stalls: list[float]) -> StallEvents:
    return StallEvents(np.asarray(stalls), np.ones(len(stalls)), np.ones(len(stalls)))


def test_each_comparison_a_winner_may_be_named_on_is_read_at_the_family_s_level():
    two = decision_family(EVENT_STALL, TTFT, None, 2, 0.95)
    assert (two.metrics, two.size, two.level) == ((EVENT_STALL, TTFT), 2, pytest.approx(0.975))
    # with SLOs their metrics join; three arms: three pairs
    slo = Slo(itl_s=0.05, ttft_s=2.0)
    three = decision_family("itl_p99", "ttft_p50[long-prompt]", slo, 3, 0.95)
    assert three.metrics == ("itl_p99", "ttft_p50[long-prompt]", "ttft_p99")
    assert three.size == 9 and three.level == pytest.approx(1 - 0.05 / 9)
    assert "one of the 9 comparisons" in three.note()
    # a stall change whose 95 % interval excludes no change but whose 97.5 % one does not:
    # significant alone, not as one of two chances to name a winner
    base, new = ([events_of([v, v * 1.02, v * 0.99, v * 1.01]) for v in arm]
                 for arm in ((1.0, 1.1, 0.95), (1.28, 1.38, 1.15)))  # fmt: skip
    alone = compare_events(base, new, resamples=200, confidence=0.95)[EVENT_STALL]
    family = compare_events(base, new, resamples=200, confidence=0.95, levels=two.levels())
    stall = family[EVENT_STALL]
    assert alone.significant and 0.025 < alone.p_value < 0.05
    assert not stall.significant and stall.ci_low < 1.0 < stall.ci_high
    assert stall.ratio == alone.ratio and stall.p_value == alone.p_value
