"""``isolation.json``: the result of a tenant-isolation experiment, typed by section.

``session.isolation`` runs the experiment and ``diagnose.isolation`` states the verdict;
the document holds the verdict for the sweep, one experiment per prefix length (the
control and cross channels: the TTFT gap with its interval, the attacker's power, the
server's cached tokens, the verdict and its rule), the power check, the tenants (as
hashes), the settings, the target, every probe (timings and token counts, never a prompt)
and the command. The secret prefix is there only as a SHA-256 of its token ids. Format
versions: 1 is the first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from runfmt.document import SectionedDocument
from runfmt.names import ISOLATION_JSON

#: The ``format_version`` this version writes.
ISOLATION_FORMAT_VERSION = 1


@dataclass
class IsolationResult(SectionedDocument):
    """The sections of ``isolation.json``; any other (``notes``, ``power`` …) is in ``extra``."""

    FILE: ClassVar[str] = ISOLATION_JSON
    FORMAT_VERSION: ClassVar[int] = ISOLATION_FORMAT_VERSION

    status: str = "unknown"
    reason: str | None = None
    verdict: dict[str, Any] = field(default_factory=dict)
    experiments: list[dict[str, Any]] = field(default_factory=list)
    tenants: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    target: dict[str, Any] = field(default_factory=dict)
    probes: list[dict[str, Any]] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    tool_version: str = ""
