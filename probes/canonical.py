"""The canonical server series every flavour is normalised to.

Engines name the same facts differently (vLLM's ``num_requests_running``, SGLang's
``num_running_reqs``, llama.cpp's ``requests_processing``). The diagnosis and the reports
speak only these canonical names, and every value carries its provenance so that a
report can say *how* it knows: read from a series (``measured``), computed from other
series through a model (``derived``), or not exposed at all (``unknown`` — never 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runfmt.summary_server import Reading


class Provenance(StrEnum):
    MEASURED = "measured"
    DERIVED = "derived"
    UNKNOWN = "unknown"


class Kind(StrEnum):
    """How a series behaves over time, which decides how it is normalised."""

    GAUGE = "gauge"  # a level: sampled, summarised by mean/p50/max
    COUNTER = "counter"  # monotone total: per-window deltas and rates, reset-aware
    INFO = "info"  # configuration read once (often from a label of an info metric)


#: The tiers a cached prompt token can come from, nearest the accelerator first: its own
#: memory (``device``), host memory it offloaded to (``host``), a disk or remote store
#: (``storage``), another instance (``p2p``), a connector that does not say (``external``).
HIT_TIERS: tuple[str, ...] = ("device", "host", "storage", "p2p", "external")

#: Scalar canonical series and their kinds. ``kv_usage`` is the fraction of the pool
#: pinned by running requests (vLLM's definition: reclaimable blocks are not "used").
SERIES: dict[str, Kind] = {
    "running": Kind.GAUGE,
    "waiting": Kind.GAUGE,
    "kv_usage": Kind.GAUGE,
    "prefix_queries": Kind.COUNTER,
    "prefix_hits": Kind.COUNTER,
    "preemptions": Kind.COUNTER,
    "prompt_tokens": Kind.COUNTER,
    "generation_tokens": Kind.COUNTER,
    "block_size": Kind.INFO,
    "num_blocks": Kind.INFO,
    "prefix_caching": Kind.INFO,  # 1 enabled, 0 disabled (a disabled cache has no reclaimable)
    # Where prompt tokens came from, by the engine's own split (vLLM's
    # prompt_tokens_by_source): computed here, hit in the local prefix cache, or received
    # from outside (a KV connector: offload tier, another instance, an external store).
    "prompt_tokens_computed": Kind.COUNTER,
    "prompt_tokens_cached": Kind.COUNTER,  # local + external, as the server counts them
    "hits_local": Kind.COUNTER,
    "hits_external": Kind.COUNTER,
    # Cached prompt tokens by the tier that supplied them (HIT_TIERS).
    **{f"hits_tier_{tier}": Kind.COUNTER for tier in HIT_TIERS},
    # A KV connector's own prefix lookups (vLLM's external_prefix_cache_*), in tokens.
    "external_prefix_queries": Kind.COUNTER,
    "external_prefix_hits": Kind.COUNTER,
    # KV offload transfers (vLLM's OffloadingConnector): bytes and seconds each way.
    "offload_load_bytes": Kind.COUNTER,
    "offload_store_bytes": Kind.COUNTER,
    "offload_load_seconds": Kind.COUNTER,
    "offload_store_seconds": Kind.COUNTER,
    # LMCache's own counters, in tokens (retrievals asked for, and found).
    "lmcache_requested_tokens": Kind.COUNTER,
    "lmcache_hit_tokens": Kind.COUNTER,
    # Tokens held in the KV cache now (llama.cpp builds before the unified KV cache), and
    # the longest sequence seen since start (llama.cpp's n_tokens_max: a high-water mark).
    "kv_tokens": Kind.GAUGE,
    "max_sequence_tokens": Kind.GAUGE,
    # A host-memory tier's pool (CPU offload, SGLang's HiCache L2), in tokens: held now,
    # and its size.
    "host_pool_used_tokens": Kind.GAUGE,
    "host_pool_tokens": Kind.INFO,
    # The same tier's size in KV blocks, where the engine counts it so (vLLM's CPU
    # offload, ``num_cpu_blocks``).
    "host_pool_blocks": Kind.INFO,
    # KV transfers waiting for a disaggregated (P/D) link, sharing it or queued.
    "kv_transfer_queue_depth": Kind.GAUGE,
    # Blocks the prefix cache evicted (the embedded engine counts them).
    "prefix_evictions": Kind.COUNTER,
}

#: What an engine step carried: decode tokens only, decode tokens beside a prompt chunk,
#: or a prompt chunk only.
STEP_KINDS: tuple[str, ...] = ("decode", "mixed", "prefill")

#: Histograms: latency (``ttft``, ``itl``, ``e2e``) and KV block residency (vLLM's
#: sampled ``kv_block_*``: allocation to eviction, idle before eviction, gap between
#: reuses) in seconds; KV offload transfer sizes in bytes; the KV transfers between a
#: prefill and a decode server (disaggregated serving), one observation a transfer, in
#: the units their names say (``HISTOGRAM_UNITS``): its time, its size, its speed, and
#: (``kv_transfer_wait_s``) a request's whole wait from its prefill's end to its KV on
#: the decode worker; the time a request queued before its first step (``queue_time``)
#: and spent in its prefill steps (``prefill_time``); and how late each engine step
#: ended past the end its engine scheduled (``step_lateness``, seconds: a modelled
#: engine's pace on a starved machine; the embedded engine publishes it, real servers
#: keep no schedule to be late against); and each engine step's time and tokens by what
#: it carried (``STEP_KINDS``: ``step_time_decode`` … in seconds, ``step_tokens_decode`` …
#: in tokens), which H1, H2 and the calibration compare.
HISTOGRAMS: tuple[str, ...] = (
    "ttft",
    "itl",
    "e2e",
    "kv_block_lifetime",
    "kv_block_idle_before_evict",
    "kv_block_reuse_gap",
    "offload_load_size",
    "offload_store_size",
    "kv_transfer_latency_ms",
    "kv_transfer_speed_gb_s",
    "kv_transfer_size_bytes",
    "kv_transfer_wait_s",
    "queue_time",
    "prefill_time",
    "step_lateness",
    *(f"step_{what}_{kind}" for what in ("time", "tokens") for kind in STEP_KINDS),
)
#: The unit of each histogram's observations.
HISTOGRAM_UNITS: dict[str, str] = (
    {
        name: "bytes" if name.startswith("offload_") or name.endswith("_bytes") else "s"
        for name in HISTOGRAMS
    }
    | {"kv_transfer_latency_ms": "ms", "kv_transfer_speed_gb_s": "GB/s"}
    | {f"step_tokens_{kind}": "tokens" for kind in STEP_KINDS}
)

#: Block-pool buckets an engine may expose directly (disjoint buckets).
POOL_BUCKETS: tuple[str, ...] = ("active", "reclaimable", "free")


@dataclass(frozen=True)
class Value:
    """One canonical value and how we know it; ``value`` is None exactly when unknown."""

    value: float | None
    provenance: Provenance
    source: str | None = None

    @classmethod
    def unknown(cls, reason: str) -> Value:
        return cls(None, Provenance.UNKNOWN, reason)

    @property
    def known(self) -> bool:
        return self.value is not None

    def reading(self) -> Reading:
        """This value as the summary's ``server`` section holds it (the summary's types
        imported here: the probe process reads values and writes no summary)."""
        from runfmt.summary_server import Reading

        return Reading(self.value, str(self.provenance), self.source)


@dataclass(frozen=True)
class Histogram:
    """A cumulative Prometheus histogram: upper bounds (ending at +Inf) and counts."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    count: float
    sum: float

    def minus(self, earlier: Histogram) -> Histogram:
        """Observations made since ``earlier``; a reset (count fell, buckets changed)
        means everything in ``self`` is new, as Prometheus's ``increase`` assumes."""
        if (
            earlier.bounds != self.bounds
            or self.count < earlier.count
            or any(a < b for a, b in zip(self.cumulative, earlier.cumulative, strict=True))
        ):
            return self
        return Histogram(
            self.bounds,
            tuple(a - b for a, b in zip(self.cumulative, earlier.cumulative, strict=True)),
            self.count - earlier.count,
            self.sum - earlier.sum,
        )

    def plus(self, other: Histogram) -> Histogram:
        """Sum of two histograms with the same buckets (replicas, successive windows)."""
        if other.bounds != self.bounds:
            raise ValueError("cannot add histograms with different buckets")
        return Histogram(
            self.bounds,
            tuple(a + b for a, b in zip(self.cumulative, other.cumulative, strict=True)),
            self.count + other.count,
            self.sum + other.sum,
        )

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    def bucket(self, q: float) -> tuple[float, float] | None:
        """``(lower, upper)`` bounds of the bucket holding the q-quantile (upper ``inf`` past
        the last finite bound); None when the histogram is empty."""
        found = self._locate(q)
        return None if found is None else (found[0], found[1])

    def _locate(self, q: float) -> tuple[float, float, float, float, float] | None:
        """The q-quantile's bucket: its bounds, the counts below and up to it, the rank."""
        total = self.cumulative[-1] if self.cumulative else 0.0
        if total <= 0:
            return None
        rank = q * total
        lower_bound, lower_count = 0.0, 0.0
        for bound, cum in zip(self.bounds, self.cumulative, strict=True):
            if cum >= rank:
                return lower_bound, bound, lower_count, cum, rank
            lower_bound, lower_count = bound, cum
        return lower_bound, math.inf, lower_count, lower_count, rank

    def bucket_quantile(self, q: float) -> float | None:
        """The q-quantile by linear interpolation inside the bucket that holds it — the
        estimate PromQL's ``histogram_quantile`` makes. Falls in +Inf → the last finite
        bound (a floor, not a value). None when the histogram is empty."""
        found = self._locate(q)
        if found is None:
            return None
        lower_bound, bound, lower_count, cum, rank = found
        if math.isinf(bound):
            return lower_bound
        if cum == lower_count:
            return bound
        return lower_bound + (bound - lower_bound) * (rank - lower_count) / (cum - lower_count)
