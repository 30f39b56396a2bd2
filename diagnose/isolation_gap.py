"""The timing channel of a prefix cache: TTFT of hits minus misses, and its power.

**The gap** is the median TTFT of the probes of the secret prefix minus that of the
fresh probes (negative when hits are faster). Medians, because a busy client or server
adds rare long stalls that would move a mean and say nothing about the cache. Its
interval is the percentile bootstrap of ``diagnose.resample`` (each arm resampled on its
own, exact order statistics) read by ``diagnose.stats.percentile_interval``, whose
decision rule the verdict keeps: the interval excludes a value exactly when fewer than
R·α/2 replicates lie beyond it. An arm with fewer probes than ``diagnose.stats.shortfall``
asks of a median is ``inconclusive`` with the probes that would do.

**The power** is how many probes an attacker needs to tell a hit from a miss at 95 %:
averaging n probes of a guess and comparing with the midpoint between the hit and the
miss TTFT errs with probability Φ(−|Δ|·√n / 2σ) (normal approximation; σ the spread of
one probe, pooled over both arms as the scaled median absolute deviation, so that the
same stalls do not inflate it), hence n = ⌈(2·z₀.₉₅·σ / |Δ|)²⌉, at least one.

**Trials that would decide** (``probes_to_exclude``): the interval's half-width facing a
value shrinks as 1/√n, so the probes per arm at which it would exclude the value is
n·(half-width / distance)², as ``diagnose.stats.Comparison.units_to_separate`` reads a ratio.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as sps

from diagnose.metrics import CONFIDENCE, RESAMPLES
from diagnose.resample import Sample, Seed, resampled_statistics, seed_sequence
from diagnose.stats import percentile_interval, shortfall, units_to_exclude
from runfmt.isolation import TtftGap
from runtime.quantiles import statistic

#: The statistic compared: the median TTFT of each arm.
STATISTIC = "p50"
#: How sure an attacker wants to be of one guess.
ATTACKER_CONFIDENCE = 0.95


def probes_to_exclude(gap: TtftGap, value: float) -> int | None:
    """Probes per arm at which ``gap``'s interval would exclude ``value`` (None: no size
    would, the gap being ``value``, or no interval)."""
    bound = gap.ci_low_s if gap.gap_s > value else gap.ci_high_s
    if not all(math.isfinite(x) for x in (gap.gap_s, bound, value)):
        return None
    needed = units_to_exclude(gap.gap_s, bound, value, min(gap.probes))
    return None if needed is None else max(gap.needed_probes or 0, needed, 1)


def probes_needed(
    gap_s: float, spread_s: float, confidence: float = ATTACKER_CONFIDENCE
) -> int | None:
    """Probes an attacker averages to tell a hit at ``confidence`` (module docstring);
    None when hits are not faster."""
    if not (math.isfinite(gap_s) and gap_s < 0 and math.isfinite(spread_s)):
        return None
    z = float(sps.norm.ppf(confidence))
    return max(1, math.ceil((2.0 * z * spread_s / abs(gap_s)) ** 2))


def _spread(hit: np.ndarray, miss: np.ndarray) -> float:
    mads = [float(sps.median_abs_deviation(a, scale="normal")) for a in (hit, miss) if len(a)]
    return math.sqrt(sum(m * m for m in mads) / len(mads)) if mads else math.nan


def ttft_gap(
    hit: Sequence[float],
    miss: Sequence[float],
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: Seed = 0,
) -> TtftGap:
    """The gap between the TTFTs of hit and miss probes (non-finite values dropped)."""
    hits, misses = Sample.of(hit), Sample.of(miss)
    short = [(f, w) for f, w in ((shortfall(s, STATISTIC, ("probes", "probes")), w)
             for s, w in ((hits, "hits"), (misses, "misses"))) if f is not None]  # fmt: skip
    reason = "; ".join(f"{w}: {f[0]}" for f, w in short) or None
    needed = max((f[1] for f, _ in short), default=None)
    spread = _spread(hits.values, misses.values)
    if len(hits.values) < 2 or len(misses.values) < 2:
        return TtftGap(
            confidence=confidence, probes=(len(hits.values), len(misses.values)),
            spread_s=spread, inconclusive=reason or "fewer than two probes",
            needed_probes=needed,
        )  # fmt: skip
    seed_hit, seed_miss = seed_sequence(seed).spawn(2)
    rep_hit = resampled_statistics(hits, [STATISTIC], resamples, seed_hit)[STATISTIC]
    rep_miss = resampled_statistics(misses, [STATISTIC], resamples, seed_miss)[STATISTIC]
    # percentile_interval reads replicates against 1; a difference is read against 0
    low, high, p_value = percentile_interval(1.0 + (rep_hit - rep_miss), confidence)
    hit_s, miss_s = statistic(hits.values, STATISTIC), statistic(misses.values, STATISTIC)
    gap = hit_s - miss_s
    ci_low_s, ci_high_s = low - 1.0, high - 1.0
    return TtftGap(
        hit_s, miss_s, gap, ci_low_s, ci_high_s, p_value, confidence,
        (len(hits.values), len(misses.values)), spread, probes_needed(gap, spread),
        reason, needed, significant=reason is None and (ci_low_s > 0 or ci_high_s < 0),
    )  # fmt: skip
