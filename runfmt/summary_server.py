"""The ``server`` section of ``summary.json``, declared once: what the server said about
the run, as ``probes.server_summary`` measures it, read and written by ``runfmt.codec``
(``runfmt.summary_sections`` says how). Its fields are in the order the section is
written; a key a run's section lacks (an unavailable server's, an older summary's) stays
absent when written back, and every key not declared here is kept in ``extra``.
``probes.server_summary`` builds them; a key its section leaves out where another run's
has it is marked so (``runfmt.codec.absent``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runfmt.codec import EMPTY, key
from runfmt.metrics import E2E, ITL, TTFT
from runfmt.run_sections import ProbeState
from runfmt.summary_sections import statistic_of


@dataclass(frozen=True)
class QuantileBounds:
    """How a server histogram's quantile was made (``probes.server_summary``): its value
    and method, the bucket it lies in and the bounds the true value lies within (an upper
    end ``None`` past the last bucket)."""

    value: float | None = None
    method: str | None = None
    bucket: tuple[float | None, ...] = ()
    bounds: tuple[float | None, ...] = ()
    #: Why both bounds are the client's maximum (a bucket wholly above it), if so.
    note: str | None = key(omit_none=True, default=None)
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)

    @property
    def low(self) -> float | None:
        return self.bounds[0] if self.bounds else None

    @property
    def high(self) -> float | None:
        return self.bounds[1] if len(self.bounds) > 1 else None

    @property
    def bucket_high(self) -> float | None:
        return self.bucket[1] if len(self.bucket) > 1 else None

    @property
    def cut(self) -> bool:
        """Whether the upper bound is the client's maximum, not the bucket's."""
        return self.high is not None and self.high != self.bucket_high


@dataclass(frozen=True)
class HistogramFigures:
    """What every server histogram summary says, in this order: count, mean and
    quantiles (``None`` when the server had none) and how many fell past the last finite
    bucket. ``Histogram`` and ``SizeHistogram`` add their own keys after these."""

    count: float | None = None
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    p999: float | None = None
    overflow: float | None = None


@dataclass(frozen=True)
class Histogram(HistogramFigures):
    """A server histogram over the run (``server.ttft_s`` …): count, mean and quantiles
    (``None`` when the server had none), how many fell past the last finite bucket, its
    source and provenance, the client's maximum of the same span, how each quantile was
    made, and per what its ITL is (``per``, ITL only)."""

    source: str | None = None
    provenance: str | None = None
    client_max_s: float | None = None
    quantile_method: str | None = key(omit_none=True, default=None)
    quantiles: Mapping[str, QuantileBounds] | None = key(omit_none=True, default=None)
    per: str | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)

    #: ``Distribution``'s largest value: a histogram knows none.
    max = None

    def get(self, statistic: str) -> float | None:
        """One of ``runtime.quantiles.STATISTICS`` (``mean``, ``p50`` …), as written."""
        return statistic_of(self, statistic)


@dataclass(frozen=True)
class SizeHistogram(HistogramFigures):
    """A server histogram not of latency over the run (a KV block's residency, an offload
    transfer's size): count, mean and quantiles in its ``unit`` (``None`` when the server
    had none), how many fell past the last finite bucket, its source and provenance."""

    unit: str | None = None
    source: str | None = None
    provenance: str | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class Reading:
    """One figure of the ``server`` section, with its provenance and source: a counter's
    increase, a ratio or a setting (``value``, ``None`` when unknown, its source then
    saying why)."""

    value: float | None = None
    provenance: str | None = None
    source: str | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)

    #: One value, not a gauge's level (``Level``): no mean or maximum.
    level = False
    mean = max = None


@dataclass(frozen=True)
class Level:
    """A gauge's level over the run (``server.running`` …, a pool bucket), with its
    provenance and source: the scrapes that knew it (``samples``) of all (``scrapes``),
    and its ``mean``, ``p50``, ``max``, ``min`` and ``last``, each ``None`` when never
    exposed."""

    provenance: str | None = None
    source: str | None = None
    samples: int | None = None
    scrapes: int | None = None
    mean: float | None = None
    p50: float | None = None
    max: float | None = None
    min: float | None = None
    last: float | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)

    #: A gauge's level, not one value (``Reading``).
    level = True
    value = None


@dataclass(frozen=True)
class TierHits:
    """The cached prompt tokens one tier served, and their share of all tiers'."""

    tokens: Reading = field(default_factory=Reading)
    share: Reading = field(default_factory=Reading)
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class Offload:
    """``server.hits_by_source.offload``: what a KV offload tier or connector says it
    moved, its counters (``counters``) and then its transfer sizes (``sizes``, the
    ``*_size`` histograms), by the names ``probes.server_summary`` gives them."""

    counters: Mapping[str, Reading] = key(inline=r"(?!\w*_size$)\w+", default_factory=EMPTY)
    sizes: Mapping[str, SizeHistogram] = key(inline=r"\w+_size", default_factory=EMPTY)
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class HitsBySource:
    """``server.hits_by_source``: whether the server split its prefix hits by tier
    (``reported``) and the tiers it reported, in its order; the prompt tokens by source
    and the offload tier's counters (``sources``, ``offload``)."""

    reported: bool | None = None
    tiers: Mapping[str, TierHits] = field(default_factory=EMPTY)
    sources: Mapping[str, Reading] = field(default_factory=EMPTY)
    offload: Offload = field(default_factory=lambda: Offload())
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class ServerPrefix:
    """``server.prefix``: the hit rate the server's counters show, against the oracle's
    over every request sent."""

    queries: Reading | None = key(omit_none=True, default=None)  # noqa: RUF009
    hits: Reading | None = key(omit_none=True, default=None)  # noqa: RUF009
    observed_hit_rate: Reading | None = None
    expected_hit_rate: Reading | None = None
    observed_minus_expected: float | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class ServerWindow:
    """``server.window``: the scraped span (run clock), its scrapes, and whether the last
    scrape predates the last response (``stale``: the server's figures miss the end)."""

    start_s: float | None = None
    end_s: float | None = None
    scrapes: int | None = None
    stale: bool | None = None
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


