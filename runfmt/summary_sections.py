"""The sections of ``summary.json`` typed for reading: the client's, and the distributions.

``runfmt.summary.Summary`` keeps each section as the JSON object it was written as, so
that a summary read and written back is unchanged; ``Summary.typed`` (or
``SummarySections.of`` a summary's dict, for one computed and not yet written) is the same
summary as frozen dataclasses: its ``requests``, ``throughput``, ``goodput``, ``prefix``,
``chunks`` and ``client`` sections (here), the ``server`` section with its histograms,
its readings (each with its provenance and source) and its prefix hits by tier
(``runfmt.summary_server``), the error counts and messages, the usage flagged as
impossible and the percentiles asked for. A reader outside ``runfmt`` asks these, never
the dicts.

Each class is built by ``from_dict``, which reads any format version: a key an older
summary lacks (format 1, a section a run never wrote) reads as ``None`` or empty, never
as an error, and the object it was built from stays in ``raw``, untouched, with every key
no field names. Values are kept as written (no number is converted), so a figure reads
the same through the view as it did from the dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Self

from runtime.quantiles import STATISTICS

Raw = Mapping[str, Any]
_EMPTY: Raw = MappingProxyType({})


def as_object(value: Any) -> Raw:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, Mapping) else _EMPTY


def _given(value: Any) -> Any:
    """``value``, or ``None`` when it says nothing (absent, empty string, list or object)."""
    return None if value is None or (isinstance(value, str | list | dict) and not value) else value


# -- distributions -----------------------------------------------------------------------
@dataclass(frozen=True)
class QuantileBounds:
    """How a server histogram's quantile was made (``probes.server_summary``): the bounds
    the true value lies within (``high`` ``None`` past the last bucket) and the upper end
    of the bucket it lies in."""

    low: float | None
    high: float | None
    bucket_high: float | None

    @property
    def cut(self) -> bool:
        """Whether the upper bound is the client's maximum, not the bucket's."""
        return self.high is not None and self.high != self.bucket_high

    @classmethod
    def from_dict(cls, raw: Raw) -> Self:
        bounds = raw.get("bounds") or (None, None)
        bucket = raw.get("bucket") or (None, None)
        return cls(bounds[0], bounds[1], bucket[1])


@dataclass(frozen=True)
class Stats:
    """A distribution as ``runtime.quantiles.describe`` writes it (the ``STATISTICS`` and
    a count); a server histogram's says per what its ITL is (``per``) and how each
    quantile was made (``quantiles``, ``None`` for a client distribution)."""

    values: Mapping[str, Any]
    count: int | None
    max: float | None = None
    per: str | None = None
    quantiles: Mapping[str, QuantileBounds] | None = None
    raw: Raw = field(default_factory=dict, repr=False, compare=False)

    def get(self, statistic: str) -> float | None:
        """One of ``runtime.quantiles.STATISTICS`` (``mean``, ``p50`` …), as written."""
        return self.values.get(statistic)

    @classmethod
    def from_dict(cls, raw: Any) -> Self | None:
        """The distribution; ``None`` when ``raw`` is no JSON object."""
        if not isinstance(raw, Mapping):
            return None
        details = raw.get("quantiles")
        quantiles = (
            {q: QuantileBounds.from_dict(d) for q, d in details.items() if isinstance(d, Mapping)}
            if isinstance(details, Mapping)
            else None
        )
        values = {name: raw.get(name) for name in STATISTICS}
        return cls(values, raw.get("count"), raw.get("max"), raw.get("per"), quantiles, raw)


# -- the client's sections ---------------------------------------------------------------
@dataclass(frozen=True)
class RequestsSection:
    """``requests``: the measured requests counted (warm-up left out), by kind."""

    total: int | None = None
    completed: int | None = None
    failed: int | None = None
    warmup_excluded: int | None = None
    by_kind: Mapping[str, int] = field(default_factory=dict)
    raw: Raw = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, raw: Any) -> Self:
        raw = as_object(raw)
        by_kind = raw.get("by_kind") or {}
        return cls(
            raw.get("total"),
            raw.get("completed"),
            raw.get("failed"),
            raw.get("warmup_excluded"),
            by_kind if isinstance(by_kind, Mapping) else {},
            raw,
        )


@dataclass(frozen=True)
class ThroughputSection:
    """``throughput``: rates over the measured window (run clock)."""

    requests_per_s: float | None = None
    output_tokens_per_s: float | None = None
    output_tokens: int | None = None
    window_s: float | None = None
    start_s: float | None = None
    end_s: float | None = None
    raw: Raw = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, raw: Any) -> Self:
        raw = as_object(raw)
        keys = ("requests_per_s", "output_tokens_per_s", "output_tokens", "window_s")
        return cls(*(raw.get(k) for k in (*keys, "start_s", "end_s")), raw=raw)


@dataclass(frozen=True)
class GoodputSection:
    """``goodput``: the requests that met every bound of the run's SLO (``slo``: a
    latency's key → its bound in seconds)."""

    share: float | None = None
    requests_per_s: float | None = None
    requests: int | None = None
    slo: Mapping[str, float] = field(default_factory=dict)
    raw: Raw = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, raw: Any) -> Self | None:
        """The section; ``None`` when the run had no SLO (``null`` or absent)."""
        if not isinstance(raw, Mapping):
            return None
        slo = as_object(raw.get("slo"))
        return cls(raw.get("share"), raw.get("requests_per_s"), raw.get("requests"), slo, raw)


