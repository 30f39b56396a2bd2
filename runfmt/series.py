"""The canonical server series, declared once: the names every server flavour's
``/metrics`` is normalised to, their kinds, the histograms and their units.

Engines name the same facts differently (vLLM's ``num_requests_running``, SGLang's
``num_running_reqs``, llama.cpp's ``requests_processing``); the mappings
(``probes/mappings/*.toml``) translate each engine's names to these, and are checked
against this declaration when loaded (``probes.mapping``). The diagnosis, the
calibration, ``summary.json``'s ``server`` section and the reports speak only these
names, each by reference (``Series.RUNNING``, ``Hist.TTFT``): renaming a series is one
edit here. They are ``StrEnum`` members, so a member *is* its name wherever a string
goes (a dict key, a JSON document). How a value is read and where it came from
(provenance, normalisation) is ``probes.canonical``'s.

It is in ``runfmt``, below every package that reads a server series; it imports nothing
outside the standard library.
"""

from __future__ import annotations

from enum import StrEnum


class Kind(StrEnum):
    """How a series behaves over time, which decides how it is normalised."""

    GAUGE = "gauge"  # a level: sampled, summarised by mean/p50/max
    COUNTER = "counter"  # monotone total: per-window deltas and rates, reset-aware
    INFO = "info"  # configuration read once (often from a label of an info metric)


#: The tiers a cached prompt token can come from, nearest the accelerator first: its own
#: memory (``device``), host memory it offloaded to (``host``), a disk or remote store
#: (``storage``), another instance (``p2p``), a connector that does not say (``external``).
HIT_TIERS: tuple[str, ...] = ("device", "host", "storage", "p2p", "external")

#: What an engine step carried: decode tokens only, decode tokens beside a prompt chunk,
#: or a prompt chunk only.
STEP_KINDS: tuple[str, ...] = ("decode", "mixed", "prefill")


class Series(StrEnum):
    """The scalar canonical series. ``KV_USAGE`` is the fraction of the pool pinned by
    running requests (vLLM's definition: reclaimable blocks are not "used")."""

    RUNNING = "running"
    WAITING = "waiting"
    KV_USAGE = "kv_usage"
    PREFIX_QUERIES = "prefix_queries"
    PREFIX_HITS = "prefix_hits"
    PREEMPTIONS = "preemptions"
    PROMPT_TOKENS = "prompt_tokens"
    GENERATION_TOKENS = "generation_tokens"
    BLOCK_SIZE = "block_size"
    NUM_BLOCKS = "num_blocks"
    PREFIX_CACHING = "prefix_caching"  # 1 enabled, 0 disabled (no reclaimable when off)
    # Where prompt tokens came from, by the engine's own split (vLLM's
    # prompt_tokens_by_source): computed here, hit in the local prefix cache, or received
    # from outside (a KV connector: offload tier, another instance, an external store).
    PROMPT_TOKENS_COMPUTED = "prompt_tokens_computed"
    PROMPT_TOKENS_CACHED = "prompt_tokens_cached"  # local + external, as the server counts
    HITS_LOCAL = "hits_local"
    HITS_EXTERNAL = "hits_external"
    # Cached prompt tokens by the tier that supplied them (HIT_TIERS, ``hit_tier``).
    HITS_TIER_DEVICE = "hits_tier_device"
    HITS_TIER_HOST = "hits_tier_host"
    HITS_TIER_STORAGE = "hits_tier_storage"
    HITS_TIER_P2P = "hits_tier_p2p"
    HITS_TIER_EXTERNAL = "hits_tier_external"
    # A KV connector's own prefix lookups (vLLM's external_prefix_cache_*), in tokens.
    EXTERNAL_PREFIX_QUERIES = "external_prefix_queries"
    EXTERNAL_PREFIX_HITS = "external_prefix_hits"
    # KV offload transfers (vLLM's OffloadingConnector): bytes and seconds each way.
    OFFLOAD_LOAD_BYTES = "offload_load_bytes"
    OFFLOAD_STORE_BYTES = "offload_store_bytes"
    OFFLOAD_LOAD_SECONDS = "offload_load_seconds"
    OFFLOAD_STORE_SECONDS = "offload_store_seconds"
    # LMCache's own counters, in tokens (retrievals asked for, and found).
    LMCACHE_REQUESTED_TOKENS = "lmcache_requested_tokens"
    LMCACHE_HIT_TOKENS = "lmcache_hit_tokens"
    # Tokens held in the KV cache now (llama.cpp builds before the unified KV cache), and
    # the longest sequence seen since start (llama.cpp's n_tokens_max: a high-water mark).
    KV_TOKENS = "kv_tokens"
    MAX_SEQUENCE_TOKENS = "max_sequence_tokens"
    # A host-memory tier's pool (CPU offload, SGLang's HiCache L2), in tokens: held now,
    # and its size.
    HOST_POOL_USED_TOKENS = "host_pool_used_tokens"
    HOST_POOL_TOKENS = "host_pool_tokens"
    # The same tier's size in KV blocks, where the engine counts it so (vLLM's CPU
    # offload, ``num_cpu_blocks``).
    HOST_POOL_BLOCKS = "host_pool_blocks"
    # KV transfers waiting for a disaggregated (P/D) link, sharing it or queued.
    KV_TRANSFER_QUEUE_DEPTH = "kv_transfer_queue_depth"
    # Blocks the prefix cache evicted (the embedded engine counts them).
    PREFIX_EVICTIONS = "prefix_evictions"


