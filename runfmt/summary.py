"""``summary.json``: the figures of one bench run, typed by section, with its version.

``probes.latency.summarize`` computes the client's sections and
``probes.server_summary`` the server's; the session writes them through ``Summary``.
Format versions: 1 is every ``summary.json`` written before ``format_version`` existed;
2 adds that key and nothing else. Sections a newer writer adds and this reader does not
know are kept, in order, in ``extra``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from runfmt.names import SUMMARY_JSON
from runfmt.rundir import RunDir
from runfmt.version import document_version

#: The ``format_version`` this version writes.
SUMMARY_FORMAT_VERSION = 2

Section = dict[str, Any]


@dataclass
class Summary:
    """The sections of ``summary.json``; a latency section is a ``describe()`` dict
    (``probes.quantiles``), keyed as ``probes.metric_registry`` names it."""

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
    #: Any other section (``server_prometheus``, ``error_messages`` …), in written order.
    extra: dict[str, Any] = field(default_factory=dict)
    format_version: int = SUMMARY_FORMAT_VERSION
    #: The sections given, in their order (written back so, and an absent one stays
    #: absent unless set); every section in declared order when none were.
    order: tuple[str, ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def from_sections(cls, sections: dict[str, Any]) -> Summary:
        """The summary of sections as the figures were computed (a plain dict)."""
        known = {f.name for f in fields(cls)} - _NOT_SECTIONS
        return cls(
            **{k: v for k, v in sections.items() if k in known},
            extra={k: v for k, v in sections.items() if k not in known},
            order=tuple(sections),
        )

    def to_json(self) -> dict[str, Any]:
        """The ``summary.json`` document: the version, then every section."""
        sections = {f.name: getattr(self, f.name) for f in fields(self)}
        sections = {k: v for k, v in sections.items() if k not in _NOT_SECTIONS} | self.extra
        given = [k for k in self.order if k in sections]  # read or written before
        keys = [*given, *(k for k in sections if k not in given and (sections[k] or not given))]
        return {"format_version": self.format_version} | {k: sections[k] for k in keys}

    @classmethod
    def from_json(cls, doc: dict[str, Any], source: str = SUMMARY_JSON) -> Summary:
        """A ``summary.json`` of any version this one reads (``InputError`` for newer)."""
        document_version(doc, source, SUMMARY_FORMAT_VERSION)
        return cls.from_sections({k: v for k, v in doc.items() if k != "format_version"})


#: The dataclass fields that are not sections of the document.
_NOT_SECTIONS = {"extra", "format_version", "order"}


def read_summary(run: RunDir) -> Summary:
    """The run's ``summary.json``, typed (``InputError`` when missing or unreadable)."""
    return Summary.from_json(run.read_json(SUMMARY_JSON), str(run.path / SUMMARY_JSON))