@dataclass(frozen=True)
class PoolLevels:
    """``server.pool``: the KV pool's buckets over the run (``active_blocks`` …, each a
    gauge's level) in its ``unit``."""

    unit: str | None = None
    buckets: Mapping[str, Level] = key(inline=r"\w+_blocks", default_factory=EMPTY)
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)


#: The ``server`` section's latency histograms, by their summary key.
SERVER_LATENCIES = (TTFT.key, ITL.key, E2E.key)


@dataclass(frozen=True)
class ServerSection:
    """``server``: what the server said about the run (``probes.server_summary``), or
    why nothing (``available`` false, with the ``reason``); ``probe`` is the probe's
    status as ``run.json`` records it, ``window`` the scraped span; ``step_lateness_s``
    the engine's step lateness where the server publishes it (``probes.engine_pace``)."""

    source: str | None = None
    probe: ProbeState | None = None
    available: bool | None = None
    reason: str | None = key(omit_none=True, default=None)
    flavour: str | None = key(omit_none=True, default=None)
    window: ServerWindow | None = key(omit_none=True, default=None)  # noqa: RUF009
    ttft_s: Histogram | None = key(omit_none=True, default=None)  # noqa: RUF009
    itl_s: Histogram | None = key(omit_none=True, default=None)  # noqa: RUF009
    e2e_s: Histogram | None = key(omit_none=True, default=None)  # noqa: RUF009
    prefix: ServerPrefix = field(default_factory=ServerPrefix)
    hits_by_source: HitsBySource | None = key(omit_none=True, default=None)  # noqa: RUF009
    kv_block_residency_s: Mapping[str, SizeHistogram] | None = key(omit_none=True, default=None)
    max_sequence_tokens: Level | None = key(omit_none=True, default=None)  # noqa: RUF009
    kv_tokens: Level | None = key(omit_none=True, default=None)  # noqa: RUF009
    preemptions: Reading | None = key(omit_none=True, default=None)  # noqa: RUF009
    prompt_tokens: Reading | None = key(omit_none=True, default=None)  # noqa: RUF009
    generation_tokens: Reading | None = key(omit_none=True, default=None)  # noqa: RUF009
    running: Level | None = key(omit_none=True, default=None)  # noqa: RUF009
    waiting: Level | None = key(omit_none=True, default=None)  # noqa: RUF009
    kv_usage: Level | None = key(omit_none=True, default=None)  # noqa: RUF009
    block_size: Reading | None = key(omit_none=True, default=None)  # noqa: RUF009
    num_blocks: Reading | None = key(omit_none=True, default=None)  # noqa: RUF009
    pool: PoolLevels | None = key(omit_none=True, default=None)  # noqa: RUF009
    #: How late the engine's steps ended past their modelled ends, in seconds: written
    #: only by a server that publishes it (the embedded engine), absent otherwise.
    step_lateness_s: SizeHistogram | None = key(omit_none=True, default=None)  # noqa: RUF009
    extra: Mapping[str, Any] = field(default_factory=EMPTY, repr=False, compare=False)

    def latency(self, key: str) -> Histogram | None:
        """The histogram of ``key`` (one of ``SERVER_LATENCIES``), if the server had it."""
        return getattr(self, key) if key in SERVER_LATENCIES else None
