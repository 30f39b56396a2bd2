"""The vocabulary of a diagnosis: statuses, evidence with its source, findings, the decision.

Every number a diagnosis quotes says where it came from (``client: chunks``, ``server:
vllm:num_preemptions_total``, ``cost model: llama-3.1-8b on l40s``), because a reader has
to be able to tell a reading from a model's estimate. What a hypothesis needed and did
not get is listed too: "inconclusive" without the missing evidence named is no help.

Statuses (``Status``) are deliberately modest. Telemetry shows correlations, so the
strongest a single run can say is ``supported``; only a controlled A/B (``prefillscope
diagnose ab``) confirms a cause, which is why every finding ends with the measurement
that would settle it:

* ``supported``: the run's evidence points to the hypothesis (a correlation, or a model
  that explains the observed latency), never a proof;
* ``weakened``: it points there only in part, or its sources disagree;
* ``not supported``: the evidence it needs is there and points away from it;
* ``inconclusive``: the evidence it needs is missing or too thin;
* ``not applicable``: the run could not have shown it (e.g. no prefill ran while decodes did).

The serialised shape (``diagnosis.json``, ``diagnose --json``; ``docs/ARCHITECTURE.md``)
is a contract the HTML report renders: ``run``; ``decision`` (``hard_failure``,
``reasons``, ``recommendation``); ``hypotheses`` (H1–H4, then OL overload and CL the
client) and ``prefix_cache``, each
with ``id``, ``title``, ``status``, ``summary``, ``evidence`` (``name``, ``value``,
``unit``, ``source``, ``detail``), ``missing``, ``next``, and the ranking's ``strength``,
``basis``, ``impact``, ``explains``; and ``primary`` (``finding``, ``confidence``,
``why``, ``secondary``: ``diagnose.ranking``). Keys are only ever added.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from diagnose.ranking import Primary


class Status(StrEnum):
    SUPPORTED = "supported"
    WEAKENED = "weakened"
    NOT_SUPPORTED = "not supported"
    INCONCLUSIVE = "inconclusive"
    NOT_APPLICABLE = "not applicable"


class CacheHealth(StrEnum):
    """The prefix cache's verdict: one of these, not a hypothesis status."""

    AS_EXPECTED = "as expected"
    THRASHING = "thrashing"
    CACHING_OFF = "caching off"
    IDENTITY_MISMATCH = "identity mismatch"
    UNKNOWN = "unknown"


#: Significant digits kept in the JSON: more would only be noise in a measurement.
DIGITS = 6


def clean_number(value: Any) -> Any:
    """JSON-safe and readable: non-finite → None, floats to ``DIGITS`` significant digits."""
    if isinstance(value, bool) or value is None:
        return value
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return float(f"{value:.{DIGITS}g}")
    return value


def percent(share: float) -> str:
    """A share as a reader wants it in a sentence: ``37 %``, ``0.34 %``, ``0 %``."""
    value = 100 * share
    return f"{value:.0f} %" if value >= 1 or value == 0 else f"{value:.2g} %"


@dataclass(frozen=True)
class Evidence:
    """One number and where it came from."""

    name: str
    value: float | int | str | None
    unit: str
    source: str
    detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": clean_number(self.value),
            "unit": self.unit,
            "source": self.source,
            "detail": self.detail,
        }


@dataclass
class Finding:
    """A hypothesis (or the prefix cache) judged: status, why, and what would settle it."""

    id: str
    title: str
    status: str
    summary: str
    evidence: list[Evidence] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    next: str = ""
    #: The deciding figure over its threshold (≥ 1 when supported); None when unscored.
    strength: float | None = None
    #: Where the deciding figure came from: ``server``, ``client`` or ``model``.
    basis: str = ""
    #: Share of the decode time the cause accounts for (0–1), when it can be said.
    impact: float | None = None
    #: Ids of findings this one explains (``PC`` thrashing → more prefill → ``H1``).
    explains: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "status": str(self.status),
            "summary": self.summary,
            "evidence": [e.to_dict() for e in self.evidence],
            "missing": list(self.missing),
            "next": self.next,
            "strength": clean_number(self.strength),
            "impact": clean_number(self.impact),
            "basis": self.basis or None,
            "explains": list(self.explains),
        }


@dataclass(frozen=True)
class Decision:
    """What to do now: contain (a hard failure) or measure first."""

    hard_failure: bool
    reasons: list[str]
    recommendation: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "hard_failure": self.hard_failure,
            "reasons": list(self.reasons),
            "recommendation": self.recommendation,
        }


@dataclass(frozen=True)
class Diagnosis:
    run: str
    decision: Decision
    hypotheses: list[Finding]
    prefix_cache: Finding
    #: The primary finding (``diagnose.ranking.Primary``): ``finding``, ``confidence``,
    #: ``why``, ``secondary``.
    primary: Primary | None = None

    def hypothesis(self, hid: str) -> Finding:
        return next(h for h in [*self.hypotheses, self.prefix_cache] if h.id == hid)

    def to_dict(self) -> dict[str, Any]:
        """The ``diagnosis.json`` document (``docs/ARCHITECTURE.md``)."""
        return {
            "run": self.run,
            "decision": self.decision.to_dict(),
            "hypotheses": [h.to_dict() for h in self.hypotheses],
            "prefix_cache": self.prefix_cache.to_dict(),
            "primary": self.primary.to_dict() if self.primary is not None else None,
        }
