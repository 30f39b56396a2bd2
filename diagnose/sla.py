"""Does one run meet a set of bounds (``ttft_p99<500ms,itl_p99<50ms``)? Each bound judged
by its statistic's bootstrap interval, as ``compare`` judges a gate.

**A bound** is ``<metric><op><value>``: a metric ``compare`` knows (``ttft_p99``,
``itl_p50``, ``e2e_p90``, ``requests_per_s`` …; ``diagnose.metrics``), ``<`` (or ``<=``)
for a latency, ``>`` (or ``>=``) for a throughput, and a value — a duration (``500ms``,
``0.5s``, ``800us``; a bare number is milliseconds, as ``--slo``) or a rate.

**The judgment.** The run's samples (``diagnose.compare.load_run``: per-request values,
ITL gaps in time blocks, throughput in time slices) are resampled (``diagnose.resample``)
and the statistic's replicates divided by the bound: the percentile interval of that
ratio (``diagnose.stats.percentile_interval``, at ``CONFIDENCE``) is the statistic's
interval over the bound. Entirely on the good side → ``meets``; entirely on the bad side
→ ``misses``; containing the bound → ``inconclusive``, as is a sample too small for the
statistic (``diagnose.stats.shortfall``: fewer than ``MIN_UNITS`` units or ``MIN_TAIL``
values beyond the quantile); then ``needed`` is the request count that would decide (the
interval's half-width shrinking as 1/√n). A run meets the bounds when every bound is met,
misses them when any is missed, and is inconclusive otherwise.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from diagnose.metrics import CONFIDENCE, RESAMPLES, MetricSpec, metric_spec
from runfmt.metrics import ITL
from runfmt.sweep_search import INCONCLUSIVE, MEETS, MISSES, BoundSection, CheckSection
from runtime.durations import UNIT_SECONDS, to_seconds
from workloads.errors import InputError

_FIX = 'write e.g. --find "ttft_p99<500ms,itl_p99<50ms" (durations in ms, s or us)'
_BOUND = re.compile(r"^\s*([a-z0-9_]+)\s*(<=|>=|<|>)\s*([0-9.eE+-]+)\s*([a-zµ/]*)\s*$")


@dataclass(frozen=True)
class Bound:
    """One bound: ``metric`` below (a latency) or above (a throughput) ``limit``."""

    text: str
    metric: MetricSpec
    limit: float  # seconds for a latency, the metric's unit for a throughput

    @property
    def upper(self) -> bool:
        return self.metric.is_latency

    def section(self) -> BoundSection:
        """The bound as ``sweep.json``'s search writes it."""
        return BoundSection(self.text, self.metric.name, self.limit)


def parse_bounds(text: str, flag: str = "--find") -> list[Bound]:
    """``ttft_p99<500ms,itl_p99<50ms`` → bounds; one line naming ``flag`` for a bad one."""
    bounds = []
    for part in (p for p in text.split(",") if p.strip()):
        match = _BOUND.match(part.lower())
        if match is None:
            raise InputError(flag, f"{part.strip()!r} is not METRIC<VALUE", _FIX)
        name, op, number, unit = match.groups()
        spec = metric_spec(name, flag)
        if spec.is_latency != op.startswith("<"):
            way = "below (<)" if spec.is_latency else "above (>)"
            raise InputError(flag, f"{part.strip()!r}: {name} is bounded {way}", _FIX)
        if spec.is_latency and unit not in UNIT_SECONDS:
            raise InputError(flag, f"{part.strip()!r}: unknown unit {unit!r}", _FIX)
        try:
            value = to_seconds(number, unit) if spec.is_latency else float(number)
        except ValueError:
            raise InputError(flag, f"{part.strip()!r}: {number!r} is not a number", _FIX) from None
        if not (math.isfinite(value) and value > 0):
            raise InputError(flag, f"{part.strip()!r}: the bound must be positive", _FIX)
        bounds.append(Bound(part.strip(), spec, value))
    if not bounds:
        raise InputError(flag, "no bound given", _FIX)
    if len({b.metric.name for b in bounds}) < len(bounds):
        raise InputError(flag, "a metric is bounded twice", _FIX)
    return bounds


