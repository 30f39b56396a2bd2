"""Service-level objectives: what ``--slo ttft=500,itl=50,e2e=10s`` asks of a run, read
into the documents' ``runfmt.slo.Slo``.

``probes.latency`` judges each request against them (goodput); the A/B verdict and the
diagnosis name a breach by them.
"""

from __future__ import annotations

import math

from runfmt.metrics import E2E, ITL, TPOT, TTFT
from runfmt.slo import Slo
from runtime.durations import parse_duration
from workloads.errors import InputError
from workloads.limits import MAX_SECONDS

_SLO_KEYS = {"ttft": TTFT.key, "itl": ITL.key, "tpot": TPOT.key, "e2e": E2E.key, "e2el": E2E.key}
_SLO_FIX = "write e.g. --slo ttft=500,itl=50,e2e=10s (milliseconds unless given in s or us)"


def _parse_seconds(key: str, text: str) -> float:
    try:
        value = parse_duration(text)  # a bare number is milliseconds, as in vLLM's --goodput
    except ValueError:
        raise InputError("--slo", f"{key}={text!r} is not a duration", _SLO_FIX) from None
    if not (math.isfinite(value) and value > 0):
        raise InputError("--slo", f"{key}={text!r} must be a positive duration", _SLO_FIX)
    if value > MAX_SECONDS:  # 1e308 ms was taken: every request met it
        raise InputError("--slo", f"{key}={text!r} is beyond a week", _SLO_FIX)
    return value


def parse_slo(text: str) -> Slo:
    """Parse ``ttft=500,itl=50,tpot=…,e2e=…`` into an ``Slo``.

    A bare number is milliseconds, as in vLLM's ``--goodput``; ``0.5s`` or ``500ms`` say
    their unit. vLLM's own form, ``ttft:500 tpot:50`` (space-separated, ``:``), is read
    the same way."""
    values: dict[str, float] = {}
    for part in text.replace(",", " ").split():
        key, sep, value = part.partition("=") if "=" in part else part.partition(":")
        key = key.strip().lower()
        if not sep or key not in _SLO_KEYS:
            raise InputError(
                "--slo",
                f"{part.strip()!r} is not KEY=MILLISECONDS with KEY one of {', '.join(_SLO_KEYS)}",
                _SLO_FIX,
            )
        if _SLO_KEYS[key] in values:
            raise InputError("--slo", f"{key} is given twice", _SLO_FIX)
        values[_SLO_KEYS[key]] = _parse_seconds(key, value)
    return Slo(**values)
