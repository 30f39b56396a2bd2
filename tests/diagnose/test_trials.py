"""Trials as units: the random-effects combination of an A/B's trials (``diagnose.trials``)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats as sps

from diagnose.stats import Comparison, Sample, compare_stats
from diagnose.trials import ArmTrials, compare_trials, random_effects, trial_interval


def test_trial_interval_is_welch_t_on_logs() -> None:
    base, new = [1.00, 1.08, 0.95], [1.30, 1.21, 1.40]
    ratio, low, high, p_value = trial_interval(base, new)
    expected = sps.ttest_ind(np.log(new), np.log(base), equal_var=False)
    assert p_value == pytest.approx(expected.pvalue)
    ci = expected.confidence_interval(0.95)
    assert (low, high) == pytest.approx((np.exp(ci.low), np.exp(ci.high)))
    assert ratio == pytest.approx(np.exp(np.mean(np.log(new)) - np.mean(np.log(base))))


def _trials(
    rng: np.random.Generator, offsets: list[float] | np.ndarray, n: int = 2000
) -> list[Sample]:
    return [Sample.of(off * rng.lognormal(0.0, 0.3, n)) for off in offsets]


def test_trial_to_trial_variation_is_not_mistaken_for_a_difference() -> None:
    # Each trial of an arm runs at its own level (warm-up, neighbours, thermal state):
    # pooled, 6000 requests per arm look decisive; as trials, they are three per arm.
    rng = np.random.default_rng(21)
    base = _trials(rng, [1.00, 1.12, 0.90])
    new = _trials(rng, [1.08, 0.94, 1.15])
    pooled = compare_stats(Sample.concat(base), Sample.concat(new), {"p50": "p50"})[0]
    assert pooled.significant
    (c,) = compare_trials(base, new, {"p50": "p50"})
    assert c.method.startswith("trials as units, random effects (between-trial tau 1")
    assert "t interval" in c.method
    assert not c.significant and c.units == (3, 3) and c.resamples is None
    assert c.ci_high / c.ci_low > pooled.ci_high / pooled.ci_low


def test_trials_with_a_real_shift_and_little_trial_noise() -> None:
    rng = np.random.default_rng(22)
    base = _trials(rng, [1.0, 1.0, 1.0], n=300)
    new = _trials(rng, [1.4, 1.4, 1.4], n=300)
    (c,) = compare_trials(base, new, {"mean": "mean"})
    assert c.method.startswith("trials as units, random effects")
    assert c.significant and c.p_value < 0.05
    assert c.ci_low < 1.4 < c.ci_high
    per_trial = [np.mean(s.values) for s in new]
    assert min(per_trial) <= c.new <= max(per_trial)  # a mean of the trials' statistics
    with pytest.raises(ValueError):
        compare_trials(base[:1], new, {"mean": "mean"})


def _fixed_effect_z(arms: list[ArmTrials]) -> tuple[float, float]:
    """The pooled view of the trials (what a bootstrap of all trials pooled estimates):
    inverse-variance means, their sampling variance alone, normal quantiles; and the
    p-value of Cochran's Q, by which the replaced rule chose it (p ≥ 0.2)."""
    means, variance, q = [], 0.0, 0.0
    for arm in arms:
        w = 1.0 / arm.variances
        means.append(np.sum(w * arm.logs) / np.sum(w))
        variance += 1.0 / np.sum(w)
        q += np.sum(w * (arm.logs - means[-1]) ** 2)
    z = (means[1] - means[0]) / np.sqrt(variance)
    return 2.0 * sps.norm.sf(abs(z)), sps.chi2.sf(q, sum(len(a.logs) - 1 for a in arms))


def test_a_between_trial_variance_cochrans_q_passes_does_not_fool_it() -> None:
    # Three trials per arm, between-trial sd 1.5× a trial's sampling sd: Cochran's Q (4
    # dof) lands just over the replaced rule's 0.2 (p 0.2–0.35) in about a tenth of the
    # A/A cases. In exactly those the pooled view (sampling variance alone) called a
    # difference in over a quarter; random effects stays under 5 %.
    rng = np.random.default_rng(41)
    pooled = combined = cases = 0
    while cases < 400:
        sampling = rng.uniform(0.8, 1.25, (2, 3))
        logs = rng.normal(0.0, np.sqrt(sampling + 1.5**2))
        arms = [ArmTrials(y, v) for y, v in zip(logs, sampling, strict=True)]
        p_pooled, p_q = _fixed_effect_z(arms)
        if not 0.2 <= p_q < 0.35:
            continue
        cases += 1
        pooled += p_pooled < 0.05
        found = random_effects(*arms, 0.95)
        assert found is not None
        excludes = found.low > 0.0 or found.high < 0.0
        assert excludes == (found.p_value < 0.05)  # one decision
        combined += excludes
    assert pooled / cases >= 0.2, pooled
    assert combined / cases <= 0.06, combined
    print(f"Q just over 0.2: pooled {pooled}/{cases}, random effects {combined}/{cases}")


