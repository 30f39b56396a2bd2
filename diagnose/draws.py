"""Two different draws of a workload: how much wider than a bootstrap of one run's units
the interval of NEW/BASE must be (``diagnose.stats.compare_stats(..., draws=True)``).

**Different draws.** When BASE and NEW are different draws of the workload
(``diagnose.compare`` asks for it for every metric of runs whose seeds differ), a 95 %
interval must cover how far another draw's statistic lands. A percentile bootstrap of
one run's units covers less. Measured on 217 different-seed runs of 400
``system-prompt`` requests (``benchmarks/compare_calibration.py``'s traffic): TPOT and
E2E p50 varied between runs 1.13–1.14× more than their bootstrap said (ITL p50 1.07×,
TTFT p50 1.01×); the halves of a run were uncorrelated across runs (−0.07…0.05: no level
persists through a run) and neighbouring time blocks nearly so (lag 1: −0.03…0.06). What
was short is the few units: 40 s cut in blocks of two request lifetimes gives ~21, and a
bootstrap of n units reads the plug-in variance ((n − 1)/n short) with normal quantiles
where Student t ones with n − 1 degrees of freedom belong — 1.09× together at 21 units.
Units correlated with their neighbours are the other shortfall: blocks forced shorter
than the correlation (a run under ``2 × MIN_UNITS`` lifetimes, ``diagnose.compare``),
events that overlap (stall events). So every metric's log-ratio interval is made at
least as wide as a Student t interval whose variance is, per run, the bootstrap
replicates' variance × units/(units − 1) × the long-run over lag-0 variance of its
units' scores in time order (``autocorrelation_inflation``: each unit's share of the
statistic's estimating equation, ``unit_scores``, Bartlett weights over round(units^⅓)
lags, never below 1; time blocks, cut to hold that correlation, get no lag window: over
an ``interference`` run's blocks it read the stall-free tail as correlation), with, per
run, the degrees of freedom of that variance estimate itself (Welch–Satterthwaite for
the two).

**Effective degrees of freedom.** A variance estimate has units − 1 degrees of freedom
only when every unit weighs alike in it. A quantile's bootstrap variance rests on the
units' scores *and* on the few values near the quantile (its density there), so it varies
between draws more than a χ² with units − 1 degrees of freedom: on the benchmark's runs
(21 blocks) TPOT and E2E p50's varied with a coefficient of variation of 0.51 where
χ²₂₀ gives 0.32 (about 8 degrees of freedom). So each run's degrees of freedom are
Satterthwaite's 2·v²/var(v) of its own bootstrap variance v (``variance_dof``), var(v)
estimated from the resamples already drawn: the infinitesimal jackknife of v over the
units — the covariance, across resamples, of each unit's draws with the replicate's
squared deviation, squared and summed (Efron 2014, "Estimation and accuracy after model
selection", for a bagged statistic, which v is) — less its Monte Carlo bias, units × the
variance of the squared deviations / resamples² (Wager, Hastie and Efron 2014), and never
more than units − 1. On planted draws (``tests/diagnose/test_variance_dof.py``) it
recovers the ~11 degrees of freedom of a pooled p50 over 21 blocks and the ~2–4 of a mean
whose variance two of 40 units carry; on 600 different-seed A/A pairs of the benchmark it
took TPOT p50's significant share from 31 to 21, E2E p50's from 28 to 24, TTFT p50's from
24 to 18. ITL gaps keep units − 1 (``compare_stats(effective_dof=False)``, what
``diagnose.compare`` asks for them): their time blocks are not alike by design, and in an
``interference`` run the p99's variance, resting on the few blocks with stalls (a resample
drawing too few of them drops it ten-fold), came out under one degree of freedom. Each
run's figures are its own: nothing is fitted to a traffic.

Stall events need more (``batch_means=True``, what ``diagnose.compare`` asks for them):
a dozen events, 8–9 of them overlapping the one before and sharing its gaps, whose
run means varied between draws 3.5–4× more than a per-event bootstrap said, correlated
over more events than a lag window of round(12^⅓) sees. After the Student t floor, each
run's between-draw variance is also estimated from the run itself by batch means: its
units, in time order (``Sample.clusters`` numbered by time), are cut into
b = round(units^⅓) contiguous batches, at least two (``draw_batches``), the statistic is
computed on each batch, and the variance of the log statistic of the whole run is
var(log batch statistics) / b, with b − 1 degrees of freedom (``draw_variance``). Few,
long batches (units^⅔ each) on purpose: batch means see a correlation only as far as it
is shorter than a batch, and the Student t quantile pays for the few degrees of
freedom. (With √units batches, AR(1) draws of 120 units whose correlation spans ~9
units were called different in 9 of 60 A/A pairs; with units^⅓, 4 of 60:
``tests/diagnose/test_draw_variance.py``.) The interval of the log ratio must be at least as wide
as the Student t interval of those two variances (Welch–Satterthwaite degrees of
freedom): when it is narrower, the bootstrap's log-ratio replicates are widened about
their median by the factor that makes it so, and the p-value, ``significant`` and a
gate all read the widened replicates (the method names the factor). The interval then
covers the within-run resampling variance and the variation between parts of a run —
autocorrelation, drift, a trend such as a growing queue. It does not cover a component
constant through a whole run (a draw's persistent property every part of the run
shares): repeated runs as trials (``diagnose.trials``) measure that. It assumes the
batches differ only by chance: a run whose batches differ by design (a tail with no
long prompts) would have that shape read as variance between draws.

**A bound on the batches.** A dozen or so events make two batches: a variance with one
degree of freedom, whose t quantile is 12.7. When the two halves of a run differ — a
large budget prefilling a queue of long prompts in one step, so that some events stall
three times as long as the rest — that widened a 14× change in ``stall_worst`` to an
interval of 0.01–3180 (``benchmarks/gate_shapes.py``: a100-80gb, llama-2-7b, 4k-token
prompts, budget 469 vs 14746, every event of NEW eight times or more BASE's: its gate
inconclusive). Yet however a run's values correlate, their mean varies between draws no
more than one value does (var(mean) ≤ the largest variance of a value: Cauchy–Schwarz;
equality when all move together, as one value). So for a mean, each run's part is the
narrower, as a Student t interval, of its batch means and that bound — the run's values'
variance over its mean squared with values − 1 degrees of freedom (``mean_bound``) —
each with the grid level below added. The bound treats a run as one value, at least as
wide as its values read independently (n times their variance), and needs no batches;
like the batches it reads only what varies within the run.

**A level a whole run shares: the chunk grid.** One such component is known from the run
itself. A long prompt is prefilled in chunks, one per engine step, each attending to a
longer context, so its stall steps grow chunk by chunk; the worst decode gap of the
event is the last full chunk's step. Where the chunk boundaries fall against the prompt
(the grid's phase) is set by the budget left beside the decode batch and by the prompt
queued before it, and queued prefills hand the phase on to one another: the whole run's
events sit at one level (on ``benchmarks/compare_calibration.py``'s stall traffic, most
worst gaps of a run at 128.0 ms, or all at 127.0–127.3 ms; 26 of 300 different-seed A/A
pairs were one run of each, none more than 0.64 % apart, called different by intervals
under a percent wide, since the simulator's steps have no jitter). Another draw can put
the phase anywhere within one chunk, which moves the worst step by up to one chunk's
growth. So for ``stall_worst`` (the mean worst gap; ``diagnose.compare`` asks it of
different draws), each run's growth of the stall step per chunk, ``d``, is read from its
own gaps (``grid_variance``: the median change between a stream's consecutive gaps that
are both stall gaps: 2.14 ms of ~127 ms, 1.7 %, on that traffic), the phase is taken as
uniform over one step, and (d / level)² / 12 — the variance of the log statistic, shared
by every event of the run, so not divided by their number — is added to the run's
batch-means variance as a known variance (Satterthwaite degrees of freedom for the sum).
That is an upper reading: the phases a draw can reach may span less than a whole chunk
(the worst gaps seen on that traffic spanned 126.9–128.0 ms, 0.9 %, of a 1.7 % chunk).
Where the steps are noisy, the median change still reads the growth (symmetric noise
cancels in a median) and the level stays one chunk's growth, small beside the events'
own spread; as a known variance it adds degrees of freedom to the batches' one or two
(on planted runs with ±10 % steps it hid no 1.5× change the batches alone decided:
``tests/diagnose/test_stall_grid.py``). ``stall_lost`` (decode time lost per prefill)
sums every stall step's excess: moving the grid redistributes the same tokens among the
steps, so it gets no such level. The method names it ("the phase of its chunk grid"),
and ``diagnose.compare`` notes a change within it as inconclusive (``grid_note``): one
pair of runs cannot tell it from another draw's level; repeated runs can.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as sps

from diagnose.resample import Sample
from runtime.quantiles import QUANTILES, quantiles, statistic


def draw_batches(units: int) -> int:
    """Time batches a run of ``units`` units is cut into for its between-draw variance:
    round(units^⅓), at least two (and no more than the units)."""
    return min(units, max(2, round(units ** (1.0 / 3.0))))


def draw_variance(sample: Sample, stat: str) -> tuple[float, int] | None:
    """Batch-means variance of the log of ``stat`` over the whole run, and its degrees of
    freedom (the module docstring's "different draws"): the units, in time order, in
    ``draw_batches`` contiguous batches. ``None`` when a batch has no finite positive
    statistic (or there are fewer than two units)."""
    units = sample.n_units
    if units < 2:
        return None
    batches = draw_batches(units)
    of_value = sample.unit_codes() * batches // units
    logs = []
    for batch in range(batches):
        value = statistic(sample.values[of_value == batch], stat)
        if not (math.isfinite(value) and value > 0):
            return None
        logs.append(math.log(value))
    return float(np.var(logs, ddof=1)) / batches, batches - 1


def mean_bound(sample: Sample, stat: str) -> tuple[float, int] | None:
    """The most the log of a run's mean can vary between draws, whatever the correlation
    of its units (the module docstring's "a bound on the batches"): the variance of one
    value as a share of the mean squared, var(x) / mean², with values − 1 degrees of
    freedom. ``None`` for another statistic, fewer than two values or no positive mean."""
    values = sample.values[np.isfinite(sample.values)]
    if stat != "mean" or values.size < 2:
        return None
    mean = float(np.mean(values))
    if not mean > 0:
        return None
    return float(np.var(values, ddof=1)) / mean**2, values.size - 1


def narrower(
    parts: Sequence[tuple[float, float] | None], confidence: float
) -> tuple[float, float] | None:
    """Of a run's (variance, degrees of freedom) ``parts``, the one whose Student t
    interval is narrowest (``None`` ones skipped; ``None`` when all are)."""
    known = [p for p in parts if p is not None]
    if not known:
        return None
    quantile = 0.5 + confidence / 2.0
    return min(known, key=lambda p: float(sps.t.ppf(quantile, p[1])) * math.sqrt(p[0]))


def grid_variance(
    gap_s: np.ndarray, request: np.ndarray, threshold_s: float, level_s: float
) -> float:
    """The variance of the log of a run's mean worst stall gap that the phase of its chunk
    grid sets (the module docstring's "a level a whole run shares"): the growth of the
    stall step from one chunk to the next, ``d`` = |the median, over every stream's
    consecutive gaps both longer than ``threshold_s``, of the second less the first|;
    one grid step as a share of the run's mean worst gap ``level_s``, its phase uniform
    over the step: (d / level)² / 12. ``gap_s`` / ``request`` are the run's ITL gaps and
    the request each belongs to, each request's gaps together and in time order. 0 with
    fewer than two such pairs or no level."""
    gap_s, request = np.asarray(gap_s, float), np.asarray(request)
    if gap_s.size < 2 or not (math.isfinite(level_s) and level_s > 0):
        return 0.0
    stalled = gap_s > threshold_s
    pairs = (request[1:] == request[:-1]) & stalled[1:] & stalled[:-1]
    if pairs.sum() < 2:
        return 0.0
    growth = abs(float(np.median(np.diff(gap_s)[pairs])))
    return (growth / level_s) ** 2 / 12.0


def grid_note(levels: Sequence[float], ratio: float, confidence: float) -> str | None:
    """What a comparison of different draws says when its not-significant change NEW/BASE
    ``ratio`` lies within the two runs' grid ``levels`` (``grid_variance``; their
    ``confidence`` band, normal quantiles: the levels are known, not estimated): one pair
    of runs cannot tell a change that small from another draw's level, and repeated runs
    would. ``None`` beyond the band, or without levels."""
    if not sum(levels) > 0 or not (math.isfinite(ratio) and ratio > 0):
        return None
    z = float(sps.norm.ppf(0.5 + confidence / 2.0))
    band = math.expm1(z * math.sqrt(sum(levels)))
    if abs(math.log(ratio)) > math.log1p(band):
        return None
    steps = ", ".join(f"{math.sqrt(12.0 * level):.1%}" for level in levels)
    return (
        f"the change is inconclusive within ±{band:.1%}: each run's worst gaps sit on a "
        f"grid of chunk steps whose phase the whole run shares (one chunk grows the stall "
        f"step by {steps}), so one pair of runs cannot tell a change this small from "
        f"another draw's level; repeated runs as trials (diagnose ab) would decide it"
    )


def with_level(part: tuple[float, int] | None, level: float) -> tuple[float, float] | None:
    """A run's batch-means ``part`` (variance, degrees of freedom) with its run-wide
    ``level`` variance added, a variance known from the model (uniform phase), not
    estimated: Satterthwaite's degrees of freedom for the sum (infinite for the level
    alone)."""
    if part is None or not level > 0:
        return part
    variance, dof = part
    total = variance + level
    return total, (total**2 / (variance**2 / dof) if variance > 0 else math.inf)


def unit_scores(sample: Sample, stat: str) -> np.ndarray:
    """Each unit's share of the estimating equation of ``stat``, in unit order: for a
    mean, the sum of its values' deviations from the mean; for a quantile q, the count of
    its values at or below the run's quantile less q times its values. The statistic's
    error is, to first order, proportional to the sum of these scores, so their
    autocorrelation is the statistic's."""
    if stat == "mean":
        deviations = sample.values - sample.values.mean()
    else:
        level = statistic(sample.values, stat)
        deviations = (sample.values <= level) - QUANTILES[stat] / 100.0
    return np.bincount(sample.unit_codes(), weights=deviations, minlength=sample.n_units)


def autocorrelation_lags(units: int) -> int:
    """Lags of the Bartlett window over a run's unit scores: round(units^⅓), the rate
    that balances a lag window's bias and variance, at most units − 1."""
    return max(0, min(units - 1, round(units ** (1.0 / 3.0))))


def autocorrelation_inflation(sample: Sample, stat: str) -> float:
    """How much wider the variance of ``stat`` is than a bootstrap of independent units
    says: the long-run variance of the unit scores (``unit_scores``, in time order;
    Bartlett weights over ``autocorrelation_lags``) over their lag-0 variance, times
    units / (units − 1) (a bootstrap's variance is the plug-in one). Never below the
    latter: a negative estimated autocorrelation does not narrow the interval.

    Clustered units (time blocks) get the plug-in factor alone: the blocks are cut to
    hold the correlation between neighbours, and a lag window over them reads a run's
    designed shape as correlation (an ``interference`` run's stall-free tail made its
    ITL p99 scores look correlated: the 12288 → 768 ``itl_p99:+25%`` gate FAILED 6 of
    30 different-seed pairs with the window, every pair without it)."""
    units = sample.n_units
    if units < 2:
        return 1.0
    if sample.clusters is not None:
        return units / (units - 1)
    scores = unit_scores(sample, stat)
    scores = scores - scores.mean()
    lag0 = float(scores @ scores)
    if not lag0 > 0:
        return units / (units - 1)
    lags = autocorrelation_lags(units)
    long_run = lag0 + sum(
        2.0 * (1.0 - k / (lags + 1)) * float(scores[k:] @ scores[:-k]) for k in range(1, lags + 1)
    )
    return max(long_run / lag0, 1.0) * units / (units - 1)


def variance_dof(log_replicates: np.ndarray, counts: np.ndarray | None) -> float | None:
    """Degrees of freedom of the bootstrap variance of ``log_replicates``, judged from
    the run itself (the module docstring's "effective degrees of freedom"): 2·v²/var(v)
    (Satterthwaite), var(v) the infinitesimal jackknife of v over the units, read from
    the resamples' draws per unit ``counts`` (resamples × units): the sum over units of
    the squared covariance, across resamples, between a unit's draws and the replicate's
    squared deviation, less its Monte Carlo bias (units × their variance / resamples).
    At most units − 1: never more than a plug-in variance of independent units has.
    ``None`` without counts or with fewer than two units or finite replicates."""
    if counts is None or counts.shape[1] < 2:
        return None
    finite = np.isfinite(log_replicates)
    logs, draws = log_replicates[finite], counts[finite].astype(float)
    resamples, units = draws.shape
    if resamples < 2:
        return None
    squares = (logs - logs.mean()) ** 2
    variance = float(squares.mean())
    if not variance > 0:
        return None
    deviations = squares - variance
    # the deviations sum to zero, so the draws need no centring for their covariance
    covariances = deviations @ draws / resamples
    monte_carlo = units * float(deviations @ deviations) / resamples**2
    spread = float(covariances @ covariances) - monte_carlo
    most = float(units - 1)
    if not spread > 0:
        return most
    return min(most, 2.0 * variance**2 / spread)


def studentized_part(
    log_replicates: np.ndarray, sample: Sample, stat: str, counts: np.ndarray | None = None
) -> tuple[float, float] | None:
    """One run's variance of the log statistic and its degrees of freedom for a Student t
    interval (the module docstring's "different draws"): the bootstrap replicates'
    variance times ``autocorrelation_inflation``; the degrees of freedom those of the
    bootstrap variance (``variance_dof``, from the resamples' ``counts``), units − 1
    without counts. ``None`` with fewer than two units or two finite replicates."""
    finite = log_replicates[np.isfinite(log_replicates)]
    if sample.n_units < 2 or finite.size < 2:
        return None
    dof = variance_dof(log_replicates, counts)
    return (
        float(np.var(finite)) * autocorrelation_inflation(sample, stat),
        sample.n_units - 1 if dof is None else dof,
    )


def draw_widening(
    log_ratios: np.ndarray,
    parts: Sequence[tuple[float, float] | None],
    confidence: float,
) -> tuple[np.ndarray, float]:
    """``log_ratios`` (bootstrap replicates of log NEW/BASE) widened about their median
    so that their percentile interval is at least the Student t interval of the two
    runs' variances ``parts`` ((variance, degrees of freedom) each; Welch–Satterthwaite
    degrees of freedom for the two); and
    the factor (1: the bootstrap was already as wide, or a part is unknown)."""
    finite = log_ratios[np.isfinite(log_ratios)]
    if any(p is None for p in parts) or finite.size < 2:
        return log_ratios, 1.0
    variance = sum(p[0] for p in parts)
    if not variance > 0:
        return log_ratios, 1.0
    spread = sum(p[0] ** 2 / p[1] for p in parts if p[0] > 0)
    dof = variance**2 / spread if spread > 0 else math.inf  # known variances only
    half = float(sps.t.ppf(0.5 + confidence / 2.0, dof)) * math.sqrt(variance)
    alpha = 1.0 - confidence
    low, high = quantiles(finite, (alpha / 2.0, 1.0 - alpha / 2.0))
    boot_half = (high - low) / 2.0
    factor = half / boot_half if boot_half > 0 else math.inf
    if not factor > 1.0:
        return log_ratios, 1.0
    if not math.isfinite(factor):  # a bootstrap of no spread: the batches' t interval
        spread = sps.t.ppf(np.linspace(0.0, 1.0, finite.size + 2)[1:-1], dof)
        return np.median(finite) + np.sqrt(variance) * spread, factor
    centre = np.median(finite)
    return centre + factor * (log_ratios - centre), factor


def between_draws(
    ratios: np.ndarray,
    samples: tuple[Sample, Sample],
    replicates: tuple[np.ndarray, np.ndarray],
    stat: str,
    confidence: float,
    *,
    batch_means: bool,
    method: str,
    counts: tuple[np.ndarray | None, np.ndarray | None] = (None, None),
) -> tuple[np.ndarray, str]:
    """``ratios`` widened for two different draws (the module docstring's "different
    draws"), and the method naming what widened them; ``counts`` are each run's
    resamples' draws per unit (``variance_dof``)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        logs = np.log(ratios)
        parts = [
            studentized_part(np.log(r), x, stat, c)
            for r, x, c in zip(replicates, samples, counts, strict=True)
        ]
    logs, studentized = draw_widening(logs, parts, confidence)
    batched = 1.0
    levels = [x.level_variance for x in samples]
    bounded = False
    if batch_means:
        batch_parts = []
        for x, level in zip(samples, levels, strict=True):
            batches = with_level(draw_variance(x, stat), level)
            bound = with_level(mean_bound(x, stat), level)
            chosen = narrower([batches, bound], confidence)
            bounded |= chosen is not batches and chosen is not None
            batch_parts.append(chosen)
        logs, batched = draw_widening(logs, batch_parts, confidence)
    if studentized * batched <= 1.0:
        return ratios, method
    reasons = []
    if studentized > 1.0:
        lags = ", ".join(
            str(0 if x.clusters is not None else autocorrelation_lags(x.n_units)) for x in samples
        )
        dofs = ", ".join(f"{p[1]:.1f}" for p in parts if p is not None)
        reasons.append(
            f"{studentized:.2f}x to a Student t interval of each run's bootstrap variance "
            f"with its units' autocorrelation ({lags} lags; {dofs} dof)"
        )
    if batched > 1.0:
        batches = ", ".join(str(draw_batches(x.n_units)) for x in samples)
        reasons.append(f"{batched:.2f}x by the spread between time batches of each run ({batches})")
        if any(level > 0 for level in levels):
            steps = ", ".join(f"{math.sqrt(12.0 * level):.1%}" for level in levels)
            reasons[-1] += (
                f" and the phase of its chunk grid (one chunk's growth of the stall step: "
                f"{steps} of the worst gap, shared by the whole run)"
            )
        if bounded:
            reasons[-1] += (
                "; where narrower, by the spread of its single values instead of its "
                "batches (a mean varies between draws no more than one value does)"
            )
    with np.errstate(over="ignore"):
        widened = np.exp(logs)
    return widened, f"{method}, widened {' then '.join(reasons)}: the seeds differ"
