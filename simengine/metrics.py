"""The embedded engine's ``/metrics``: vLLM's names and labels, plus what vLLM hides.

Every server owns a private ``CollectorRegistry`` (two embedded engines in one test
process must not share counters). Names, types, label sets (``model_name``, ``engine``)
and histogram buckets copy a real vLLM exposition
(``tests/fixtures/vllm-cpu/tiny-metrics-after.prom``) so every tool that reads vLLM
reads this engine unchanged. On top, the ``prefillscope_engine_*`` series expose what a
diagnosis needs and vLLM does not show: the three pool buckets, step time and tokens by
step kind, and prefix-cache evictions.

Two kinds of sources:

* **State read at scrape time** (a custom collector): running/waiting requests, the KV
  pool buckets and usage, and the cumulative counters the engine keeps itself (prompt,
  generation, preemptions, prefix queries/hits, evictions). Reading them when scraped
  means they can never drift from the engine.
* **Latencies observed as they happen**: per step (``on_step``), and per request at the
  moments the server *emits* tokens (TTFT, one inter-token observation per engine step
  that produced a token, end-to-end, and the queue/prefill/decode phases). Measuring
  at emission rather than at scheduling keeps the histograms' means equal to what a
  client measures over the same requests.

``vllm:kv_cache_usage_perc`` counts *active* blocks only, like vLLM; reclaimable blocks
(still hittable prefix cache) are free as far as that gauge is concerned, and are
visible in ``prefillscope_engine_kv_blocks{state="reclaimable"}``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from perfmodel.config import EngineConfig
    from simengine.core import EngineCore, StepResult

ENGINE_LABEL = "0"
STEP_KINDS = ("prefill", "decode", "mixed")

TTFT_BUCKETS = (
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75),
    *(1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
)
ITL_BUCKETS = (
    *(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75),
    *(1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0),
)
REQUEST_LATENCY_BUCKETS = (
    *(0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0),
    *(50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
)
TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
STEP_SECONDS_BUCKETS = (
    *(0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05),
    *(0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0),
)


class _EngineStateCollector(Collector):
    """Gauges and cumulative counters read from the engine each time /metrics is scraped."""

    def __init__(self, core: EngineCore, config: EngineConfig) -> None:
        self.core = core
        self.config = config
        self.labels = {"model_name": config.model_name, "engine": ENGINE_LABEL}

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=list(self.labels))
        family.add_metric(list(self.labels.values()), value)
        return family

    def _counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=list(self.labels))
        family.add_metric(list(self.labels.values()), value)
        return family

    def collect(self) -> Iterator[Metric]:
        stats = self.core.stats
        pool = self.core.pool
        counts = pool.counts()
        yield self._gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            stats.num_running,
        )
        yield self._gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            stats.num_waiting,
        )
        yield self._gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            counts.active / pool.num_blocks,
        )
        yield self._counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            stats.prefix_query_tokens,
        )
        yield self._counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            stats.prefix_hit_tokens,
        )
        yield self._counter(
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            stats.preemptions,
        )
        yield self._counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", stats.prompt_tokens
        )
        yield self._counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            stats.generation_tokens,
        )
        yield self._cache_config_info(pool.num_blocks)
        blocks = GaugeMetricFamily(
            "prefillscope_engine_kv_blocks",
            "KV blocks by bucket: active (pinned by running requests), reclaimable "
            "(unpinned, still a prefix-cache hit), free (no valid data).",
            labels=[*self.labels, "state"],
        )
        for state in ("active", "reclaimable", "free"):
            blocks.add_metric([*self.labels.values(), state], getattr(counts, state))
        yield blocks
        yield self._counter(
            "prefillscope_engine_prefix_evictions",
            "Cached blocks whose KV was overwritten to make room (prefix-cache evictions).",
            stats.evictions,
        )

    def _cache_config_info(self, num_blocks: int) -> GaugeMetricFamily:
        cfg = self.config
        info = {
            "block_size": str(cfg.block_size),
            "cache_dtype": "auto",
            "enable_prefix_caching": str(cfg.enable_prefix_caching),
            "engine": ENGINE_LABEL,
            "gpu_memory_utilization": str(cfg.gpu_memory_utilization),
            "num_cpu_blocks": "None",
            "num_gpu_blocks": str(num_blocks),
            "num_gpu_blocks_override": str(cfg.num_gpu_blocks),
        }
        family = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=list(info),
        )
        family.add_metric(list(info.values()), 1.0)
        return family


class ServerMetrics:
    """One server's metrics: the registry, the scrape-time collector and the histograms."""

    def __init__(self, core: EngineCore, config: EngineConfig) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_EngineStateCollector(core, config))
        labels = {"model_name": config.model_name, "engine": ENGINE_LABEL}

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(
                name, doc, list(labels), buckets=buckets, registry=self.registry
            ).labels(**labels)

        self.ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.queue = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.prefill = histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.decode = histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            TOKEN_BUCKETS,
        )

        def by_kind(name: str, doc: str, buckets: tuple[float, ...]) -> dict[str, Histogram]:
            family = Histogram(
                name, doc, [*labels, "kind"], buckets=buckets, registry=self.registry
            )
            return {kind: family.labels(**labels, kind=kind) for kind in STEP_KINDS}

        self._step_seconds = by_kind(
            "prefillscope_engine_step_seconds",
            "Wall time of one engine step by kind (prefill only, decode only, mixed).",
            STEP_SECONDS_BUCKETS,
        )
        self._step_tokens = by_kind(
            "prefillscope_engine_step_tokens",
            "Tokens scheduled in one engine step (prompt + decode) by kind.",
            TOKEN_BUCKETS,
        )

    def on_step(self, result: StepResult, t_start: float, t_end: float) -> None:
        """Record one finished engine step (the driver's hook); idle steps are not steps."""
        if result.kind not in self._step_seconds:
            return
        tokens = result.prefill_tokens + result.decode_tokens
        self.iteration_tokens.observe(tokens)
        self._step_seconds[result.kind].observe(t_end - t_start)
        self._step_tokens[result.kind].observe(tokens)

    def request_finished(self, *, e2e: float, queue: float, prefill: float, decode: float) -> None:
        """Record a request's phases once it is done (measured at token emission)."""
        self.e2e.observe(e2e)
        self.queue.observe(queue)
        self.prefill.observe(prefill)
        self.decode.observe(decode)

    def render(self) -> bytes:
        """The text exposition (prometheus_client's format, like vLLM's)."""
        return generate_latest(self.registry)