def test_seeded_a_a_trials_with_between_trial_variance_are_rarely_called_different() -> None:
    # 200 A/A pairs of three trials per arm, each trial at its own level (sd 1.5× the
    # sampling sd of its p50). The pooled bootstrap of all trials is confidently wrong
    # in over a fifth (50 of 200); trials as units in 7 (40 of 1000 seeds) — and a planted 1.3× is
    # still found (49 of 50; 986 of 1000 seeds), its interval covering 1.3 (the
    # trials' levels differ between the arms too: about 95 % of the time).
    sampling_sd = 0.3 * 1.2533 / np.sqrt(200)  # of a log p50 of 200 lognormal(0, 0.3)
    pooled = combined = detected = covered = 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        base, new = (_trials(rng, np.exp(rng.normal(0.0, 1.5 * sampling_sd, 3)), 200)
                     for _ in range(2))  # fmt: skip
        metric = {"p50": "p50"}
        pooled += compare_stats(Sample.concat(base), Sample.concat(new), metric,
                                resamples=200, seed=seed)[0].significant  # fmt: skip
        (c,) = compare_trials(base, new, metric, resamples=200, seed=seed)
        assert c.significant == (c.p_value < 0.05) == (c.ci_low > 1.0 or c.ci_high < 1.0)
        combined += c.significant
        if seed < 50:
            planted = [Sample.of(1.3 * s.values) for s in new]
            (d,) = compare_trials(base, planted, metric, resamples=200, seed=seed)
            detected += d.significant and d.ratio > 1.0
            covered += d.ci_low < 1.3 < d.ci_high
    print(f"A/A: pooled {pooled}/200, trials {combined}/200; 1.3x {detected}/50, {covered}")
    assert pooled >= 40, pooled
    assert combined <= 12, combined
    assert detected >= 48 and covered >= 45, (detected, covered)


def test_one_trial_whose_tail_quantile_looks_precise_does_not_outweigh_the_others() -> None:
    # An A/A's ITL p99 per trial (656 gaps: 6 beyond the p99) and its bootstrap sd (log):
    # weighted by 1/(v + tau²), the first trial's 0.06 made A's level its 22 ms and the
    # interval −37 % [−53, −14]. Weighted alike, the trials say what they can.
    a = ArmTrials(np.log([0.0224, 0.0479, 0.0269]), np.array([0.062, 0.747, 0.177]) ** 2)
    b = ArmTrials(np.log([0.0378, 0.0291, 0.0395]), np.array([0.195, 0.292, 0.286]) ** 2)
    found = random_effects(b, a, 0.95)
    assert found is not None and found.low < 0.0 < found.high and found.p_value > 0.05
    assert np.exp(found.means[1]) == pytest.approx((0.0224 * 0.0479 * 0.0269) ** (1 / 3))


def test_the_interval_widens_smoothly_with_the_between_trial_spread() -> None:
    # No threshold: the same trials spread a little further each time give an interval
    # that never narrows, and tau grows from zero.
    sampling = np.full(3, 0.01**2)
    pattern = np.array([-1.0, 0.2, 0.8])
    widths, taus = [], []
    for spread in np.linspace(0.0, 0.05, 26):
        base = ArmTrials(spread * pattern, sampling)
        new = ArmTrials(0.02 + spread * pattern[::-1], sampling)
        found = random_effects(base, new, 0.95)
        assert found is not None
        widths.append(found.high - found.low)
        taus.append(found.tau)
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(widths))
    assert taus[0] == 0.0 and all(b >= a for a, b in itertools.pairwise(taus))
    assert widths[-1] > 3 * widths[0]
    # Identical trials: the trials' own sampling sets the floor (normal quantile).
    same = random_effects(ArmTrials(np.zeros(3), sampling), ArmTrials(np.zeros(3), sampling), 0.95)
    assert same is not None and same.floored
    assert same.high == pytest.approx(sps.norm.ppf(0.975) * np.sqrt(2 * 0.01**2 / 3))