@dataclass(frozen=True)
class PrefixSection:
    """``prefix``: the cached share of prompt tokens, the oracle's and the server's
    (``None`` when unknown, with the reason)."""

    expected_hit_rate: float | None = None
    observed_hit_rate: float | None = None
    reported_requests: int | None = None
    expected_reason: str | None = None
    observed_reason: str | None = None
    usage_suspect_excluded: int | None = None
    expected_hit_rate_by_tier: Mapping[str, float | None] = field(default_factory=dict)
    raw: Raw = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, raw: Any) -> Self:
        raw = as_object(raw)
        keys = ("expected_hit_rate", "observed_hit_rate", "reported_requests")
        reasons = ("expected_reason", "observed_reason", "usage_suspect_excluded")
        by_tier = as_object(raw.get("expected_hit_rate_by_tier"))
        return cls(*(raw.get(k) for k in (*keys, *reasons)), by_tier, raw)


@dataclass(frozen=True)
class ChunksSection:
    """``chunks``: the streamed chunks of the completed requests."""

    count: int | None = None
    tokens: int | None = None
    multi_token: int | None = None
    multi_token_share: float | None = None
    raw: Raw = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, raw: Any) -> Self:
        raw = as_object(raw)
        keys = ("count", "tokens", "multi_token", "multi_token_share")
        return cls(*(raw.get(k) for k in keys), raw=raw)


@dataclass(frozen=True)
class ClientSection:
    """``client``: whether the load generator, not the server, shaped the run
    (``limited``, ``None`` when the summary does not say) and why; its dispatch lag, event
    loop lag, the busiest CPU share it held, and the wait for a ``--max-concurrency``
    slot (``None`` when no request waited)."""

    limited: bool | None = None
    reasons: tuple[str, ...] = ()
    dispatch_lag_p99_s: float | None = None
    dispatch_lag: Stats | None = None
    loop_lag: Stats | None = None
    cpu_sustained_max: float | None = None
    concurrency_wait: Stats | None = None
    raw: Raw = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, raw: Any) -> Self:
        raw = as_object(raw)
        reasons = raw.get("reasons")
        return cls(
            _given(raw.get("limited")),
            tuple(str(r) for r in reasons) if isinstance(reasons, list) else (),
            raw.get("dispatch_lag_p99_s"),
            Stats.from_dict(raw.get("dispatch_lag_s")),
            Stats.from_dict(raw.get("loop_lag_s")),
            as_object(raw.get("cpu_share")).get("sustained_max"),
            Stats.from_dict(raw.get("concurrency_wait_s")),
            raw,
        )


@dataclass(frozen=True)
class ErrorMessage:
    """One of ``error_messages``: a server's message, its error class and how often."""

    message: str
    kind: str | None
    count: int | None

    @classmethod
    def from_dict(cls, raw: Raw) -> Self:
        return cls(str(raw.get("message", "")), raw.get("kind"), raw.get("count"))


@dataclass(frozen=True)
class UsageSuspect:
    """``usage_suspect``: completed requests whose reported usage cannot be right."""

    requests: int | None = None
    of: int | None = None
    kinds: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, raw: Any) -> Self:
        raw = as_object(raw)
        return cls(raw.get("requests"), raw.get("of"), as_object(raw.get("kinds")))
