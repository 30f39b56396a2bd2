"""Arrival processes: when each open-loop request is meant to be sent.

One small class per process. Open-loop processes turn ``(count, duration)`` into a
sorted array of intended send times in seconds from t=0, computed entirely before the
run so that the load generator dispatches from a schedule and can measure how late it
was (the basis of coordinated-omission-safe latency). The closed-loop process has no
schedule: ``concurrency`` users each send their next request when the last one ends.

Renewal processes (poisson, gamma, constant) send their first request at t=0; the
ramp is a Poisson process whose rate moves linearly from ``start_rate`` to ``rate``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from workloads.errors import InputError

ARRIVALS = ("poisson", "gamma", "constant", "ramp", "closed", "trace")

#: Gaps drawn per batch when a duration, not a count, bounds the schedule.
_BATCH = 4096


def _cut(times: np.ndarray, count: int | None, duration: float | None) -> np.ndarray:
    if duration is not None:
        times = times[times < duration]
    if count is not None:
        times = times[:count]
    return times


class _Renewal:
    """Independent identically distributed gaps; the first request goes at t=0."""

    rate: float

    @property
    def peak_rate(self) -> float:
        return self.rate

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    def times(
        self, rng: np.random.Generator, count: int | None, duration: float | None
    ) -> np.ndarray:
        if duration is None:
            n = 1 if count is None else count
            return np.concatenate([[0.0], np.cumsum(self.gaps(rng, n - 1))])
        parts, end = [np.zeros(1)], 0.0
        while end < duration and (count is None or sum(map(len, parts)) < count):
            batch = end + np.cumsum(self.gaps(rng, _BATCH))
            parts.append(batch)
            end = float(batch[-1])
        return _cut(np.concatenate(parts), count, duration)


@dataclass(frozen=True)
class Poisson(_Renewal):
    """Exponential gaps: memoryless traffic from many independent users."""

    name: ClassVar[str] = "poisson"

    rate: float

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.exponential(1.0 / self.rate, size=n)


@dataclass(frozen=True)
class Gamma(_Renewal):
    """Gamma gaps with coefficient of variation ``cv`` (1: Poisson, > 1: bursty, < 1: even).

    vLLM's ``--burstiness`` is the gamma shape ``k``; ``cv = 1 / sqrt(k)``.
    """

    name: ClassVar[str] = "gamma"

    rate: float
    cv: float

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        shape = 1.0 / self.cv**2
        return rng.gamma(shape, 1.0 / (self.rate * shape), size=n)


@dataclass(frozen=True)
class ConstantRate(_Renewal):
    """Evenly spaced requests, ``1 / rate`` apart."""

    name: ClassVar[str] = "constant"

    rate: float

    def gaps(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, 1.0 / self.rate)


@dataclass(frozen=True)
class Ramp:
    """Poisson arrivals whose rate rises (or falls) linearly from ``start_rate`` to ``rate``.

    The ramp spans ``duration`` when one is given, else the time in which ``count``
    requests are expected, ``2 · count / (start_rate + rate)``; after the span the rate
    stays at ``rate``. Times come from unit-rate arrivals mapped through the inverse of
    the integrated rate (time rescaling), so the count in any window is Poisson with the
    integral of the rate over it.
    """

    name: ClassVar[str] = "ramp"

    start_rate: float
    rate: float

    @property
    def peak_rate(self) -> float:
        return max(self.start_rate, self.rate)

    def span(self, count: int | None, duration: float | None) -> float:
        if duration is not None:
            return duration
        return 2.0 * (count or 1) / (self.start_rate + self.rate)

    def _inverse(self, y: np.ndarray, span: float) -> np.ndarray:
        r0, r1 = self.start_rate, self.rate
        slope = (r1 - r0) / (2.0 * span)
        at_end = (r0 + r1) * span / 2.0
        inside = 2.0 * y / (r0 + np.sqrt(np.maximum(r0 * r0 + 4.0 * slope * y, 0.0)))
        return np.where(y <= at_end, inside, span + (y - at_end) / r1)

    def times(
        self, rng: np.random.Generator, count: int | None, duration: float | None
    ) -> np.ndarray:
        span = self.span(count, duration)
        expected = (self.start_rate + self.rate) * span / 2.0
        n = count if count is not None else int(expected + 10 * math.sqrt(expected) + 10)
        unit = np.cumsum(rng.exponential(1.0, size=n))
        return _cut(self._inverse(unit, span), count, duration)


@dataclass(frozen=True)
class TraceTimes:
    """The timestamps a trace recorded, stretched by ``time_scale`` (0.5 = twice as fast)."""

    name: ClassVar[str] = "trace"

    offsets_s: tuple[float, ...]
    time_scale: float = 1.0
    peak_rate: ClassVar[None] = None  # the trace's own length bounds the plan

    def times(
        self, rng: np.random.Generator, count: int | None, duration: float | None
    ) -> np.ndarray:
        return _cut(np.asarray(self.offsets_s, dtype=float) * self.time_scale, count, duration)


@dataclass(frozen=True)
class ClosedLoop:
    """``concurrency`` users, each sending its next request as soon as its last one ends."""

    name: ClassVar[str] = "closed"

    concurrency: int
    peak_rate: ClassVar[None] = None

    def times(self, rng: np.random.Generator, count: int | None, duration: float | None) -> None:
        return None


Arrival = Poisson | Gamma | ConstantRate | Ramp | TraceTimes | ClosedLoop


def positive(
    field: str, value: float | None, what: str = "a positive number", *, inf: bool = False
) -> float:
    """``value`` if it is a number above zero (finite unless ``inf``), else an ``InputError``."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(field, f"must be {what}, got {value!r}")
    if not (math.isfinite(value) or (inf and value == math.inf)) or value <= 0:
        raise InputError(field, f"must be {what}, got {value:g}")
    return float(value)


def make_arrival(
    name: str,
    *,
    rate: float | None = None,
    cv: float | None = None,
    start_rate: float = 0.0,
    concurrency: int | None = None,
    trace_offsets_s: tuple[float, ...] | None = None,
    time_scale: float = 1.0,
) -> Arrival:
    """The arrival process called ``name`` with its parameters checked."""
    if name == "closed":
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InputError("concurrency", f"must be a whole number >= 1, got {concurrency!r}")
        return ClosedLoop(concurrency)
    if name == "trace":
        if trace_offsets_s is None:
            raise InputError("arrival", "'trace' needs a trace workload with timestamps")
        return TraceTimes(trace_offsets_s, positive("time_scale", time_scale))
    if name not in ARRIVALS:
        raise InputError("arrival", f"unknown arrival {name!r}", f"known: {', '.join(ARRIVALS)}")
    # inf: every request at t=0 ("all at once", as in vllm bench serve); a ramp needs an end
    rate = positive("rate", rate, "a positive request rate (requests/s)", inf=name != "ramp")
    if name == "poisson":
        return Poisson(rate)
    if name == "constant":
        return ConstantRate(rate)
    if name == "gamma":
        return Gamma(rate, positive("cv", 1.0 if cv is None else cv))
    if isinstance(start_rate, bool) or not math.isfinite(start_rate) or start_rate < 0:
        raise InputError("start_rate", f"must be >= 0, got {start_rate!r}")
    return Ramp(float(start_rate), rate)
