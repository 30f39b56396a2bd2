"""``run.json``: what a bench run was, typed, with its format version.

Written first with ``status: running`` before anything is sent, so that a run killed
outright still says what it was; rewritten at the end with its status (``complete``,
``interrupted``, ``failed``), the reason and the load generator's account. ``compare``
requires ``workload`` (the spec, seed included) and ``probes.server_metrics`` tells the
timeline which mapping read the scrapes. The bench fills the sections in as dicts;
readers take them typed, ``RunInfo.typed`` (``runfmt.runinfo_sections``).

Format versions: 1 is every ``run.json`` written before the key ``format_version``
existed; 2 adds that key and nothing else. ``RunInfo.from_json`` reads both, and refuses
a version newer than this one with one line saying so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from runfmt.names import RUN_JSON
from runfmt.rundir import RunDir
from runfmt.runinfo_sections import RunInfoSections
from runfmt.version import document_version
from runtime.version import package_version
from workloads.errors import InputError

#: The ``format_version`` this version writes.
RUN_FORMAT_VERSION = 2
TOOL = "prefillscope"


def iso(wall: float) -> str:
    """A Unix time as UTC ISO 8601 to the millisecond."""
    return datetime.fromtimestamp(wall, UTC).isoformat(timespec="milliseconds")


@dataclass
class RunInfo:
    """The pieces of ``run.json``, filled in as the run goes."""

    command: list[str]
    #: Unix time of the run clock's zero (None only in a partial ``run.json`` read back).
    wall_t0: float | None
    target: dict[str, Any]
    workload: dict[str, Any]
    plan: dict[str, Any]
    load: dict[str, Any]
    oracle: dict[str, Any]
    slo: dict[str, Any] | None = None
    #: The user's ``--label KEY=VALUE`` pairs, as given (compare, export, reports, runs).
    labels: dict[str, str] = field(default_factory=dict)
    probes: dict[str, Any] = field(default_factory=dict)
    cache_protocol: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = None
    status: str = "running"
    reason: str | None = None
    #: Once the run is over: when it ended (ISO) and how long it took from ``wall_t0``.
    ended_at: str | None = None
    duration_s: float | None = None
    tool_version: str = field(default_factory=package_version)
    format_version: int = RUN_FORMAT_VERSION
    #: Keys this version does not know (a newer writer's), kept and written back.
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def typed(self) -> RunInfoSections:
        """The sections as they stand, typed for reading (built anew at each ask: the run
        fills the dicts in as it goes). Readers outside ``runfmt`` ask these."""
        return RunInfoSections.from_dicts(
            target=self.target,
            plan=self.plan,
            load=self.load,
            oracle=self.oracle,
            probes=self.probes,
            slo=self.slo,
            cache_protocol=self.cache_protocol,
        )

    @property
    def workload_name(self) -> str | None:
        """The workload's name as recorded (``--workload``), even when its spec cannot be
        rebuilt (``runfmt.run.Run.spec`` is the spec itself)."""
        name = self.workload.get("workload") if isinstance(self.workload, dict) else None
        return name if isinstance(name, str) and name else None

    @property
    def seed(self) -> int | None:
        """The workload's seed as recorded."""
        seed = self.workload.get("seed") if isinstance(self.workload, dict) else None
        return seed if isinstance(seed, int) and not isinstance(seed, bool) else None

    def workload_differences(
        self, other: RunInfo, ignore: Iterable[str] = ()
    ) -> list[tuple[str, Any, Any]] | None:
        """How the workload spec this run recorded differs from ``other``'s, key by key with
        ``ignore`` left out: ``(key, this run's value, the other's)``, in key order. What
        was recorded is compared, not a rebuilt spec, so that a spec this version cannot
        rebuild still matches its twin; one recorded as something other than an object is
        compared whole, under the key ``""``. ``None`` when either recorded none."""
        specs = (self.workload, other.workload)
        if not all(specs):
            return None
        if not all(isinstance(spec, dict) for spec in specs):
            return [] if specs[0] == specs[1] else [("", *specs)]
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
            ended_at=iso(ended_wall),
            duration_s=ended_wall - started,
        )

    def to_json(self) -> dict[str, Any]:
        """The ``run.json`` document."""
        clock: dict[str, Any] = {}
        if self.wall_t0 is not None:
            clock = {"wall_t0": self.wall_t0, "started_at": iso(self.wall_t0)}
        doc: dict[str, Any] = {
            "format_version": self.format_version,
            "tool": TOOL,
            "tool_version": self.tool_version,
            "command": self.command,
            **({"labels": self.labels} if self.labels else {}),  # absent: none given
            "status": self.status,
            "reason": self.reason,
            "clock": clock,
            "target": self.target,
            "workload": self.workload,
            "seed": self.workload.get("seed") if isinstance(self.workload, dict) else None,
            "plan": self.plan,
            "load": self.load,
            "oracle": self.oracle,
            "slo": self.slo,
            "probes": self.probes,
            "cache_protocol": self.cache_protocol,
            "result": self.result,
        }
        if self.ended_at is not None:
            clock["ended_at"] = self.ended_at
            doc["duration_s"] = self.duration_s
        return doc | self.extra

    @classmethod
    def from_json(cls, doc: dict[str, Any], source: str = RUN_JSON) -> RunInfo:
        """A ``run.json`` document of any version this one reads; ``InputError`` naming
        ``source`` for a newer version. A partial document (a run killed before its first
        write was complete, a hand-made one) reads with what it has."""
        document_version(doc, source, RUN_FORMAT_VERSION)  # every older one reads the same
        clock = doc.get("clock") if isinstance(doc.get("clock"), dict) else {}
        wall_t0 = clock.get("wall_t0")
        return cls(
            command=list(doc.get("command") or []),
            wall_t0=None if wall_t0 is None else float(wall_t0),
            target=doc.get("target") or {},
            workload=doc.get("workload") or {},
            plan=doc.get("plan") or {},
            load=doc.get("load") or {},
            oracle=doc.get("oracle") or {},
            slo=doc.get("slo"),
            labels=_labels(doc.get("labels")),
            probes=doc.get("probes") or {},
            cache_protocol=doc.get("cache_protocol") or {},
            result=doc.get("result"),
            status=str(doc.get("status") or "unknown"),
            reason=doc.get("reason"),
            ended_at=clock.get("ended_at"),
            duration_s=doc.get("duration_s"),
            tool_version=str(doc.get("tool_version") or "unknown"),
            format_version=RUN_FORMAT_VERSION,  # read as, and written again as, this version
            extra={k: v for k, v in doc.items() if k not in _KNOWN},
        )


#: The keys of ``run.json`` this version writes.
_KNOWN = {
    "format_version", "tool", "tool_version", "command", "labels", "status", "reason", "clock",
    "target", "workload", "seed", "plan", "load", "oracle", "slo", "probes",
    "cache_protocol", "result", "duration_s",
}  # fmt: skip


def _labels(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}


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


def label_text(labels: dict[str, str]) -> str:
    """``KEY=VALUE`` pairs in one string, as a reader typed them (empty without labels)."""
    return " ".join(f"{k}={v}" for k, v in labels.items())


def read_run_info(run: RunDir) -> RunInfo:
    """The run's ``run.json``, typed (``InputError`` when it is missing or unreadable)."""
    return RunInfo.from_json(run.read_json(RUN_JSON), str(run.path / RUN_JSON))
