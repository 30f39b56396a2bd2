"""Arms of several trials each (``diagnose ab``'s ABAB…): the trials are the units.

**What is compared.** Per metric, each trial's statistic (a mean or quantile of its own
values, ``runtime.quantiles``) on the log scale, ``y``, with its sampling variance ``v``
from that trial's own bootstrap (``diagnose.resample``: requests, or time blocks of ITL
gaps, resampled). The ratio NEW/BASE is exp(ȳ_NEW − ȳ_BASE), ȳ the mean of an arm's
trials' logs; ``base`` and ``new`` are exp(ȳ), the geometric means of the trials'
statistics. The trials are weighted alike: they are alike by design (one plan, one
length), and a trial's bootstrap variance of a tail quantile rests on its few tail values
— weighting by it let one trial whose p99 happened to look precise outweigh the others
(an A/A called −37 % [−53, −14] on the trials 22, 48, 27 ms against 38, 29, 40 ms).

**Random effects, no pre-test.** Trials differ by more than their sampling: the warm-up
of a server, a neighbour on the machine, the moment long prompts land. That between-trial
variance is estimated from the trials (DerSimonian–Laird with the trials' mean sampling
variance v̄: τ² = max(0, s² − v̄), s² the spread of the trials about their arm's mean,
pooled over both arms), and it widens the interval smoothly — no test switches it on.
The interval on log NEW/BASE is the wider of

* the trials' **t interval**: Welch's t on the per-trial logs (each arm's s²/k,
  Welch–Satterthwaite degrees of freedom). It covers whatever makes trials differ,
  measured or not, and pays for the few trials with a Student t quantile: 3 trials per arm
  give about 4 degrees of freedom (t ≈ 2.8, not 1.96), 2 per arm 1–2 (t = 4.3–12.7:
  wide, as it should be);
* the **random-effects normal interval**, (v̄ + τ²)/k per arm with normal quantiles: never
  narrower than what the trials' own sampling says, when the trials happen to agree more
  closely than their sampling allows.

The p-value is the larger of the two tests' p-values, so it is below α exactly when both
intervals, hence the wider one, exclude 1: the interval, ``significant`` and p are one
decision. This replaces a switch (the pooled cluster bootstrap of all trials unless
Cochran's Q had p < 0.2, trials as units otherwise) whose pooled branch ignored a
between-trial variance too small for Q to flag with 4 degrees of freedom yet larger than
the pooled interval: in seeded A/A cases where Q's p landed just over 0.2 it called about a
quarter of them different (``tests/diagnose/test_trials.py``).

When a trial's sampling variance is unknown (a trial of fewer than two units) the t
interval is the interval. The pooled data's minimums (``stats.shortfall``: units, values
beyond a quantile) still decide whether the comparison can be trusted; the units it would
need are given in trials.

**Assumptions.** Trials are independent; an arm's trials' log statistics are normal about
the arm's level with variance v + τ². A trend through the trials (a machine warming up, a
spell of load) is read as between-trial variance, which ABAB's alternation spreads over
both arms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from diagnose.metrics import CONFIDENCE, RESAMPLES
from diagnose.resample import Sample, Seed, resampled_statistics, seed_sequence
from diagnose.stats import Comparison, undecided
from runtime.quantiles import statistic

__all__ = ["RandomEffects", "compare_trials", "random_effects", "trial_interval"]

#: What a comparison of trials is called (``Comparison.method``; ``ab_effect.unit_word``
#: reads the prefix as "trials").
METHOD = "trials as units"


@dataclass(frozen=True)
class ArmTrials:
    """One arm's trials for one statistic: the log statistic of each trial and its
    sampling variance (NaN when unknown)."""

    logs: np.ndarray
    variances: np.ndarray

    @property
    def known(self) -> np.ndarray:
        """The trials whose statistic is finite and positive (others cannot be logged)."""
        return np.isfinite(self.logs)


@dataclass(frozen=True)
class RandomEffects:
    """The random-effects comparison of two arms' trials on the log scale.

    ``difference`` is ȳ_NEW − ȳ_BASE and ``low``/``high`` its interval; ``means`` the
    arms' ȳ; ``tau`` the between-trial standard deviation (of the log statistic; NaN when
    the sampling variances are unknown); ``dof`` the t interval's degrees of freedom;
    ``floored`` whether the random-effects normal interval was the wider (the trials
    agreed more closely than their sampling allows); ``sampled`` whether the trials'
    sampling variances were known (else the interval is Welch's t alone).
    """

    difference: float
    low: float
    high: float
    p_value: float
    means: tuple[float, float]
    tau: float
    dof: float
    floored: bool
    sampled: bool

    def method(self, of: str = "") -> str:
        """The method text of a comparison made with it; ``of`` says what each trial's
        statistic is of (`` (each trial's mean over its events)``)."""
        head = f"{METHOD}{of}"
        if not self.sampled:
            return f"{head}, Welch t on the trials' logs ({self.dof:.1f} dof)"
        tau = f"between-trial tau {100.0 * math.expm1(self.tau):.2g} %"
        if self.floored:
            return (
                f"{head}, random effects ({tau}; the trials agree within their sampling: "
                f"its normal interval, wider than the t one on {self.dof:.1f} dof)"
            )
        return f"{head}, random effects ({tau}; t interval, {self.dof:.1f} dof)"


def _welch_dof(parts: Sequence[float], counts: Sequence[int]) -> float:
    """Welch–Satterthwaite degrees of freedom of a sum of per-arm variances."""
    total = sum(parts)
    denominator = sum(p**2 / (k - 1) for p, k in zip(parts, counts, strict=True) if p > 0)
    return total**2 / denominator if denominator > 0 else float(sum(k - 1 for k in counts))


def random_effects(base: ArmTrials, new: ArmTrials, confidence: float) -> RandomEffects | None:
    """The comparison of the module docstring; ``None`` when an arm has fewer than two
    trials with a statistic."""
    arms = [(a.logs[a.known], a.variances[a.known]) for a in (base, new)]
    if any(len(y) < 2 for y, _ in arms):
        return None
    counts = [len(y) for y, _ in arms]
    means = [float(np.mean(y)) for y, _ in arms]
    scatter = [float(np.var(y, ddof=1)) for y, _ in arms]
    spread = [s2 / k for s2, k in zip(scatter, counts, strict=True)]
    difference = means[1] - means[0]
    dof = _welch_dof(spread, counts)
    level = 0.5 + confidence / 2.0
    se_t = math.sqrt(sum(spread))
    half_t, p_t = float(sps.t.ppf(level, dof)) * se_t, _p(difference, se_t, sps.t(dof))
    sampled = all(np.all(np.isfinite(v)) for _, v in arms)
    tau2, half_z, p_z = math.nan, 0.0, 0.0
    if sampled:
        within = float(np.mean(np.concatenate([v for _, v in arms])))
        between = sum((k - 1) * s2 for k, s2 in zip(counts, scatter, strict=True)) / sum(
            k - 1 for k in counts
        )
        tau2 = max(0.0, between - within)
        model = [(float(np.mean(v)) + tau2) / k for (_, v), k in zip(arms, counts, strict=True)]
        se_z = math.sqrt(sum(model))
        half_z, p_z = float(sps.norm.ppf(level)) * se_z, _p(difference, se_z, sps.norm())
    half = max(half_t, half_z)
    return RandomEffects(
        difference,
        difference - half,
        difference + half,
        max(p_t, p_z),
        (means[0], means[1]),
        math.sqrt(tau2),
        dof,
        half_z > half_t,
        sampled,
    )


def _p(difference: float, se: float, distribution: sps.rv_continuous) -> float:
    """Two-sided p-value of ``difference`` with standard error ``se``; 1 or 0 with no
    spread (equal or unequal logs)."""
    if se == 0.0:
        return float(difference == 0.0)
    return float(2.0 * distribution.sf(abs(difference) / se))


def trial_interval(
    base_values: Sequence[float], new_values: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float, float, float, float]:
    """Geometric-mean ratio of per-trial statistics, Welch t interval on logs, and p-value.

    Returns ``(ratio, low, high, p_value)``; p < 1 − ``confidence`` exactly when the
    interval excludes 1 (both come from one t statistic). Welch's t rather than a rank
    test: with three trials per arm the smallest two-sided Mann–Whitney p-value is 0.1,
    so a rank test could never call a difference. (``random_effects`` with the trials'
    sampling variances unknown.)
    """
    unknown = [ArmTrials(np.log(np.asarray(v, float)), np.full(len(v), np.nan))
               for v in (base_values, new_values)]  # fmt: skip
    found = random_effects(*unknown, confidence)
    if found is None:
        raise ValueError("trial_interval needs two trials per arm")
    return (*(float(np.exp(x)) for x in (found.difference, found.low, found.high)), found.p_value)


def arm_trials(
    trials: Sequence[Sample], stats: Sequence[str], resamples: int, seed: Seed
) -> dict[str, ArmTrials]:
    """Each trial's log statistic and its bootstrap variance (NaN with fewer than two
    units), per statistic; a statistic that is not finite and positive is NaN."""
    logs = {s: np.full(len(trials), np.nan) for s in stats}
    variances = {s: np.full(len(trials), np.nan) for s in stats}
    seeds = seed_sequence(seed).spawn(len(trials))
    for i, (trial, trial_seed) in enumerate(zip(trials, seeds, strict=True)):
        replicates = {}
        if trial.n_units >= 2:
            replicates = resampled_statistics(trial, stats, resamples, trial_seed)
        for stat in stats:
            value = statistic(trial.values, stat) if len(trial.values) else math.nan
            if math.isfinite(value) and value > 0:
                logs[stat][i] = math.log(value)
            if stat in replicates:
                with np.errstate(divide="ignore", invalid="ignore"):
                    replicate_logs = np.log(replicates[stat])
                finite = replicate_logs[np.isfinite(replicate_logs)]
                if finite.size >= 2:
                    variances[stat][i] = float(np.var(finite))
    return {s: ArmTrials(logs[s], variances[s]) for s in stats}


def _trials_needed(
    pooled: Sequence[Sample], trials: Sequence[int], needed: int | None
) -> int | None:
    """Trials per arm that would give ``needed`` pooled units in each arm, at the units
    per trial each arm has (the shortfall counts pooled units: requests, time blocks)."""
    if needed is None:
        return None
    per_trial = min(s.n_units / k for s, k in zip(pooled, trials, strict=True))
    return max(max(trials) + 1, math.ceil(needed / per_trial)) if per_trial > 0 else None


def compare_trials(
    base_trials: Sequence[Sample],
    new_trials: Sequence[Sample],
    metrics: Mapping[str, str],
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
    levels: Mapping[str, float] | None = None,
    names: tuple[str, str] = ("units", "values"),
    of: str = "",
) -> list[Comparison]:
    """Compare arms of several trials each (ABAB…), trials being the units (the module
    docstring): per metric, the random-effects ratio of the trials' statistics, its
    interval and p-value, ``units`` the trials per arm. Needs at least two trials per arm;
    three or more give an interval worth reading. The pooled data's minimums
    (``stats.shortfall``, worded with ``names``) decide whether it can be trusted
    (``inconclusive``, with the trials per arm that would meet them). ``levels``: a
    metric's own confidence in place of ``confidence`` (a decision's metrics corrected
    for their number, ``ab_verdict``); ``of``: what a trial's statistic is of, for the
    method text."""
    if len(base_trials) < 2 or len(new_trials) < 2:
        raise ValueError("compare_trials needs at least two trials per arm")
    stats = list(dict.fromkeys(metrics.values()))
    seed_base, seed_new = seed_sequence(seed).spawn(2)
    per_base = arm_trials(base_trials, stats, resamples, seed_base)
    per_new = arm_trials(new_trials, stats, resamples, seed_new)
    pooled = (Sample.concat(base_trials), Sample.concat(new_trials))
    units = (len(base_trials), len(new_trials))
    out = []
    for metric, stat in metrics.items():
        level = (levels or {}).get(metric, confidence)
        reason, needed = undecided(*pooled, stat, names)
        needed = _trials_needed(pooled, units, needed)
        found = random_effects(per_base[stat], per_new[stat], level)
        if found is None:
            nan = math.nan
            reason = reason or f"fewer than two trials per arm with a {stat}"
            out.append(Comparison.judge(
                metric, nan, (nan, nan), nan, (nan, nan), f"{METHOD}{of}", level,
                inconclusive=reason, units=units, needed_units=needed,
            ))  # fmt: skip
            continue
        ratio, low, high, base, new = (
            float(np.exp(x)) for x in (found.difference, found.low, found.high, *found.means)
        )
        out.append(Comparison.judge(
            metric, ratio, (low, high), found.p_value, (base, new), found.method(of),
            level, inconclusive=reason, units=units, needed_units=needed,
        ))  # fmt: skip
    return out
