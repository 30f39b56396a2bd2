"""Durations as users write them on the command line: ``500`` (milliseconds), ``500ms``,
``0.5s``, ``200us`` / ``200µs``.

One owner for the rule every duration flag follows (``--slo``, ``--find``, isolation's
``--resolution``): a bare number is milliseconds, as in vLLM's ``--goodput``; a suffix
names its unit. Callers turn the ``ValueError`` into their flag's one-line message."""

from __future__ import annotations

#: Seconds per unit suffix; the empty suffix is the bare number's milliseconds.
UNIT_SECONDS = {"": 1e-3, "ms": 1e-3, "s": 1.0, "us": 1e-6, "µs": 1e-6}


def split_unit(text: str) -> tuple[str, str]:
    """``"0.5s"`` → ``("0.5", "s")``; the unit is the trailing run of letters (µ is one)."""
    raw = text.strip().lower()
    end = len(raw)
    while end and raw[end - 1].isalpha():
        end -= 1
    return raw[:end].strip(), raw[end:]


def to_seconds(number: str, unit: str) -> float:
    """``("500", "ms")`` → 0.5; ``ValueError`` for an unknown unit or a non-number."""
    if unit not in UNIT_SECONDS:
        raise ValueError(f"unknown unit {unit!r}")
    return float(number) * UNIT_SECONDS[unit]


def parse_duration(text: str) -> float:
    """``"500"`` / ``"500ms"`` / ``"0.5s"`` / ``"500000us"`` → 0.5 seconds.

    Raises ``ValueError`` naming what is wrong; finiteness and sign are the caller's rule."""
    return to_seconds(*split_unit(text))
