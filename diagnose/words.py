"""How a diagnosis words its numbers in sentences."""

from __future__ import annotations


def percent(share: float) -> str:
    """A share as a reader wants it in a sentence: ``37 %``, ``0.34 %``, ``0 %``."""
    value = 100 * share
    return f"{value:.0f} %" if value >= 1 or value == 0 else f"{value:.2g} %"
