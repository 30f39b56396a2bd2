"""``run.json``: what a bench run was, typed, with its format version.

Written first with ``status: running`` before anything is sent, so that a run killed
outright still says what it was; rewritten at the end with its status (``complete``,
``interrupted``, ``failed``), the reason and the load generator's account. ``compare``
requires ``workload`` (the spec, seed included) and ``probes.server_metrics`` tells the
timeline which mapping read the scrapes. The bench builds the sections typed
(``runfmt.run_sections``), ``RunInfo`` holds them typed and readers read the same types;
``runfmt.codec`` writes and reads them.

Format versions: 1 is every ``run.json`` written before the key ``format_version``
existed; 2 adds that key and nothing else. ``RunInfo.from_json`` reads both, and refuses
a version newer than this one with one line saying so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from runfmt.codec import EMPTY, decode, encode, key, unrecorded
from runfmt.names import RUN_JSON
from runfmt.run_result import RunResult
from runfmt.run_sections import (
    CacheProtocolSection,
    Clock,
    Geometry,
    LoadSection,
    PlanSection,
    ProbesSection,
    TargetSection,
)
from runfmt.run_workload import WorkloadSection
from runfmt.rundir import RunDir
from runfmt.slo import Slo
from runfmt.version import document_version
from runtime.version import package_version
from workloads.errors import InputError

#: The ``format_version`` this version writes.
RUN_FORMAT_VERSION = 2
TOOL = "prefillscope"


def iso(wall: float) -> str:
    """A Unix time as UTC ISO 8601 to the millisecond."""
    return datetime.fromtimestamp(wall, UTC).isoformat(timespec="milliseconds")


def started_clock(wall_t0: float) -> Clock:
    """The ``clock`` of a run whose clock's zero is ``wall_t0`` (Unix time)."""
    return Clock(wall_t0=wall_t0, started_at=iso(wall_t0))


@dataclass(frozen=True)
class RunInfo:
    """``run.json``, its fields in the document's key order (see ``runfmt.run_sections``)."""

    format_version: int = RUN_FORMAT_VERSION
    tool: str = TOOL
    tool_version: str = field(default_factory=package_version)
    command: tuple[str, ...] = ()
    #: The user's ``--label KEY=VALUE`` pairs, as given (compare, export, reports, runs);
    #: absent from the file when none were given.
    labels: Mapping[str, str] = key(omit_empty=True, default_factory=EMPTY)
    status: str = "running"
    reason: str | None = None
    clock: Clock = field(default_factory=Clock)
    target: TargetSection = field(default_factory=TargetSection)
    workload: WorkloadSection = field(default_factory=lambda: unrecorded(WorkloadSection))
    #: The workload's seed beside its spec, as written (``seed`` reads the spec's).
    seed_written: int | None = key("seed", default=None)
    plan: PlanSection = field(default_factory=PlanSection)
    load: LoadSection = field(default_factory=LoadSection)
    oracle: Geometry = field(default_factory=Geometry)
    #: The SLO's bounds; None: no SLO given.
    slo: Slo | None = None
    probes: ProbesSection = field(default_factory=ProbesSection)
    cache_protocol: CacheProtocolSection = field(default_factory=CacheProtocolSection)
    result: RunResult | None = None
    #: Once the run is over: how long it took from the clock's zero.
    duration_s: float | None = key(omit_none=True, default=None)
    #: Keys this version does not know (a newer writer's), kept and written back.
    extra: Mapping[str, Any] = field(default_factory=EMPTY)

    @property
    def wall_t0(self) -> float | None:
        """Unix time of the run clock's zero (None only in a partial ``run.json``)."""
        return self.clock.wall_t0

    @property
    def ended_at(self) -> str | None:
        return self.clock.ended_at

    @property
    def seed(self) -> int | None:
        """The workload's seed as its spec records it."""
        return self.workload.seed

    @property
    def workload_name(self) -> str | None:
        """The workload's name as recorded (``--workload``), even when its spec cannot be
        rebuilt (``runfmt.run.Run.spec`` is the spec itself)."""
        return self.workload.workload or None

    def workload_differences(
        self, other: RunInfo, ignore: Iterable[str] = ()
    ) -> list[tuple[str, Any, Any]] | None:
        """How the workload spec this run recorded differs from ``other``'s, key by key with
        ``ignore`` left out: ``(key, this run's value, the other's)``, in key order. What
        was recorded is compared, not a rebuilt spec, so that a spec this version cannot
        rebuild still matches its twin. ``None`` when either recorded none."""
        specs = (encode(self.workload), encode(other.workload))
        if not all(specs):
            return None
        skip = set(ignore)
        a, b = ({k: v for k, v in s.items() if k not in skip} for s in specs)
        return [(k, a.get(k), b.get(k)) for k in sorted(a | b) if a.get(k) != b.get(k)]

    def finished(self, status: str, reason: str | None, ended_wall: float) -> RunInfo:
        """This run, over at ``ended_wall`` (Unix time) with ``status`` and ``reason``."""
        started = ended_wall if self.wall_t0 is None else self.wall_t0
        return replace(
            self,
            status=status,
            reason=reason,
            clock=replace(self.clock, ended_at=iso(ended_wall)),
            duration_s=ended_wall - started,
        )

    def to_json(self) -> dict[str, Any]:
        """The ``run.json`` document."""
        return encode(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any], source: str = RUN_JSON) -> RunInfo:
        """A ``run.json`` document of any version this one reads; ``InputError`` naming
        ``source`` for a newer version. A partial document (a run killed before its first
        write was complete, a hand-made one) reads with what it has."""
        document_version(doc, source, RUN_FORMAT_VERSION)  # every older one reads the same
        info = decode(cls, doc)
        return replace(
            info,
            # read as, and written again as, this version
            format_version=RUN_FORMAT_VERSION,
            status=info.status if doc.get("status") else "unknown",
            tool_version=info.tool_version if doc.get("tool_version") else "unknown",
            extra={k: v for k, v in info.extra.items() if k not in ("format_version", "status")},
        )


_LABEL_KEY = re.compile(r"^[A-Za-z0-9_.-]+$")


def parse_labels(items: Iterable[str], flag: str = "--label") -> dict[str, str]:
    """``["team=infra", "gpu=h100"]`` → ``{"team": "infra", "gpu": "h100"}``; one line
    naming ``flag`` for an item that is not KEY=VALUE or a key given twice."""
    labels: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not _LABEL_KEY.match(key):
            raise InputError(
                flag, f"{item!r} is not KEY=VALUE", "e.g. --label gpu=h100 (letters, digits, _.-)"
            )
        if key in labels:
            raise InputError(flag, f"{key} is given twice", "give each key once")
        labels[key] = value.strip()
    return labels


def label_text(labels: Mapping[str, str]) -> str:
    """``KEY=VALUE`` pairs in one string, as a reader typed them (empty without labels)."""
    return " ".join(f"{k}={v}" for k, v in labels.items())


def read_run_info(run: RunDir) -> RunInfo:
    """The run's ``run.json``, typed (``InputError`` when it is missing or unreadable)."""
    return RunInfo.from_json(run.read_json(RUN_JSON), str(run.path / RUN_JSON))