def hit_tier(tier: str) -> Series:
    """The series of the cached prompt tokens a tier (``HIT_TIERS``) supplied."""
    return Series(f"hits_tier_{tier}")


_GAUGES = {
    Series.RUNNING,
    Series.WAITING,
    Series.KV_USAGE,
    Series.KV_TOKENS,
    Series.MAX_SEQUENCE_TOKENS,
    Series.HOST_POOL_USED_TOKENS,
    Series.KV_TRANSFER_QUEUE_DEPTH,
}
_INFOS = {
    Series.BLOCK_SIZE,
    Series.NUM_BLOCKS,
    Series.PREFIX_CACHING,
    Series.HOST_POOL_TOKENS,
    Series.HOST_POOL_BLOCKS,
}
#: Each scalar series and its kind, in declaration order (every other one is a counter).
SERIES: dict[Series, Kind] = {
    name: Kind.GAUGE if name in _GAUGES else Kind.INFO if name in _INFOS else Kind.COUNTER
    for name in Series
}


class Hist(StrEnum):
    """Histograms: latency (``TTFT``, ``ITL``, ``E2E``) and KV block residency (vLLM's
    sampled ``kv_block_*``: allocation to eviction, idle before eviction, gap between
    reuses) in seconds; KV offload transfer sizes in bytes; the KV transfers between a
    prefill and a decode server (disaggregated serving), one observation a transfer, in
    the units their names say (``HISTOGRAM_UNITS``): its time, its size, its speed, and
    (``kv_transfer_wait_s``) a request's whole wait from its prefill's end to its KV on
    the decode worker; the time a request queued before its first step (``queue_time``)
    and spent in its prefill steps (``prefill_time``); how late each engine step ended
    past the end its engine scheduled (``step_lateness``, seconds: a modelled engine's
    pace on a starved machine; the embedded engine publishes it, real servers keep no
    schedule to be late against); and each engine step's time and tokens by what it
    carried (``STEP_KINDS``, ``step_time``/``step_tokens``), which H1, H2 and the
    calibration compare."""

    TTFT = "ttft"
    ITL = "itl"
    E2E = "e2e"
    KV_BLOCK_LIFETIME = "kv_block_lifetime"
    KV_BLOCK_IDLE_BEFORE_EVICT = "kv_block_idle_before_evict"
    KV_BLOCK_REUSE_GAP = "kv_block_reuse_gap"
    OFFLOAD_LOAD_SIZE = "offload_load_size"
    OFFLOAD_STORE_SIZE = "offload_store_size"
    KV_TRANSFER_LATENCY_MS = "kv_transfer_latency_ms"
    KV_TRANSFER_SPEED_GB_S = "kv_transfer_speed_gb_s"
    KV_TRANSFER_SIZE_BYTES = "kv_transfer_size_bytes"
    KV_TRANSFER_WAIT_S = "kv_transfer_wait_s"
    QUEUE_TIME = "queue_time"
    PREFILL_TIME = "prefill_time"
    STEP_LATENESS = "step_lateness"
    STEP_TIME_DECODE = "step_time_decode"
    STEP_TIME_MIXED = "step_time_mixed"
    STEP_TIME_PREFILL = "step_time_prefill"
    STEP_TOKENS_DECODE = "step_tokens_decode"
    STEP_TOKENS_MIXED = "step_tokens_mixed"
    STEP_TOKENS_PREFILL = "step_tokens_prefill"


def step_time(kind: str) -> Hist:
    """The histogram of the time of an engine step that carried ``kind`` (``STEP_KINDS``)."""
    return Hist(f"step_time_{kind}")


def step_tokens(kind: str) -> Hist:
    """The histogram of the tokens of an engine step that carried ``kind``."""
    return Hist(f"step_tokens_{kind}")


#: Every histogram, in declaration order.
HISTOGRAMS: tuple[Hist, ...] = tuple(Hist)
#: The unit of each histogram's observations.
HISTOGRAM_UNITS: dict[Hist, str] = (
    {
        name: "bytes" if name.startswith("offload_") or name.endswith("_bytes") else "s"
        for name in HISTOGRAMS
    }
    | {Hist.KV_TRANSFER_LATENCY_MS: "ms", Hist.KV_TRANSFER_SPEED_GB_S: "GB/s"}
    | {step_tokens(kind): "tokens" for kind in STEP_KINDS}
)
