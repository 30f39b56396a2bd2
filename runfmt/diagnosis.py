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
``basis``, ``impact``, ``explains``, ``cost_s`` (the latency the cause explains, in
request-seconds) with ``cost_how``; and ``primary`` (``finding``, ``confidence``,
``why``, ``secondary``: ``diagnose.ranking``). Keys are only ever added.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from runfmt.names import DIAGNOSIS_JSON
from runfmt.version import FIRST_FORMAT_VERSION, document_version

#: The ``format_version`` this version writes: the first, so the key is not written (a
#: ``diagnosis.json`` that names a newer one is refused, as every document of a run).
DIAGNOSIS_FORMAT_VERSION = FIRST_FORMAT_VERSION


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

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Evidence:
        value = doc.get("value")
        return cls(
            name=_text(doc.get("name")),
            value=value if isinstance(value, int | float | str) else None,
            unit=_text(doc.get("unit")),
            source=_text(doc.get("source")),
            detail=None if doc.get("detail") is None else _text(doc.get("detail")),
        )


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
    #: The latency the cause explains, in request-seconds (``diagnose.costs``), and how
    #: it was reckoned; None when it cannot be said.
    cost_s: float | None = None
    cost_how: str = ""

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
            "cost_s": clean_number(self.cost_s),
            "cost_how": self.cost_how or None,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Finding:
        return cls(
            id=_text(doc.get("id")),
            title=_text(doc.get("title")),
            status=_text(doc.get("status")) or UNKNOWN,
            summary=_text(doc.get("summary")),
            evidence=[Evidence.from_dict(e) for e in _list(doc.get("evidence")) if _is_doc(e)],
            missing=[_text(m) for m in _list(doc.get("missing"))],
            next=_text(doc.get("next")),
            strength=_number(doc.get("strength")),
            basis=_text(doc.get("basis")),
            impact=_number(doc.get("impact")),
            explains=[_text(e) for e in _list(doc.get("explains"))],
            cost_s=_number(doc.get("cost_s")),
            cost_how=_text(doc.get("cost_how")),
        )


@dataclass(frozen=True)
class Decision:
    """What to do now: contain (a hard failure) or measure first."""

    #: None only when read back from a document that does not say.
    hard_failure: bool | None
    reasons: list[str]
    recommendation: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "hard_failure": self.hard_failure,
            "reasons": list(self.reasons),
            "recommendation": self.recommendation,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Decision:
        hard = doc.get("hard_failure")
        return cls(
            hard_failure=hard if isinstance(hard, bool) else None,
            reasons=[_text(r) for r in _list(doc.get("reasons"))],
            recommendation=_text(doc.get("recommendation")),
        )


@dataclass(frozen=True)
class Primary:
    """The finding a reader should start from, how sure the ranking is, and why."""

    finding: str
    confidence: str
    why: str
    secondary: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "finding": self.finding,
            "confidence": self.confidence,
            "why": self.why,
            "secondary": list(self.secondary),
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Primary:
        return cls(
            finding=_text(doc.get("finding")),
            confidence=_text(doc.get("confidence")),
            why=_text(doc.get("why")),
            secondary=[_text(x) for x in _list(doc.get("secondary"))],
        )


@dataclass(frozen=True)
class Diagnosis:
    run: str
    decision: Decision
    hypotheses: list[Finding]
    #: None only when read back from a document without one.
    prefix_cache: Finding | None
    #: The primary finding (``diagnose.ranking`` picks it).
    primary: Primary | None = None

    def hypothesis(self, hid: str) -> Finding:
        return next(h for h in self.findings() if h.id == hid)

    def to_json(self) -> dict[str, Any]:
        """The ``diagnosis.json`` document (``docs/ARCHITECTURE.md``)."""
        return {
            "run": self.run,
            "decision": self.decision.to_dict(),
            "hypotheses": [h.to_dict() for h in self.hypotheses],
            "prefix_cache": self.prefix_cache.to_dict() if self.prefix_cache else None,
            "primary": self.primary.to_dict() if self.primary is not None else None,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any], source: str = DIAGNOSIS_JSON) -> Diagnosis:
        """A ``diagnosis.json`` document read back as far as it goes: a missing or mistyped
        part reads as unknown or empty (a reader shows what is there); ``InputError``
        naming ``source`` for a newer format."""
        document_version(doc, source, DIAGNOSIS_FORMAT_VERSION)
        cache = doc.get("prefix_cache")
        primary = doc.get("primary")
        return cls(
            run=_text(doc.get("run")),
            decision=Decision.from_dict(doc["decision"] if _is_doc(doc.get("decision")) else {}),
            hypotheses=[Finding.from_dict(h) for h in _list(doc.get("hypotheses")) if _is_doc(h)],
            prefix_cache=Finding.from_dict(cache) if _is_doc(cache) else None,
            primary=Primary.from_dict(primary) if _is_doc(primary) else None,
        )

    def findings(self) -> list[Finding]:
        """The hypotheses, then the prefix-cache verdict when there is one."""
        return [*self.hypotheses, *([self.prefix_cache] if self.prefix_cache else [])]


#: What a reader shows for a status or a value the document does not hold.
UNKNOWN = "unknown"


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _is_doc(value: Any) -> bool:
    return isinstance(value, dict)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None
