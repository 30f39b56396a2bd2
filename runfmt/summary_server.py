"""The ``server`` section of ``summary.json`` typed for reading (``runfmt.summary_sections``
says how): what the server said about the run, as ``probes.server_summary`` writes it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from runfmt.summary_sections import Raw, Stats, as_object


@dataclass(frozen=True)
class Reading:
    """One figure of the ``server`` section, with its provenance and source: a counter's
    increase, a ratio or a setting (``value``), or a gauge's level over the run
    (``level``: ``mean`` and ``max``, ``None`` when never exposed)."""

    value: float | None = None
    level: bool = False
    mean: float | None = None
    max: float | None = None
    provenance: str | None = None
    source: str | None = None
    raw: Raw = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, raw: Any) -> Self | None:
        """The reading; ``None`` when ``raw`` is no object or an empty one."""
        if not isinstance(raw, Mapping) or not raw:
            return None
        values = (raw.get("value"), "value" not in raw, raw.get("mean"), raw.get("max"))
        return cls(*values, raw.get("provenance"), raw.get("source"), raw)


@dataclass(frozen=True)
class TierHits:
    """The cached prompt tokens one tier served, and their share of all tiers'."""

    tokens: Reading
    share: Reading

    @classmethod
    def from_dict(cls, raw: Raw) -> Self:
        tokens, share = (Reading.from_dict(raw.get(k)) or Reading() for k in ("tokens", "share"))
        return cls(tokens, share)


@dataclass(frozen=True)
class HitsBySource:
    """``server.hits_by_source``: whether the server split its prefix hits by tier
    (``reported``) and the tiers it reported, in its order."""

    reported: bool | None = None
    tiers: Mapping[str, TierHits] = field(default_factory=dict)
    raw: Raw = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, raw: Any) -> Self | None:
        if not isinstance(raw, Mapping):
            return None
        tiers = as_object(raw.get("tiers"))
        by_tier = {t: TierHits.from_dict(e) for t, e in tiers.items() if isinstance(e, Mapping)}
        return cls(raw.get("reported"), by_tier, raw)


@dataclass(frozen=True)
class ServerPrefix:
    """``server.prefix``: the hit rate the server's counters show, against the oracle's
    over every request sent."""

    observed_hit_rate: Reading | None = None
    expected_hit_rate: Reading | None = None
    hits: Reading | None = None
    queries: Reading | None = None
    observed_minus_expected: float | None = None

    @classmethod
    def from_dict(cls, raw: Any) -> Self:
        raw = as_object(raw)
        keys = ("observed_hit_rate", "expected_hit_rate", "hits", "queries")
        readings = (Reading.from_dict(raw.get(k)) for k in keys)
        return cls(*readings, observed_minus_expected=raw.get("observed_minus_expected"))


#: The ``server`` section's latency histograms, by their summary key.
SERVER_LATENCIES = ("ttft_s", "itl_s", "e2e_s")
#: The ``server`` section's readings, each a field of ``ServerSection``.
SERVER_READINGS = (
    "preemptions",
    "running",
    "waiting",
    "kv_usage",
    "block_size",
    "num_blocks",
    "prompt_tokens",
    "generation_tokens",
)


@dataclass(frozen=True)
class ServerSection:
    """``server``: what the server said about the run (``probes.server_summary``), or
    why nothing (``available`` false, with the ``reason``)."""

    available: bool | None = None
    reason: str | None = None
    flavour: str | None = None
    source: str | None = None
    latencies: Mapping[str, Stats] = field(default_factory=dict)
    prefix: ServerPrefix = field(default_factory=ServerPrefix)
    hits_by_source: HitsBySource | None = None
    preemptions: Reading | None = None
    running: Reading | None = None
    waiting: Reading | None = None
    kv_usage: Reading | None = None
    block_size: Reading | None = None
    num_blocks: Reading | None = None
    prompt_tokens: Reading | None = None
    generation_tokens: Reading | None = None
    raw: Raw = field(default_factory=dict, repr=False, compare=False)

    def latency(self, key: str) -> Stats | None:
        """The histogram of ``key`` (one of ``SERVER_LATENCIES``), if the server had it."""
        return self.latencies.get(key)

    @classmethod
    def from_dict(cls, raw: Any) -> Self | None:
        """The section; ``None`` when the summary has none (absent, or an empty object)."""
        if not isinstance(raw, Mapping) or not raw:
            return None
        stats = {key: Stats.from_dict(raw.get(key)) for key in SERVER_LATENCIES}
        return cls(
            raw.get("available"),
            raw.get("reason"),
            raw.get("flavour"),
            raw.get("source"),
            {key: s for key, s in stats.items() if s is not None},
            ServerPrefix.from_dict(raw.get("prefix")),
            HitsBySource.from_dict(raw.get("hits_by_source")),
            *(Reading.from_dict(raw.get(name)) for name in SERVER_READINGS),
            raw=raw,
        )
