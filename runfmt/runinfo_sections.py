"""The sections of ``run.json`` typed for reading: target, plan, load, oracle, SLO, probes.

``runfmt.runinfo.RunInfo`` keeps each section as the JSON object the run wrote (the bench
fills them in as it goes, and a document read and written back is unchanged);
``RunInfo.typed`` is the same run as frozen dataclasses, and a reader outside ``runfmt``
asks these, never the dicts (``tests/runfmt/test_runinfo_walks.py`` holds it).

Each class is built by ``from_dict``, which reads any format version: a key an older or a
partial ``run.json`` lacks reads as ``None`` or empty, never as an error. Values are kept
as written, except that a value of the wrong JSON type (a hand-edited file) reads as
absent. The embedded engine's configuration stays a read-only mapping of its settings:
an open set, keyed like ``simengine``'s ``EngineConfig`` fields, which this package does
not import.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Self

from runfmt.summary_sections import Raw, as_object


def _text(value: Any) -> str | None:
    """A non-empty string, else ``None``."""
    return value if isinstance(value, str) and value else None


def _number(value: Any) -> float | None:
    """A JSON number (not a bool), else ``None``."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _whole(value: Any) -> int | None:
    """A JSON whole number (not a bool), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if float(value).is_integer() else None


def _strings(value: Any) -> Mapping[str, str] | None:
    """A JSON object of strings, read-only; None when absent or not one."""
    if not isinstance(value, Mapping) or not value:
        return None
    return MappingProxyType({str(k): str(v) for k, v in value.items()})


@dataclass(frozen=True)
class TargetSection:
    """The server the run measured: where, what kind, which model, and the embedded
    engine's settings when the run drove it in-process (``None`` otherwise). From what
    the server said about itself (``server_info``): its model's path (``model`` is the
    name it serves it by), the command line it was started with and its chunk budget,
    the settings of its environment, each ``None`` where it did not say."""

    url: str | None
    flavour: str | None
    api: str | None
    model: str | None
    vocab_size: int | None
    engine: Mapping[str, Any] | None
    model_path: str | None = None
    command: tuple[str, ...] | None = None
    environment: Mapping[str, str] | None = None
    chunk_budget: int | None = None

    @classmethod
    def from_dict(cls, raw: Raw) -> Self:
        engine = raw.get("engine")
        info = as_object(raw.get("server_info"))
        command = info.get("command")
        argv = tuple(str(w) for w in command) if isinstance(command, list) and command else None
        return cls(
            url=_text(raw.get("url")),
            flavour=_text(raw.get("flavour")),
            api=_text(raw.get("api")),
            model=_text(raw.get("model")),
            vocab_size=_whole(raw.get("vocab_size")),
            engine=MappingProxyType(dict(engine)) if isinstance(engine, Mapping) else None,
            model_path=_text(info.get("model_path")),
            command=argv,
            environment=_strings(info.get("environment")),
            chunk_budget=_whole(info.get("chunk_budget")),
        )


@dataclass(frozen=True)
class PlanSection:
    """What the plan was: its closed-loop concurrency and its realised arrival rate."""

    concurrency: int | None
    offered_rate_per_s: float | None

    @classmethod
    def from_dict(cls, raw: Raw) -> Self:
        return cls(_whole(raw.get("concurrency")), _number(raw.get("offered_rate_per_s")))


@dataclass(frozen=True)
class LoadSection:
    """How the load generator ran: its cap on open streams and its client processes."""

    max_concurrency: int | None
    workers: int | None

    @classmethod
    def from_dict(cls, raw: Raw) -> Self:
        return cls(_whole(raw.get("max_concurrency")), _whole(raw.get("workers")))


@dataclass(frozen=True)
class OracleSection:
    """The prefix oracle's cache geometry: tokens per block and the pool's blocks."""

    block_size: int | None
    num_blocks: int | None

    @classmethod
    def from_dict(cls, raw: Raw) -> Self:
        return cls(_whole(raw.get("block_size")), _whole(raw.get("num_blocks")))


@dataclass(frozen=True)
class ProbeState:
    """How one probe went (``state``: ``ok``, ``off``, ``failed`` …, with its reason), and
    the status object as recorded, which the summary carries on unchanged."""

    state: str | None
    reason: str | None
    recorded: Raw

    @property
    def worked(self) -> bool:
        """Whether it worked or said nothing (an old run), i.e. nothing to report."""
        return self.state in (None, "ok")

    @classmethod
    def from_dict(cls, raw: Raw) -> Self:
        return cls(_text(raw.get("state")), _text(raw.get("reason")), raw)


@dataclass(frozen=True)
class ProbeSection:
    """One probe's settings and status; for the server-metrics probe, the mapping it read
    the scrapes with (a user's file, or a built-in flavour's)."""

    name: str
    status: ProbeState
    mapping_file: str | None
    flavour: str | None

    @classmethod
    def from_dict(cls, name: str, raw: Raw) -> Self:
        return cls(
            name=name,
            status=ProbeState.from_dict(as_object(raw.get("status"))),
            mapping_file=_text(raw.get("mapping_file")),
            flavour=_text(raw.get("flavour")),
        )


@dataclass(frozen=True)
class ProbesSection:
    """The run's probes by name, in the order they were recorded."""

    by_name: Mapping[str, ProbeSection]

    def __iter__(self) -> Iterator[ProbeSection]:
        return iter(self.by_name.values())

    def get(self, name: str) -> ProbeSection | None:
        return self.by_name.get(name)

    @property
    def server_metrics(self) -> ProbeSection | None:
        return self.by_name.get("server_metrics")

    @classmethod
    def from_dict(cls, raw: Raw) -> Self:
        return cls(
            MappingProxyType(
                {str(k): ProbeSection.from_dict(str(k), as_object(v)) for k, v in raw.items()}
            )
        )


@dataclass(frozen=True)
class RunInfoSections:
    """One ``run.json``'s sections, typed (``RunInfo.typed``). ``slo`` is the recorded
    SLO's bounds by name (seconds); ``cache_protocol`` the protocol the load applied."""

    target: TargetSection
    plan: PlanSection
    load: LoadSection
    oracle: OracleSection
    probes: ProbesSection
    slo: Mapping[str, float]
    cache_protocol: str | None

    @classmethod
    def from_dicts(
        cls,
        *,
        target: Any,
        plan: Any,
        load: Any,
        oracle: Any,
        probes: Any,
        slo: Any,
        cache_protocol: Any,
    ) -> Self:
        bounds = {str(k): float(v) for k, v in as_object(slo).items() if _number(v) is not None}
        return cls(
            target=TargetSection.from_dict(as_object(target)),
            plan=PlanSection.from_dict(as_object(plan)),
            load=LoadSection.from_dict(as_object(load)),
            oracle=OracleSection.from_dict(as_object(oracle)),
            probes=ProbesSection.from_dict(as_object(probes)),
            slo=MappingProxyType(bounds),
            cache_protocol=_text(as_object(cache_protocol).get("applied")),
        )
