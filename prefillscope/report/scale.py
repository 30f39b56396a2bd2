"""Axis scales with human ticks: linear (1-2-5 steps) and log10 (decades, 2s and 5s).

The report draws its own SVG (no plotting dependency), so mapping data to pixels and
choosing tick positions that a reader can interpolate between lives here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from runfmt.units import fmt_seconds

Formatter = Callable[[float], str]


#: How many ticks a linear axis may have; within it the tightest nice step wins.
MIN_TICKS, MAX_TICKS = 4, 9


def _covering(lo: float, hi: float, step: float) -> tuple[float, float]:
    return math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step


def linear_ticks(lo: float, hi: float) -> list[float]:
    """Multiples of a 1, 2 or 5 × 10^k step covering [lo, hi] (the domain is widened to
    them), choosing the step that wastes the least of the axis on empty range, then the
    one with fewer ticks."""
    magnitude = 10 ** math.floor(math.log10(hi - lo))
    candidates = [m * magnitude * scale for scale in (0.01, 0.1, 1) for m in (1, 2, 5)]
    fits = []
    for step in candidates:
        first, last = _covering(lo, hi, step)
        count = round((last - first) / step) + 1
        if MIN_TICKS <= count <= MAX_TICKS:
            fits.append((round((last - first) / (hi - lo), 6), count, step))  # fewer on a tie
    step = min(fits)[2] if fits else magnitude
    first, last = _covering(lo, hi, step)
    count = round((last - first) / step)
    return [round(first + i * step, 12) for i in range(count + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """Decades covering [lo, hi]; with fewer than three decades, 2× and 5× as well."""
    first = math.floor(math.log10(lo) + 1e-9)
    last = math.ceil(math.log10(hi) - 1e-9)
    if last == first:
        last += 1
    mults = (1, 2, 5) if last - first < 3 else (1,)
    ticks = [m * 10.0**k for k in range(first, last) for m in mults] + [10.0**last]
    # Keep 1×10^k at both ends, trim the 2s and 5s that lie outside the data.
    inner = [t for t in ticks if lo / 1.0001 <= t <= hi * 1.0001]
    below = [t for t in ticks if t < lo / 1.0001]
    above = [t for t in ticks if t > hi * 1.0001]
    return ([below[-1]] if below else []) + inner + ([above[0]] if above else [])


def fmt_plain(value: float) -> str:
    """Tick label for a dimensionless number: 0.5, 12, 1.5k, 2M."""
    magnitude = abs(value)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= limit:
            return f"{value / limit:g}{suffix}"
    return f"{value:.6g}"


#: Time units, largest first: (name, seconds in one, the smallest value written in it).
TIME_UNITS = (("h", 3600.0, 7200.0), ("min", 60.0, 120.0), ("s", 1.0, 1.0), ("ms", 1e-3, 1e-3))


def time_unit(magnitude: float) -> tuple[str, float]:
    """The unit a duration of ``magnitude`` seconds is written in (µs below 1 ms)."""
    for name, size, floor in TIME_UNITS:
        if magnitude >= floor:
            return name, size
    return "µs", 1e-6


def seconds_in_unit(value: float, unit: tuple[str, float]) -> str:
    """``value`` seconds in ``unit``, without exponent: ``0.5 s``, ``1,500 ms``, ``0``."""
    if value == 0:
        return "0"
    name, size = unit
    scaled = value / size
    text = f"{scaled:,.3f}".rstrip("0").rstrip(".") if abs(scaled) < 1000 else f"{scaled:,.0f}"
    return f"{text} {name}"


@dataclass
class Axis:
    """What an axis shows: its label, linear or log, tick formatter, optional fixed limits."""

    label: str
    log: bool = False
    fmt: Formatter = fmt_plain
    include_zero: bool = False
    lo: float | None = None
    hi: float | None = None


@dataclass
class Scale:
    """A fitted axis: data domain [lo, hi] mapped onto pixels [p0, p1]."""

    axis: Axis
    lo: float
    hi: float
    ticks: list[float]
    p0: float = 0.0
    p1: float = 1.0

    @classmethod
    def fit(cls, axis: Axis, values: np.ndarray) -> Scale:
        """Choose the domain and ticks for the data (non-positive values ignored on log)."""
        data = values[np.isfinite(values)]
        if axis.log:
            data = data[data > 0]
        lo = axis.lo if axis.lo is not None else (float(data.min()) if data.size else None)
        hi = axis.hi if axis.hi is not None else (float(data.max()) if data.size else None)
        if axis.log:
            lo, hi = lo or 1e-3, hi or 1.0
            if hi <= lo:
                lo, hi = lo / 2, hi * 2
            ticks = log_ticks(lo, hi)
        else:
            lo, hi = lo if lo is not None else 0.0, hi if hi is not None else 1.0
            if axis.include_zero:
                lo, hi = min(lo, 0.0), max(hi, 0.0)
            if hi <= lo:  # one value: give it room (a count of 0 stays at the axis' start)
                pad = abs(lo) * 0.1 or 1.0
                lo, hi = (0.0, pad) if axis.include_zero and lo == 0 else (lo - pad, hi + pad)
            ticks = linear_ticks(lo, hi)
        return cls(axis, min(ticks[0], lo), max(ticks[-1], hi), ticks)

    def _unit(self, values: np.ndarray) -> np.ndarray:
        if self.axis.log:
            with np.errstate(divide="ignore", invalid="ignore"):
                return (np.log10(values) - math.log10(self.lo)) / (
                    math.log10(self.hi) - math.log10(self.lo)
                )
        return (values - self.lo) / (self.hi - self.lo)

    def to_px(self, values: np.ndarray | float) -> np.ndarray:
        """Pixel positions of data values (NaN where a log axis cannot show them)."""
        arr = np.asarray(values, dtype=float)
        if self.axis.log:
            arr = np.where(arr > 0, arr, np.nan)
        return self.p0 + self._unit(arr) * (self.p1 - self.p0)

    def label(self, value: float) -> str:
        """A tick's label. A linear time axis says every tick in one unit, that of its
        largest tick; a log one spans decades, so each tick is said in its own unit (10 µs,
        1 ms, 1 s: in the largest tick's unit the smallest would round to "0"); both up to
        seconds (ticks are round numbers of seconds; in minutes they are not)."""
        if self.axis.fmt is fmt_seconds:
            size = abs(value) if self.axis.log else max(abs(t) for t in self.ticks)
            return seconds_in_unit(value, time_unit(size) if size < 1 else ("s", 1.0))
        return self.axis.fmt(value)
