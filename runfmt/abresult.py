"""``ab.json``: the result of a chunk-size A/B, typed by section, with its version.

``diagnose.ab.AbAnalysis`` computes the verdict, the arms, the comparisons with their
intervals, the conditions and the trade-off; the session adds how the A/B ran (status,
servers, workload, command) and writes it through ``ABResult``. Format versions: 1 is
every ``ab.json`` written before ``format_version`` existed; 2 adds that key only.

Keys added within version 2 (nothing older changed meaning): ``status: running`` (the
document written when the A/B starts and after each trial, before its analysis);
``arms[].events`` (the per-prefill stall events: ``count``, ``alone`` and per metric
``event_*_mean_s`` with ``event_*_interval_s``) and ``arms[].event_*_s``; the
``event_stall``/``event_lost``/``event_ttft`` rows of ``comparisons``; ``verdict.outcome``
(winner, equivalent, inconclusive, no winner, refused), ``verdict.unit`` and
``unit_reason`` (what the stall was judged on, and why), ``verdict.min_effect`` and
``verdict.needed`` (for an inconclusive verdict: the comparison and the units per arm
that would decide); ``settings.min_effect``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from runfmt.document import SectionedDocument
from runfmt.names import AB_JSON

#: The ``format_version`` this version writes.
AB_FORMAT_VERSION = 2


@dataclass
class ABResult(SectionedDocument):
    """The sections of ``ab.json`` every A/B has; the rest (``mode``, ``launch``,
    ``servers``, ``warmup_trials`` …) are in ``extra``."""

    FILE: ClassVar[str] = AB_JSON
    FORMAT_VERSION: ClassVar[int] = AB_FORMAT_VERSION

    status: str = "unknown"
    reason: str | None = None
    verdict: dict[str, Any] = field(default_factory=dict)
    arms: list[dict[str, Any]] = field(default_factory=list)
    reference: dict[str, Any] = field(default_factory=dict)
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    conditions: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    chunks: list[int] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    tool_version: str = ""
