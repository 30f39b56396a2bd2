"""The sections of ``run.json``, declared once: the bench builds them, ``RunInfo`` holds
them and every reader reads them (``runfmt.codec`` writes and reads them as JSON).

Each section keeps what it does not declare in ``extra`` (a newer writer's keys, a value
of the wrong JSON type in a hand-edited file), so a ``run.json`` read and written back
holds the same keys and values. A key that only some runs carry is declared
``omit_none`` and stays absent while ``None``; every other key is written, ``null`` when
unknown. Three more sections are declared beside their writers' vocabulary:
``workload`` (``runfmt.run_workload``), ``result`` (the load generator's account,
``runfmt.run_result``) and ``slo`` (``runfmt.slo``). The embedded engine's
configuration is an open set keyed like ``simengine``'s ``EngineConfig`` fields, which
this package does not import: a read-only mapping.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from runfmt.codec import EMPTY, key


@dataclass(frozen=True)
class ServerInfo:
    """What the server said about itself: its model's path (``TargetSection.model`` is the
    name it serves it by), the command line it was started with, its chunk budget, the
    settings of its environment; each absent where it did not say. The rest of what it
    said (its version, ``total_slots`` …) stays in ``extra``."""

    model_path: str | None = key(omit_none=True, default=None)
    command: tuple[str, ...] | None = key(omit_none=True, default=None)
    environment: Mapping[str, str] | None = key(omit_none=True, default=None)
    chunk_budget: int | None = key(omit_none=True, default=None)
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class TargetSection:
    """The server the run measured: where, what kind, which model; ``engine`` is the
    embedded engine's settings when the run drove it in-process (absent otherwise)."""

    url: str | None = None
    paths: Mapping[str, str] = field(default_factory=EMPTY)
    flavour: str | None = None
    api: str | None = None
    model: str | None = None
    vocab_size: int | None = None
    max_model_len: int | None = None
    #: Where each fact above came from (``--model``, ``/v1/models`` …), by fact.
    discovered: Mapping[str, str] = field(default_factory=EMPTY)
    authenticated: bool = False
    server_info: ServerInfo = field(default_factory=ServerInfo)
    embedded: bool | None = key(omit_none=True, default=None)
    engine: Mapping[str, Any] | None = key(omit_none=True, default=None)
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class PlanSection:
    """What the plan was: its requests (warm-up included) by kind, its arrival, its
    closed-loop concurrency and its realised and asked rates."""

    requests: int | None = None
    warmup_requests: int | None = None
    arrival: str | None = None
    concurrency: int | None = None
    offered_rate_per_s: float | None = None
    asked_rate: float | None = None
    asked_rate_unit: str | None = None
    by_kind: Mapping[str, int] = field(default_factory=EMPTY)
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class LoadSection:
    """How the load generator ran: its cap on open streams, its request timeout, its
    deadline, its warm-up, its client processes (known once the plan is split), and with
    ``--ray`` the cluster's account (``session.ray_workers``)."""

    max_concurrency: int | None = None
    timeout_s: float | None = None
    duration_s: float | None = None
    warmup: int | None = None
    workers: int | None = key(omit_none=True, default=None)
    ray: Mapping[str, Any] | None = key(omit_none=True, default=None)
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Geometry:
    """The KV cache shape the prefix oracle replays with, and where it came from
    (``session.bench_oracle.geometry`` decides it; ``run.json["oracle"]``)."""

    block_size: int | None = None
    num_blocks: int | None = None
    source: str | None = None
    #: Which cache the server keeps (``workloads.cache_model``) and how that is known.
    cache_model: str = "blocks"
    cache_model_source: str = "default"
    #: Blocks of a CPU offload tier behind the pool (``num_cpu_blocks``); 0: none.
    offload_blocks: int = 0
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class ProbeState:
    """How one probe went (``state``: ``ok``, ``off``, ``failed`` …, with its reason) and
    its scrape counts."""

    state: str | None = None
    reason: str | None = None
    ok: int = 0
    failed: int = 0
    extra: Mapping[str, Any] = field(default_factory=EMPTY)

    @property
    def worked(self) -> bool:
        """Whether it worked or said nothing (an old run), i.e. nothing to report."""
        return self.state in (None, "ok")


@dataclass(frozen=True)
class ServerMetricsProbe:
    """The server-metrics probe: the page it scraped, how often, and the mapping it read
    the scrapes with (a user's file, or a built-in flavour's)."""

    url: str | None = None
    interval_s: float | None = None
    flavour: str | None = None
    mapping_file: str | None = None
    status: ProbeState = field(default_factory=ProbeState)
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class GpuProbe:
    """The GPU sampler: its ``--gpu-telemetry`` mode and interval."""

    mode: str | None = None
    interval_s: float | None = None
    status: ProbeState = field(default_factory=ProbeState)
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class PrometheusProbe:
    """The ``--prometheus`` source, when one was given."""

    url: str | None = None
    status: ProbeState = field(default_factory=ProbeState)
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class NamedProbe:
    """A probe of the run with its name, as ``ProbesSection`` lists them."""

    name: str
    status: ProbeState


@dataclass(frozen=True)
class ProbesSection:
    """The run's probes: each one's settings and how it went (``None``: not recorded)."""

    server_metrics: ServerMetricsProbe | None = None
    gpu: GpuProbe | None = None
    prometheus: PrometheusProbe | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)

    def __iter__(self) -> Iterator[NamedProbe]:
        """The probes recorded, in the order run.json lists them."""
        for name in ("server_metrics", "gpu", "prometheus"):
            probe = getattr(self, name)
            if probe is not None:
                yield NamedProbe(name, probe.status)


@dataclass(frozen=True)
class CacheProtocolSection:
    """The cache protocol the load carried out (``loadgen.cache``): what was asked, what
    was applied, the salt it sent and a note when it fell back."""

    requested: str | None = None
    applied: str | None = None
    salt: str | None = None
    note: str | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY)


@dataclass(frozen=True)
class Clock:
    """When the run started (its clock's zero, Unix time and ISO) and ended (ISO)."""

    wall_t0: float | None = key(omit_none=True, default=None)
    started_at: str | None = key(omit_none=True, default=None)
    ended_at: str | None = key(omit_none=True, default=None)
    extra: Mapping[str, Any] = field(default_factory=EMPTY)
