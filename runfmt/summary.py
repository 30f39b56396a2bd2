"""``summary.json``: the figures of one bench run, typed, with its version.

``probes.latency.summarize_frames`` builds the client's sections and
``probes.server_summary`` the server's; the session writes the ``Summary`` it holds them
in through ``runfmt.codec``, and every reader reads the same frozen types back
(``runfmt.summary_sections``, ``runfmt.summary_server``). The latencies are the
registered metrics' (``runfmt.metrics``: a metric declared in any module is one
more key): ``latencies`` holds each distribution by its JSON key (``ttft_s`` …), written
at the top level of the document, where a reader of any version finds it.

Format versions: 1 is every ``summary.json`` written before ``format_version`` existed;
2 adds that key and nothing else. A summary read keeps its version (``format_version``,
``None`` for a version-1 file) and is written again as this version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from runfmt.codec import EMPTY, decode, encode, frozen_map, key
from runfmt.names import SUMMARY_JSON
from runfmt.rundir import RunDir
from runfmt.summary_sections import (
    ChunksSection,
    ClientSection,
    ErrorMessage,
    GoodputSection,
    PrefixSection,
    RequestsSection,
    StallsSection,
    Stats,
    ThroughputSection,
    UsageSuspect,
)
from runfmt.summary_server import ServerSection
from runfmt.version import FIRST_FORMAT_VERSION, document_version

#: The ``format_version`` this version writes.
SUMMARY_FORMAT_VERSION = 2
#: A latency's JSON key (``runfmt.metrics.json_name``): ``<name>_s``.
LATENCY_KEY = r"\w+_s"


@dataclass(frozen=True)
class Summary:
    """``summary.json``, its sections in the document's key order. ``goodput`` is
    ``None`` when the run had no SLO, ``stalls`` for a run of one request kind (the
    section ``probes.stall_events`` owns), ``percentiles`` unless asked for
    (``--metric-percentiles``: metric → label → seconds), ``server_prometheus`` unless a
    Prometheus server was read beside a scrape."""

    FILE: ClassVar[str] = SUMMARY_JSON
    FORMAT_VERSION: ClassVar[int] = SUMMARY_FORMAT_VERSION

    requests: RequestsSection = field(default_factory=RequestsSection)
    #: Failed requests by error class, most frequent first.
    errors: Mapping[str, int] = field(default_factory=EMPTY)
    error_messages: tuple[ErrorMessage, ...] = ()
    #: Each registered latency's distribution by its key (``ttft_s`` …), in the
    #: registry's order.
    latencies: Mapping[str, Stats] = key(inline=LATENCY_KEY, default_factory=EMPTY)
    throughput: ThroughputSection = field(default_factory=ThroughputSection)
    goodput: GoodputSection | None = None
    prefix: PrefixSection = field(default_factory=PrefixSection)
    usage_suspect: UsageSuspect = field(default_factory=UsageSuspect)
    chunks: ChunksSection = field(default_factory=ChunksSection)
    stalls: StallsSection | None = None
    client: ClientSection = field(default_factory=ClientSection)
    percentiles: Mapping[str, Mapping[str, Any]] | None = key(omit_none=True, default=None)
    server: ServerSection | None = key(omit_none=True, default=None)  # noqa: RUF009
    server_prometheus: ServerSection | None = key(omit_none=True, default=None)  # noqa: RUF009
    #: The version read (``None``: version 1, or written by this version).
    format_version: int | None = key(omit_none=True, default=None, compare=False)
    #: Keys this version does not know (a newer writer's), kept and written back.
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)

    def latency(self, key: str) -> Stats | None:
        """The client's distribution of ``key`` (``ttft_s``, ``itl_s`` …, as
        ``runfmt.metrics`` names them), if the summary has it."""
        return self.latencies.get(key)

    def statistic(self, key: str, name: str) -> Any:
        """One statistic (``p99`` …) of the client's distribution of ``key``, as written;
        ``None`` when the summary has neither."""
        stats = self.latency(key)
        return stats.get(name) if stats is not None else None

    def to_json(self) -> dict[str, Any]:
        """The ``summary.json`` document: this version's ``format_version``, then the
        sections."""
        doc = encode(replace(self, format_version=None))
        return {"format_version": SUMMARY_FORMAT_VERSION} | doc

    def as_read(self) -> dict[str, Any]:
        """The document as its file held it: ``to_json`` with the version read (none for
        a version-1 file, which had no key)."""
        doc = encode(replace(self, format_version=None))
        if self.format_version is None or self.format_version == FIRST_FORMAT_VERSION:
            return doc
        return {"format_version": self.format_version} | doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], source: str | None = None) -> Summary:
        """A ``summary.json`` of any version this one reads (``InputError`` naming
        ``source``, the file, for a newer one)."""
        version = document_version(doc, source or SUMMARY_JSON, SUMMARY_FORMAT_VERSION)
        read = decode(cls, {k: v for k, v in doc.items() if k != "format_version"})
        extra = {k: v for k, v in read.extra.items() if k != "format_version"}
        return replace(read, format_version=version, extra=frozen_map(extra))

    @classmethod
    def read(cls, run: RunDir) -> Summary:
        """The summary in ``run`` (``InputError`` when missing, unreadable or newer)."""
        return cls.from_json(run.read_json(SUMMARY_JSON), str(run.path / SUMMARY_JSON))
