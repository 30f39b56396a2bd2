"""Arrival processes: when each open-loop request is meant to be sent.

One small class per process. Open-loop processes turn ``(count, duration)`` into a
sorted array of intended send times in seconds from t=0, computed entirely before the
run so that the load generator dispatches from a schedule and can measure how late it
was (the basis of coordinated-omission-safe latency). The closed-loop process has no
schedule: ``concurrency`` users each send their next request when the last one ends.

Renewal processes (poisson, gamma, constant) send their first request at t=0; the
ramp is a Poisson process whose rate moves from ``start_rate`` to ``rate``, linearly or
exponentially (``RAMPS``, vLLM's ``--ramp-up-strategy``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from workloads.errors import InputError

ARRIVALS = ("poisson", "gamma", "constant", "ramp", "closed", "trace")
#: How a ramp's rate moves from its start to its end.
RAMPS = ("linear", "exponential")

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
    """Poisson arrivals whose rate rises (or falls) from ``start_rate`` to ``rate``:
    linearly, or (``shape="exponential"``) by a constant factor per second,
    ``r(t) = r0 · (r1/r0)^(t/span)``.

    The ramp spans ``duration`` when one is given, else the time in which ``count``
    requests are expected (linear: ``2 · count / (r0 + r1)``; exponential:
    ``count · ln(r1/r0) / (r1 − r0)``); after the span the rate stays at ``rate``. Times
    come from unit-rate arrivals mapped through the inverse of the integrated rate (time
    rescaling), so the count in any window is Poisson with the integral of the rate over it.
    """

    name: ClassVar[str] = "ramp"

    start_rate: float
    rate: float
    shape: str = "linear"

    @property
    def peak_rate(self) -> float:
        return max(self.start_rate, self.rate)

    def _growth(self) -> float | None:
        """``ln(r1/r0)`` of an exponential ramp between two different rates, else None."""
        r0, r1 = self.start_rate, self.rate
        if self.shape != "exponential" or r0 == r1:
            return None
        return math.log(r1 / r0)

    def _expected(self, span: float) -> float:
        """Requests expected over the ramp's span: the integral of its rate."""
        growth = self._growth()
        if growth is None:
            return (self.start_rate + self.rate) * span / 2.0
        return (self.rate - self.start_rate) * span / growth

    def span(self, count: int | None, duration: float | None) -> float:
        if duration is not None:
            return duration
        return (count or 1) / self._expected(1.0)

    def _inverse(self, y: np.ndarray, span: float) -> np.ndarray:
        r0, r1 = self.start_rate, self.rate
        growth = self._growth()
        if growth is not None:
            at_end = self._expected(span)
            inside = span * np.log1p(np.minimum(y, at_end) * growth / (r0 * span)) / growth
            return np.where(y <= at_end, inside, span + (y - at_end) / r1)
        slope = (r1 - r0) / (2.0 * span)
        at_end = (r0 + r1) * span / 2.0
        inside = 2.0 * y / (r0 + np.sqrt(np.maximum(r0 * r0 + 4.0 * slope * y, 0.0)))
        return np.where(y <= at_end, inside, span + (y - at_end) / r1)

    def times(
        self, rng: np.random.Generator, count: int | None, duration: float | None
    ) -> np.ndarray:
        span = self.span(count, duration)
        expected = self._expected(span)
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
    ramp: str = "linear",
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
    if ramp not in RAMPS:
        raise InputError("ramp", f"unknown ramp {ramp!r}", f"known: {', '.join(RAMPS)}")
    if ramp == "exponential" and start_rate == 0:
        raise InputError("start_rate", "an exponential ramp cannot start at 0", "start above 0")
    return Ramp(float(start_rate), rate, ramp)
