"""``summary.json``: the figures of one bench run, typed by section, with its version.

``probes.latency.summarize_frames`` computes the client's sections and
``probes.server_summary`` the server's; the session writes them through ``Summary``,
which keeps each as the JSON object it is, so a summary read and written back is
unchanged. Readers take its typed sections, ``Summary.typed`` (``SummarySections``; of a
summary's dict not yet written, ``SummarySections.of``): dataclasses of what each section
holds (``runfmt.summary_sections``, ``runfmt.summary_server``).

Format versions: 1 is every ``summary.json`` written before ``format_version`` existed;
2 adds that key and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from runfmt.document import SectionedDocument
from runfmt.names import SUMMARY_JSON
from runfmt.summary_sections import (
    ChunksSection,
    ClientSection,
    ErrorMessage,
    GoodputSection,
    PrefixSection,
    Raw,
    RequestsSection,
    Stats,
    ThroughputSection,
    UsageSuspect,
    as_object,
)
from runfmt.summary_server import ServerSection

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

    @property
    def typed(self) -> SummarySections:
        """The sections as the file holds them, typed (built anew at each ask: the
        sections are the dicts written, and may be changed)."""
        return SummarySections.from_dict(self.as_read())


@dataclass(frozen=True)
class SummarySections:
    """One ``summary.json``'s sections, typed (``Summary.typed``); ``goodput`` and
    ``server`` are ``None`` when the summary has none, the others empty."""

    requests: RequestsSection = field(default_factory=RequestsSection)
    throughput: ThroughputSection = field(default_factory=ThroughputSection)
    goodput: GoodputSection | None = None
    prefix: PrefixSection = field(default_factory=PrefixSection)
    chunks: ChunksSection = field(default_factory=ChunksSection)
    client: ClientSection = field(default_factory=ClientSection)
    server: ServerSection | None = None
    #: Failed requests by error class (``errors``).
    errors: Mapping[str, Any] = field(default_factory=dict)
    error_messages: tuple[ErrorMessage, ...] = ()
    usage_suspect: UsageSuspect = field(default_factory=UsageSuspect)
    #: The percentiles asked for (``--metric-percentiles``): metric → label → seconds.
    percentiles: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    raw: Raw = field(default_factory=dict, repr=False, compare=False)

    def latency(self, key: str) -> Stats | None:
        """The client's distribution of ``key`` (``ttft_s``, ``itl_s`` …, as
        ``probes.metric_registry`` names them), if the summary has it."""
        return Stats.from_dict(self.raw.get(key))

    def statistic(self, key: str, name: str) -> Any:
        """One statistic (``p99`` …) of the client's distribution of ``key``, as written;
        ``None`` when the summary has neither."""
        stats = self.latency(key)
        return stats.get(name) if stats is not None else None

    @classmethod
    def from_dict(cls, raw: Any) -> Self:
        """The sections of a summary as its JSON object holds them (any version)."""
        raw = as_object(raw)
        messages = raw.get("error_messages")
        return cls(
            RequestsSection.from_dict(raw.get("requests")),
            ThroughputSection.from_dict(raw.get("throughput")),
            GoodputSection.from_dict(raw.get("goodput")),
            PrefixSection.from_dict(raw.get("prefix")),
            ChunksSection.from_dict(raw.get("chunks")),
            ClientSection.from_dict(raw.get("client")),
            ServerSection.from_dict(raw.get("server")),
            as_object(raw.get("errors")),
            tuple(
                ErrorMessage.from_dict(m)
                for m in (messages if isinstance(messages, list) else [])
                if isinstance(m, Mapping)
            ),
            UsageSuspect.from_dict(raw.get("usage_suspect")),
            as_object(raw.get("percentiles")),
            raw,
        )

    @classmethod
    def of(cls, summary: SummaryLike) -> SummarySections:
        """The typed sections of ``summary``: a summary's JSON object (``None``: no
        summary, every section empty), or sections already typed."""
        return summary if isinstance(summary, SummarySections) else cls.from_dict(summary)


#: A summary as a reader may hold it: its typed sections, its JSON object, or none.
SummaryLike = SummarySections | Raw | None
