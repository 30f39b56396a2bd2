"""How a duration and a rate are written for a reader, once for every view of the tool."""

from __future__ import annotations


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
