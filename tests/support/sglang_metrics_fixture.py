"""Write a ``/metrics`` page with SGLang's own collector classes, for the mapping's tests.

Run with the Python of the SGLang target's venv (``targets/sglang-cpu.sh setup``), from
the repository root::

    ~/.cache/prefillscope-targets/sglang/venv/bin/python tests/support/sglang_metrics_fixture.py \
        tests/fixtures/sglang/metrics-collectors.prom

SGLang's server cannot start on this machine kind (``tests/fixtures/sglang/README.md``),
so its collectors (``sglang/srt/observability/metrics_collector.py``) are built here as its
scheduler and tokenizer manager build them, for a prefill server of a P/D pair with the
hierarchical cache on, and fed through their own methods the figures below; the page is
``prometheus_client.generate_latest`` of a ``MultiProcessCollector`` over their files, as
SGLang's ``/metrics`` renders it. Names, labels, help texts and buckets are SGLang's; every value
is one of the ``FED`` figures, so the tests can check the mapping's reading of each.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

#: What the collectors are fed: one finished request of 1000 prompt tokens of which 600
#: came from the device pool, 200 from host memory (HiCache L2) and 100 from storage
#: (L3), 40 generated; one scheduler stats log; one retraction; two KV transfers to the
#: decode server.
FED = {
    "prompt_tokens": 1000,
    "generation_tokens": 40,
    "cached_device": 600,
    "cached_host": 200,
    "cached_storage": 100,
    "num_running_reqs": 3,
    "num_queue_reqs": 2,
    "token_usage": 0.25,
    "cache_hit_rate": 0.9,
    "num_used_tokens": 4096,
    "kv_used_tokens": 4096,
    "kv_evictable_tokens": 8192,
    "kv_available_tokens": 4096,
    "max_total_num_tokens": 16384,
    "page_size": 1,
    "num_pages": 16384,
    "hicache_host_used_tokens": 30000,
    "hicache_host_total_tokens": 65536,
    "load_back_tokens": 200,
    "backup_tokens": 512,
    "evicted_tokens": 700,
    "prefill_compute_tokens": 100,
    "retracted_reqs": 1,
    # (latency ms, MB, GB/s) per transfer: 500 MB in 40 ms, 480 MB in 160 ms
    "kv_transfers": [(40.0, 500.0, 12.5), (160.0, 480.0, 3.0)],
}
MODEL = "tiny-llama"


def main(out: str) -> None:
    # SGLang's server runs its collectors in prometheus_client's multiprocess mode and
    # serves /metrics from a MultiProcessCollector (sglang/srt/utils/common.py,
    # add_prometheus_middleware): the same here, so the page has that mode's shape.
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="sglang-metrics-")
    import prometheus_client
    from prometheus_client import multiprocess
    from sglang.srt.observability.metrics_collector import (
        QueueCount,
        RadixCacheMetricsCollector,
        SchedulerMetricsCollector,
        SchedulerStats,
        StorageMetricsCollector,
        TokenizerMetricsCollector,
    )
    from sglang.srt.runtime_context import publish
    from sglang.srt.server_args import ServerArgs

    model = Path.home() / ".cache/prefillscope-targets/sglang/models" / MODEL
    args = ServerArgs(
        model_path=str(model),
        served_model_name=MODEL,
        enable_metrics=True,
        enable_hierarchical_cache=True,
        disaggregation_mode="prefill",
        device="cpu",
    )
    publish(args, role="tokenizer")

    labels = {"model_name": MODEL, "engine_type": "prefill", "tp_rank": 0, "pp_rank": 0}
    labels["moe_ep_rank"] = 0
    scheduler = SchedulerMetricsCollector(
        labels=labels, server_args=args, enable_hierarchical_cache=True
    )
    stats = SchedulerStats()
    stats.num_running_reqs = QueueCount(total=FED["num_running_reqs"])
    stats.num_queue_reqs = QueueCount(total=FED["num_queue_reqs"])
    stats.token_usage, stats.cache_hit_rate = FED["token_usage"], FED["cache_hit_rate"]
    for name in ("num_used_tokens", "kv_used_tokens", "kv_evictable_tokens"):
        setattr(stats, name, FED[name])
    stats.kv_available_tokens = FED["kv_available_tokens"]
    stats.hicache_host_used_tokens = FED["hicache_host_used_tokens"]
    stats.hicache_host_total_tokens = FED["hicache_host_total_tokens"]
    scheduler.log_stats(stats)
    cached = FED["cached_device"] + FED["cached_host"] + FED["cached_storage"]
    scheduler.increment_realtime_tokens(
        None, prefill_compute_tokens=FED["prefill_compute_tokens"], prefill_cache_tokens=cached
    )
    scheduler.increment_effective_prefill_tokens(
        input_tokens=FED["prefill_compute_tokens"],
        device_hit_tokens=FED["cached_device"],
        host_hit_tokens=FED["cached_host"],
        storage_hit_tokens=FED["cached_storage"],
    )
    scheduler.increment_retracted_reqs(FED["retracted_reqs"], 300, 10)
    for latency_ms, total_mb, speed_gb_s in FED["kv_transfers"]:
        scheduler.observe_kv_transfer_metrics(latency_ms, total_mb, speed_gb_s)
    scheduler.emit_constants(
        max_total_num_tokens=FED["max_total_num_tokens"],
        max_total_num_tokens_swa=None,
        weight_memory_usage_gb=0.01,
        kv_cache_memory_usage_gb=0.5,
        graph_memory_usage_gb={},
        max_running_requests_under_SLO=None,
        page_size=FED["page_size"],
        num_pages=FED["num_pages"],
        context_len=4096,
        startup_available_gpu_memory_gb=0.0,
    )

    tokenizer = TokenizerMetricsCollector(labels={"model_name": MODEL, "engine_type": "prefill"})
    tokenizer.observe_one_finished_request(
        {"model_name": MODEL, "engine_type": "prefill"},
        prompt_tokens=FED["prompt_tokens"],
        generation_tokens=FED["generation_tokens"],
        cached_tokens=cached,
        e2e_latency=1.5,
        has_grammar=False,
        cached_tokens_details={
            "device": FED["cached_device"],
            "host": FED["cached_host"],
            "storage": FED["cached_storage"],
        },
        is_streaming=True,
    )

    radix = RadixCacheMetricsCollector(labels={"cache_type": "hiradix", "tp_rank": 0})
    radix.increment_eviction_num_tokens(FED["evicted_tokens"])
    radix.increment_load_back_num_tokens(FED["load_back_tokens"], pool="kv")
    radix.increment_backup_num_tokens(FED["backup_tokens"], pool="kv")
    storage = StorageMetricsCollector(labels={"storage_backend": "file", "tp_rank": 0})
    storage.log_storage_prefetch_hit_tokens(FED["cached_storage"])

    registry = prometheus_client.CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    Path(out).write_bytes(prometheus_client.generate_latest(registry))


if __name__ == "__main__":
    main(sys.argv[1])
