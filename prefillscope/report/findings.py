"""The diagnosis as the report shows it: findings with their tone, evidence lines, the
decision and the primary finding, of the ``Diagnosis`` the run was opened with
(``runfmt.run``: ``diagnosis.json`` parsed once)."""

from __future__ import annotations

from prefillscope.report.content import STATUS_TONES
from prefillscope.report.numbers import UNKNOWN, fmt_value
from runfmt.diagnosis import Diagnosis, Evidence, Finding


def findings(diagnosis: Diagnosis | None) -> list[Finding]:
    """The hypotheses and the prefix-cache verdict of a diagnosis."""
    return diagnosis.findings() if diagnosis is not None else []


def tone(status: str) -> str:
    """The colour a finding's status is shown in."""
    return STATUS_TONES.get(status, "muted")


def evidence_line(evidence: Evidence) -> str:
    """``name: value unit — source (detail)``."""
    unit = evidence.unit
    text = f"{evidence.name}: {fmt_value(evidence.value)}{' ' + unit if unit else ''}"
    if evidence.source:
        text += f" — {evidence.source}"
    if evidence.detail:
        text += f" ({evidence.detail})"
    return text


def decision(diagnosis: Diagnosis) -> tuple[bool | None, list[str], str]:
    """(hard failure?, reasons, recommendation) from the diagnosis' decision block; the
    recommendation opens with the primary finding when the diagnosis names one."""
    recommendation = diagnosis.decision.recommendation
    primary = primary_line(diagnosis)
    return (
        diagnosis.decision.hard_failure,
        list(diagnosis.decision.reasons),
        f"{primary} {recommendation}".strip() if primary else recommendation,
    )


def primary_headline(diagnosis: Diagnosis) -> tuple[str, str] | None:
    """The primary finding as a headline and its tone: ``H1 Prefill chunks starving
    decodes — supported (strong confidence)``; ``None`` when the diagnosis names none."""
    primary = diagnosis.primary
    if primary is None or not primary.finding:
        return None
    found = next((f for f in diagnosis.findings() if f.id == primary.finding), None)
    if found is None:
        return f"{primary.finding} ({primary.confidence or UNKNOWN} confidence)", "muted"
    text = f"{found.id} {found.title} — {found.status} ({primary.confidence or UNKNOWN} confidence)"
    return text, tone(found.status)


def primary_line(diagnosis: Diagnosis) -> str | None:
    """``Primary finding: H1 (strong confidence) — why.`` from ``diagnosis.primary``."""
    primary = diagnosis.primary
    if primary is None or not primary.finding:
        return None
    return (
        f"Primary finding: {primary.finding} ({primary.confidence or UNKNOWN} "
        f"confidence) — {primary.why}"
    ).strip()