class RequestLatency:
    """One request's moments on the loop clock, fed to the histograms as tokens go out.

    ``emitted`` is called for every engine update at the moment the server emits it, so
    TTFT and the inter-token gaps are what the client sees (give or take the loopback):
    one ITL observation per engine step that produced tokens, like vLLM's. ``scheduled``
    is stamped by the server when the scheduler first admits the request.
    """

    __slots__ = ("arrival", "first", "last", "metrics", "scheduled")

    def __init__(self, metrics: ServerMetrics, arrival: float) -> None:
        self.metrics = metrics
        self.arrival = arrival
        self.scheduled: float | None = None
        self.first: float | None = None
        self.last = arrival

    def emitted(self, has_tokens: bool, finished: bool, now: float) -> None:
        metrics = self.metrics
        if has_tokens:
            if self.first is None:
                self.first = now
                metrics.ttft.observe(now - self.arrival)
            else:
                metrics.itl.observe(now - self.last)
            self.last = now
        if finished and self.first is not None:
            # A step's scheduled start may precede an arrival that slipped into its run.
            scheduled = max(self.arrival, self.scheduled or self.arrival)
            metrics.request_finished(
                e2e=now - self.arrival,
                queue=scheduled - self.arrival,
                prefill=self.first - scheduled,
                decode=self.last - self.first,
            )
