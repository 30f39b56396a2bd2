"""The client's sections of ``summary.json`` and its distributions, declared once.

``probes.latency.summarize_frames`` builds these frozen sections and ``runfmt.summary``'s
``Summary`` holds them; ``runfmt.codec`` writes them and reads them back, so every reader
(diagnose, report, session, the CLI, compare) reads the types the bench wrote. Each field
is the JSON key of the same name. A key an older summary lacks (format 1, a section a run
never wrote) reads as the field's default (``None`` or empty), never as an error, and
every key a section does not declare is kept in its ``extra`` and written back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runfmt.codec import EMPTY, key
from runfmt.metrics import CLIENT_DISPATCH_LAG, DISPATCH_LAG, json_name
from runfmt.slo import Slo
from runtime.quantiles import STATISTICS

#: A stall metric's figure (``runfmt.metrics.json_name(prefix, part=...)``):
#: its mean, interval or worst event, in seconds.
STALL_FIGURE = r"\w+_(mean|interval|max)_s"


@dataclass(frozen=True)
class Distribution:
    """A distribution as ``runtime.quantiles.describe`` writes it: the mean, the quantiles
    (``runtime.quantiles.QUANTILES``) and the count of the values; ``None`` values when
    there were none."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p999: float | None = None
    count: int | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)

    #: What a server histogram (``runfmt.summary_server.Histogram``) says besides, which
    #: the client's own samples never do: per what its ITL is, how each quantile was made.
    per = None
    quantiles = None

    def get(self, statistic: str) -> float | None:
        """One of ``runtime.quantiles.STATISTICS`` (``mean``, ``p50`` …), as written."""
        return statistic_of(self, statistic)


def statistic_of(distribution: Any, statistic: str) -> float | None:
    """One of ``runtime.quantiles.STATISTICS`` of a distribution or a server histogram,
    as written; ``None`` for another name or a value that is no number."""
    value = getattr(distribution, statistic, None) if statistic in STATISTICS else None
    return value if isinstance(value, int | float) else None


@dataclass(frozen=True)
class Stats(Distribution):
    """A distribution with its largest value (``max``): a latency, the event loop's lag."""

    max: float | None = None


# -- the client's sections ---------------------------------------------------------------
@dataclass(frozen=True)
class RequestsSection:
    """``requests``: the measured requests counted (warm-up left out), by kind."""

    total: int | None = None
    completed: int | None = None
    failed: int | None = None
    warmup_excluded: int | None = None
    by_kind: Mapping[str, int] = field(default_factory=EMPTY)
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class ThroughputSection:
    """``throughput``: rates over the measured window (run clock); the output tokens a
    server's impossible usage claimed are left out and counted in
    ``output_tokens_excluded`` (absent when none)."""

    requests_per_s: float | None = None
    output_tokens_per_s: float | None = None
    output_tokens: int | None = None
    window_s: float | None = None
    start_s: float | None = None
    end_s: float | None = None
    output_tokens_excluded: int | None = key(omit_none=True, default=None)
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class GoodputSection:
    """``goodput``: the requests that met every bound of the run's SLO (``slo``: a
    latency's key → its bound in seconds)."""

    slo: Slo = field(default_factory=Slo)
    requests: int | None = None
    share: float | None = None
    requests_per_s: float | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class PrefixSection:
    """``prefix``: the cached share of prompt tokens, the oracle's and the server's
    (``None`` when unknown, with the reason)."""

    expected_hit_rate: float | None = None
    observed_hit_rate: float | None = None
    reported_requests: int | None = None
    usage_suspect_excluded: int | None = key(omit_none=True, default=None)
    expected_reason: str | None = key(omit_none=True, default=None)
    observed_reason: str | None = key(omit_none=True, default=None)
    #: The oracle's split by tier (``gpu``, ``cpu``) when the server has an offload tier.
    expected_hit_rate_by_tier: Mapping[str, float | None] | None = key(omit_none=True, default=None)
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class ChunksSection:
    """``chunks``: the streamed chunks of the completed requests."""

    count: int | None = None
    tokens: int | None = None
    multi_token: int | None = None
    multi_token_share: float | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class StallsSection:
    """``stalls`` (runs of more than one request kind, ``probes.stall_events``): the long
    prompts' kind, their prefills (the events) and those alone, the decode gaps, the
    stalled ones and their share, the normal gap, whether the pooled ITL p99 sees the
    stalls and the intervals' confidence; per stall metric its mean over the events, the
    interval of that mean and the worst event, keyed as the metric registry names them
    (``figures``)."""

    kind: str | None = None
    events: int | None = None
    alone: int | None = None
    gaps: int | None = None
    stall_gaps: int | None = None
    stall_gap_share: float | None = None
    normal_gap_s: float | None = None
    seen_by_itl_p99: bool | None = None
    confidence: float | None = None
    figures: Mapping[str, Any] = key(inline=STALL_FIGURE, default_factory=EMPTY)
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class WorkerShare:
    """One worker process's CPU share of a core (``client.cpu_share.workers``)."""

    worker: int | None = None
    mean: float | None = None
    max: float | None = None
    sustained_max: float | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class CpuShare:
    """``client.cpu_share``: the client's CPU share of a core, the busiest worker's with
    worker processes (each worker's in ``workers``)."""

    mean: float | None = None
    max: float | None = None
    sustained_max: float | None = None
    busiest_worker: int | None = key(omit_none=True, default=None)
    cores_mean: float | None = key(omit_none=True, default=None)
    workers: tuple[WorkerShare, ...] | None = key(omit_none=True, default=None)
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class ClientSection:
    """``client``: whether the load generator, not the server, shaped the run
    (``limited``, ``None`` when the summary does not say) and why; its dispatch lag, event
    loop lag, CPU share, and the wait for a ``--max-concurrency`` slot (absent when no
    request waited)."""

    dispatch_lag: Distribution | None = key(DISPATCH_LAG.key, default=None)  # noqa: RUF009
    #: Keyed as ``runfmt.metrics`` names it (``json_name(CLIENT_DISPATCH_LAG)``).
    dispatch_lag_p99_s: float | None = key(json_name(CLIENT_DISPATCH_LAG), default=None)
    loop_lag: Stats | None = key("loop_lag_s", default=None)  # noqa: RUF009
    cpu_share: CpuShare | None = None
    limited: bool | None = None
    reasons: tuple[str, ...] = ()
    concurrency_wait: Distribution | None = key("concurrency_wait_s", omit_none=True, default=None)  # noqa: RUF009
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)

    @property
    def cpu_sustained_max(self) -> float | None:
        """The busiest CPU share held over the sustain span, if sampled."""
        return self.cpu_share.sustained_max if self.cpu_share is not None else None


@dataclass(frozen=True)
class ErrorMessage:
    """One of ``error_messages``: a server's message, its error class and how often."""

    message: str = ""
    kind: str | None = None
    count: int | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class UsageSuspect:
    """``usage_suspect``: completed requests whose reported usage cannot be right."""

    requests: int | None = None
    of: int | None = None
    kinds: Mapping[str, int] = field(default_factory=EMPTY)
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)
