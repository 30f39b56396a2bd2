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
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from runfmt.codec import EMPTY, decode, encode, frozen_map, key
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


#: What a reader shows for a status or a value the document does not hold.
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


def _figure() -> Any:
    """A figure of the diagnosis: ``None`` when unscored, written by ``clean_number``."""
    return key(write=clean_number, default=None)


@dataclass(frozen=True)
class Evidence:
    """One number and where it came from."""

    name: str = ""
    value: float | int | str | None = _figure()
    unit: str = ""
    source: str = ""
    detail: str | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Finding:
    """A hypothesis (or the prefix cache) judged: status, why, and what would settle it.
    The ranking caps, links and costs findings by making new ones
    (``dataclasses.replace``: ``diagnose.ranking``, ``diagnose.checklist``); its lists are
    never edited once the finding is made."""

    id: str = ""
    title: str = ""
    status: str = UNKNOWN
    summary: str = ""
    evidence: list[Evidence] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    next: str = ""
    #: The deciding figure over its threshold (≥ 1 when supported); None when unscored.
    strength: float | None = _figure()
    #: Share of the decode time the cause accounts for (0–1), when it can be said.
    impact: float | None = _figure()
    #: Where the deciding figure came from: ``server``, ``client`` or ``model``; None
    #: when unscored.
    basis: str | None = None
    #: Ids of findings this one explains (``PC`` thrashing → more prefill → ``H1``).
    explains: list[str] = field(default_factory=list)
    #: The latency the cause explains, in request-seconds (``diagnose.costs``), and how
    #: it was reckoned; None when it cannot be said.
    cost_s: float | None = _figure()
    cost_how: str | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)

    def figure(self, name: str) -> float | None:
        """The number of the evidence called ``name`` (None: no such evidence, or it is
        not a number)."""
        value = next((e.value for e in self.evidence if e.name == name), None)
        return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True)
class Decision:
    """What to do now: contain (a hard failure) or measure first."""

    #: None only when read back from a document that does not say.
    hard_failure: bool | None = None
    reasons: tuple[str, ...] = ()
    recommendation: str = ""
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Primary:
    """The finding a reader should start from, how sure the ranking is, and why."""

    finding: str = ""
    confidence: str = ""
    why: str = ""
    secondary: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Diagnosis:
    """``diagnosis.json``: the run, the decision, the findings and the primary one."""

    run: str = ""
    decision: Decision = field(default_factory=Decision)
    hypotheses: tuple[Finding, ...] = ()
    #: None only when read back from a document without one.
    prefix_cache: Finding | None = None
    #: The primary finding (``diagnose.ranking`` picks it).
    primary: Primary | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)

    def hypothesis(self, hid: str) -> Finding:
        return next(h for h in self.findings() if h.id == hid)

    def to_json(self) -> dict[str, Any]:
        """The ``diagnosis.json`` document (``docs/ARCHITECTURE.md``)."""
        return encode(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any], source: str = DIAGNOSIS_JSON) -> Diagnosis:
        """A ``diagnosis.json`` document read back as far as it goes: a missing or mistyped
        part reads as unknown or empty (a reader shows what is there); ``InputError``
        naming ``source`` for a newer format."""
        document_version(doc, source, DIAGNOSIS_FORMAT_VERSION)
        read = decode(cls, doc)
        extra = {k: v for k, v in read.extra.items() if k != "format_version"}
        return replace(read, extra=frozen_map(extra))

    def findings(self) -> list[Finding]:
        """The hypotheses, then the prefix-cache verdict when there is one."""
        return [*self.hypotheses, *([self.prefix_cache] if self.prefix_cache else [])]
