"""The diagnosis as the report shows it: findings with their tone, evidence lines, the
decision and the primary finding, read from ``diagnosis.json`` through
``runfmt.diagnosis``."""

from __future__ import annotations

from typing import Any

from prefillscope.report.content import STATUS_TONES
from prefillscope.report.numbers import UNKNOWN, fmt_value
from runfmt.diagnosis import Diagnosis, Evidence, Finding


def findings(diagnosis: dict[str, Any] | None) -> list[Finding]:
    """The hypotheses and the prefix-cache verdict of a ``diagnosis.json`` document."""
    return Diagnosis.from_json(diagnosis).findings() if diagnosis else []


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


def decision(diagnosis: dict[str, Any] | None) -> tuple[bool | None, list[str], str]:
    """(hard failure?, reasons, recommendation) from the diagnosis' decision block; the
    recommendation opens with the primary finding when the diagnosis names one."""
    read = Diagnosis.from_json(diagnosis or {})
    recommendation = read.decision.recommendation
    primary = primary_line(diagnosis)
    return (
        read.decision.hard_failure,
        read.decision.reasons,
        f"{primary} {recommendation}".strip() if primary else recommendation,
    )


def primary_line(diagnosis: dict[str, Any] | None) -> str | None:
    """``Primary finding: H1 (strong confidence) — why.`` from ``diagnosis.primary``."""
    primary = Diagnosis.from_json(diagnosis or {}).primary
    if primary is None or not primary.finding:
        return None
    return (
        f"Primary finding: {primary.finding} ({primary.confidence or UNKNOWN} "
        f"confidence) — {primary.why}"
    ).strip()
