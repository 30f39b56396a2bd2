"""``summary.json``: the figures of one bench run, typed by section, with its version.

``probes.latency.summarize`` computes the client's sections and
``probes.server_summary`` the server's; the session writes them through ``Summary``.
Format versions: 1 is every ``summary.json`` written before ``format_version`` existed;
2 adds that key and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from runfmt.document import SectionedDocument
from runfmt.names import SUMMARY_JSON
from runfmt.rundir import RunDir

#: The ``format_version`` this version writes.
SUMMARY_FORMAT_VERSION = 2

Section = dict[str, Any]


@dataclass
class Summary(SectionedDocument):
    """The sections of ``summary.json``; a latency section is a ``describe()`` dict
    (``runtime.quantiles``), keyed as ``probes.metric_registry`` names it. Others
    (``server_prometheus``, ``error_messages`` …) are in ``extra``."""

    FILE: ClassVar[str] = SUMMARY_JSON
    FORMAT_VERSION: ClassVar[int] = SUMMARY_FORMAT_VERSION

    requests: Section = field(default_factory=dict)
    errors: Section = field(default_factory=dict)
    ttft_s: Section = field(default_factory=dict)
    ttft_sent_s: Section = field(default_factory=dict)
    itl_s: Section = field(default_factory=dict)
    tpot_s: Section = field(default_factory=dict)
    e2e_s: Section = field(default_factory=dict)
    e2e_sent_s: Section = field(default_factory=dict)
    throughput: Section = field(default_factory=dict)
    goodput: Section = field(default_factory=dict)
    prefix: Section = field(default_factory=dict)
    chunks: Section = field(default_factory=dict)
    client: Section = field(default_factory=dict)
    server: Section = field(default_factory=dict)


def read_summary(run: RunDir) -> Summary:
    """The run's ``summary.json``, typed (``InputError`` when missing or unreadable)."""
    return Summary.read(run)