def test_two_trials_per_arm_give_an_honest_wide_interval() -> None:
    rng = np.random.default_rng(23)
    base, new = _trials(rng, [1.0, 1.05], n=500), _trials(rng, [1.1, 1.16], n=500)
    (two,) = compare_trials(base, new, {"p50": "p50"})
    (three,) = compare_trials(
        [*base, *_trials(rng, [0.97], 500)], [*new, *_trials(rng, [1.13], 500)], {"p50": "p50"}
    )
    assert two.units == (2, 2)
    dof = float(two.method.split(", ")[-1].split(" dof")[0].split()[-1])
    assert 1.0 <= dof <= 2.0  # one degree of freedom per arm (Welch–Satterthwaite)
    assert np.log(two.ci_high / two.ci_low) > 1.5 * np.log(three.ci_high / three.ci_low)


def test_trials_without_a_statistic_or_a_sampling_variance() -> None:
    rng = np.random.default_rng(24)
    base, new = _trials(rng, [1.0, 1.0, 1.0], n=40), _trials(rng, [1.0, 1.0, 1.0], n=40)
    # A trial with no values of the metric (a kind it did not send) is left out.
    (c,) = compare_trials([*base[:2], Sample.of([])], new, {"p50": "p50"})
    assert np.isfinite(c.ratio) and c.units == (3, 3)
    (none,) = compare_trials([base[0], Sample.of([]), Sample.of([])], new, {"p50": "p50"})
    assert not none.significant and np.isnan(none.ci_low)
    assert none.inconclusive is not None
    # One-value trials have no bootstrap: the trials are weighted alike (Welch's t).
    singles = [Sample.of([v]) for v in (1.0, 1.1, 0.9)]
    doubled = [Sample.of([2 * v]) for v in (1.05, 0.95, 1.0)]
    (w,) = compare_trials(singles, doubled, {"mean": "mean"})
    assert w.method.startswith("trials as units, Welch t")
    assert (w.ratio, w.ci_low, w.ci_high, w.p_value) == pytest.approx(
        trial_interval([1.0, 1.1, 0.9], [2.1, 1.9, 2.0])
    )
    # … and the pooled data's minimums still decide, the need given in trials.
    assert w.inconclusive is not None and w.needed_units == 10
    # Trials whose bootstrap never moves (every value alike): weighted, finite, decided.
    flat = [Sample.of(np.full(30, v)) for v in (1.0, 1.0, 1.0)]
    slower = [Sample.of(np.full(30, v)) for v in (1.2, 1.2, 1.2)]
    with np.errstate(all="raise"):
        (f,) = compare_trials(flat, slower, {"p50": "p50"})
    assert f.ratio == pytest.approx(1.2) and f.significant and f.ci_low > 1.19


def test_the_units_needed_are_counted_in_trials() -> None:
    rng = np.random.default_rng(25)
    # 3 trials × 4 requests: the pooled p50 needs 20 values, i.e. 5 trials of 4.
    base, new = _trials(rng, [1.0] * 3, n=4), _trials(rng, [1.0] * 3, n=4)
    (c,) = compare_trials(base, new, {"p50": "p50"})
    assert c.inconclusive is not None and "12 values" in c.inconclusive
    assert c.needed_units == 5 and c.units == (3, 3)


def test_trials_needed_to_separate_are_not_floored_at_the_bootstraps_minimum() -> None:
    # −20 % [−34, −3] on 3 trials per arm against a limit of 0.9: (log(0.97/0.8) /
    # log(0.9/0.8))² × 3 = 8.0 trials, where a bootstrap's units could not go below 10.
    as_trials = Comparison.judge(
        "x", 0.8, (0.66, 0.97), 0.03, (1.0, 0.8), "trials as units, Welch t", 0.95,
        units=(3, 3),
    )  # fmt: skip
    expected = int(np.ceil(3 * (np.log(0.97 / 0.8) / np.log(0.9 / 0.8)) ** 2))
    assert as_trials.units_to_separate(0.9) == expected and 4 < expected < 10
    assert replace(as_trials, method="bootstrap").units_to_separate(0.9) == 10
    # no fewer than one trial more than there are ((log(0.97/0.8) / log(1/0.8))² × 3 = 2.2)
    assert as_trials.units_to_separate(1.0) == 4
