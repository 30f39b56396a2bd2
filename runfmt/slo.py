"""The SLO's bounds as every document writes them: ``run.json``'s ``slo``, ``summary.json``'s
``goodput.slo``, ``ab.json``'s ``settings.slo`` and ``simulate --json``'s ``slo``.

Seconds per latency, under the metric registry's keys (``ttft_s``, ``itl_s``, ``tpot_s``,
``e2e_s``); a bound not given is absent from the object, so an SLO of none is ``{}``.
``probes.slo.parse_slo`` reads ``--slo`` into one; ``probes.latency`` judges each request
against it (goodput).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from runfmt.codec import EMPTY, EXTRA, key


@dataclass(frozen=True)
class Slo:
    """Service-level objectives in seconds; ``None`` means not constrained."""

    ttft_s: float | None = key(omit_none=True, default=None)
    itl_s: float | None = key(omit_none=True, default=None)
    tpot_s: float | None = key(omit_none=True, default=None)
    e2e_s: float | None = key(omit_none=True, default=None)
    #: What a newer writer bounded that this version does not know, kept and written back.
    extra: Mapping[str, Any] = field(default_factory=EMPTY, compare=False, repr=False)

    def bounds(self) -> tuple[tuple[str, float], ...]:
        """The bounds given, ``(key, seconds)`` in the document's order."""
        pairs = ((f.name, getattr(self, f.name)) for f in fields(self) if f.name != EXTRA)
        return tuple((name, value) for name, value in pairs if value is not None)

    def __bool__(self) -> bool:
        return bool(self.bounds())
