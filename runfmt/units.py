"""How a duration, a rate and a p-value are written for a reader, once for every view of
the tool."""

from __future__ import annotations

import math


def fmt_seconds(value: float) -> str:
    """A duration as a reader wants it: 50 µs, 20 ms, 1.5 s, 2 min (three significant
    digits). The one time formatter: reports, views, verdicts and progress lines."""
    magnitude = abs(value)
    if magnitude == 0:
        return "0"
    if magnitude >= 120:
        return f"{value / 60:.3g} min"
    if magnitude >= 1:
        return f"{value:.3g} s"
    if magnitude >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} µs"


def fmt_rate(value: float, unit: str) -> str:
    """A rate with its unit: three significant digits below 1000 (``12.3 tok/s``), whole
    and thousands-separated above (``14,390 tok/s``). The one rate formatter."""
    return f"{value:.3g} {unit}" if abs(value) < 1000 else f"{value:,.0f} {unit}"


def p_value_text(p_value: float | None, resamples: int | None) -> str:
    """A p-value as a table shows it. A bootstrap's smallest non-zero p is 2/``resamples``
    (one replicate on the far side of 1), so its p of 0 says only that it is below that,
    and reads ``< 0.001`` (2,000 resamples), never ``0``; ``resamples`` None (not a
    bootstrap) writes the value as it is, and no value as ``n/a``."""
    if p_value is None or math.isnan(p_value):
        return "n/a"
    if p_value == 0 and resamples:
        return f"< {2 / resamples:.2g}"
    return f"{p_value:.2g}"


def p_text(p_value: float | None, resamples: int | None) -> str:
    """``p_value_text`` in a sentence: ``p < 0.001``, ``p=0.012``, ``p n/a``."""
    text = p_value_text(p_value, resamples)
    return f"p {text}" if text[0] in "<n" else f"p={text}"
