"""The embedded engine's own metric names: the one owner of every ``prefillscope_engine_*``
name, imported by the engine that exposes them (``simengine.metrics``,
``simengine.disagg_server``) and by the oracle's cache model (``workloads.cache_model``,
read from the engine's info metric), so that a rename here renames both sides. A leaf
module: it imports nothing.

Names are the exposition's base names: a counter is exposed with ``_total`` added
(``COUNTER_SUFFIX``), a histogram with ``_bucket``/``_sum``/``_count``. Every reader of
what the engine measures — the diagnosis's step kinds and evictions, pool buckets, hits
by tier, the KV-transfer wait and queue — reads canonical series through
``probes/mappings/embedded.toml``, which names them there
(``tests/probes/test_flavour_metric_names.py`` holds who imports this module).
"""

from __future__ import annotations

#: What every name starts with; ``probes/mappings/embedded.toml`` detects the engine by it.
PREFIX = "prefillscope_engine_"
#: The suffix prometheus_client adds to a counter's name in the exposition.
COUNTER_SUFFIX = "_total"

#: Histogram: seconds per engine step, ``kind`` = prefill | decode | mixed.
STEP_SECONDS = PREFIX + "step_seconds"
#: Histogram: seconds each real-time engine step ended after its modelled end (the
#: driver's lateness: the machine's stalls, not the modelled engine's time).
STEP_LATENESS = PREFIX + "step_lateness_seconds"
#: Histogram: tokens per engine step, by the same ``kind``.
STEP_TOKENS = PREFIX + "step_tokens"
#: Gauge: KV blocks by ``state`` = active | reclaimable | free.
KV_BLOCKS = PREFIX + "kv_blocks"
#: Counter: prefix-cache blocks evicted.
PREFIX_EVICTIONS = PREFIX + "prefix_evictions"
#: Counter: cached prompt tokens by the ``tier`` that held them (gpu | cpu).
PREFIX_HITS_BY_TIER = PREFIX + "prefix_hits_by_tier"
#: Gauge: blocks in the CPU offload tier.
OFFLOAD_BLOCKS = PREFIX + "offload_blocks"
#: Histogram: per request, seconds from its prefill's end to its KV on the decode worker.
KV_TRANSFER_SECONDS = PREFIX + "kv_transfer_seconds"
#: Counter: KV bytes sent over the prefill→decode link.
KV_TRANSFER_BYTES = PREFIX + "kv_transfer_bytes"
#: Gauge: transfers on the link now (sharing it or queued).
KV_TRANSFER_QUEUE_DEPTH = PREFIX + "kv_transfer_queue_depth"
#: Info: the engine's cache model, in a ``cache_model`` label (the oracle's geometry).
CACHE_MODEL_INFO = PREFIX + "cache_model_info"