@dataclass(frozen=True)
class BoundCheck:
    """One bound judged on one run: the statistic, its interval, the verdict and, when
    undecided, why and the requests that would decide."""

    bound: Bound
    value: float | None
    low: float | None
    high: float | None
    verdict: str
    reason: str | None = None
    needed_requests: int | None = None

    def section(self) -> CheckSection:
        """The check as ``sweep.json``'s search writes it."""
        bound = self.bound
        return CheckSection(
            bound.text, bound.metric.name, bound.limit, self.value, self.low, self.high,
            self.verdict, self.reason, self.needed_requests,
        )  # fmt: skip


def requests_to_decide(bound: Bound, gaps_per_request: float = 1.0) -> int:
    """The fewest requests a probe needs for ``bound``'s quantile to rest on ``MIN_TAIL``
    values beyond it: one value a request for a per-request latency, ``gaps_per_request``
    for ITL (its output tokens less one); a mean or a throughput needs ``MIN_UNITS``."""
    from diagnose.stats import MIN_TAIL, MIN_UNITS
    from runtime.quantiles import QUANTILES

    spec = bound.metric
    if not spec.is_latency or spec.stat == "mean":
        return MIN_UNITS
    share = min(QUANTILES[spec.stat], 100.0 - QUANTILES[spec.stat]) / 100.0
    per_request = max(gaps_per_request, 1.0) if spec.source == ITL.key else 1.0
    return max(MIN_UNITS, math.ceil(MIN_TAIL / share / per_request - 1e-9))


def probe_verdict(checks: list[BoundCheck]) -> str:
    """``misses`` when any bound is missed, ``meets`` when all are met, else inconclusive."""
    verdicts = {c.verdict for c in checks}
    if MISSES in verdicts:
        return MISSES
    return MEETS if verdicts == {MEETS} else INCONCLUSIVE


def check_bounds(run_dir: Any, bounds: list[Bound], seed: int = 0) -> list[BoundCheck]:
    """Judge each of ``bounds`` on the run in ``run_dir`` (module docstring)."""
    from diagnose.compare import load_run

    samples = load_run(run_dir, "run", need_completed=False)
    return [_check(samples, bound, seed + i) for i, bound in enumerate(bounds)]


def _check(samples: Any, bound: Bound, seed: int) -> BoundCheck:
    import numpy as np

    from diagnose.resample import resampled_statistics
    from diagnose.stats import percentile_interval, shortfall, units_to_exclude
    from runtime.quantiles import statistic

    spec = bound.metric
    lacking = samples.lacks(spec)
    if lacking is not None:
        return BoundCheck(bound, None, None, None, INCONCLUSIVE, lacking)
    sample = samples.sample(spec)
    value = float(statistic(np.sort(sample.values), spec.stat))
    small = shortfall(sample, spec.stat, ("units", "values"))
    if small is not None:
        reason, units = small
        needed = samples.requests_for(spec, units, sample.n_units)
        return BoundCheck(bound, value, None, None, INCONCLUSIVE, reason, needed)
    replicates = resampled_statistics(sample, [spec.stat], RESAMPLES, seed)[spec.stat]
    low_ratio, high_ratio, _ = percentile_interval(replicates / bound.limit, CONFIDENCE)
    low, high = low_ratio * bound.limit, high_ratio * bound.limit
    if high_ratio < 1.0 or low_ratio > 1.0:
        good = (high_ratio < 1.0) == bound.upper
        return BoundCheck(bound, value, low, high, MEETS if good else MISSES)
    # the interval holds the bound: the side facing it shrinks as 1/√n
    ratio = value / bound.limit
    edge = high_ratio if ratio < 1.0 else low_ratio
    units = units_to_exclude(math.log(ratio), math.log(edge), 0.0, sample.n_units)
    needed = None if units is None else samples.requests_for(spec, units, sample.n_units)
    return BoundCheck(bound, value, low, high, INCONCLUSIVE, "the interval holds the bound", needed)
