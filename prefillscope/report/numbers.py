"""How the report's views write a number: durations, rates, shares, counts, any scalar.

Every figure a view cannot know (absent from the run files, NaN) is written ``unknown``,
never 0. Durations and rates are written by ``runfmt.units``.
"""

from __future__ import annotations

import math
from typing import Any

from runfmt import units

UNKNOWN = "unknown"


def known_number(value: Any) -> float | None:
    """A finite number as a float; ``None`` for anything else (absent, NaN, a bool, text)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def fmt_duration(value: Any) -> str:
    """Seconds as a reader wants them (850 µs, 12.3 ms, 1.52 s); unknown when absent."""
    v = known_number(value)
    return UNKNOWN if v is None else units.fmt_seconds(v)


def fmt_rate(value: Any, unit: str) -> str:
    """A rate with its unit (``12.3 tok/s``, ``14,390 tok/s``); unknown when absent."""
    v = known_number(value)
    return UNKNOWN if v is None else units.fmt_rate(v, unit)


def fmt_share(value: Any) -> str:
    """A share as a percentage (``42.0 %``); unknown when absent."""
    v = known_number(value)
    return UNKNOWN if v is None else f"{100 * v:.1f} %"


def fmt_count(value: Any) -> str:
    """A count, thousands separated; unknown when absent."""
    v = known_number(value)
    return UNKNOWN if v is None else f"{v:,.0f}"


def fmt_value(value: Any) -> str:
    """Any scalar from a run file, for display."""
    if value is None:
        return UNKNOWN
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return plain_number(value) if math.isfinite(value) else UNKNOWN
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def plain_number(value: float) -> str:
    """Four significant digits, thousands separated, never in exponent form:
    ``14,390``, ``3.142``, ``0.0001234``."""
    if value == 0 or abs(value) >= 1000:
        return f"{value:,.0f}"
    digits = max(0, 3 - math.floor(math.log10(abs(value))))
    return f"{value:,.{digits}f}".rstrip("0").rstrip(".")
