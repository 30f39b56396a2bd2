"""The embedded engine's ``/metrics``: vLLM's names and labels, plus what vLLM hides.

Every server owns a private ``CollectorRegistry`` (two embedded engines in one test
process must not share counters). Names, types, label sets (``model_name``, ``engine``)
and histogram buckets copy a real vLLM exposition
(``tests/fixtures/vllm-cpu/tiny-metrics-after.prom``) so every tool that reads vLLM
reads this engine unchanged. On top, the ``prefillscope_engine_*`` series expose what a
diagnosis needs and vLLM does not show: the three pool buckets, step time and tokens by
step kind, prefix-cache evictions, and how late each real-time step ended past its
modelled end (``prefillscope_engine_step_lateness_seconds``: the machine's stalls, which
land in the tokens' gaps though the modelled engine has none; a single engine's, its
driver being the one that keeps a schedule).

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

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from runtime import engine_metrics
from workloads.cache_model import CACHE_MODEL_INFO

#: The engine's hits by tier and its offload traffic (``..._total`` on the page).
OFFLOAD_HITS = engine_metrics.PREFIX_HITS_BY_TIER
OFFLOAD_BLOCKS = engine_metrics.OFFLOAD_BLOCKS

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
#: Step lateness: a healthy engine ends its steps within the timer's spin window (~1 ms);
#: a starved one tens to hundreds of milliseconds late.
LATENESS_BUCKETS = (
    *(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03),
    *(0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5),
)
STEP_SECONDS_BUCKETS = (
    *(0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05),
    *(0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0),
)


def _state_series() -> list[tuple[type, str, str, Callable[[EngineCore], float]]]:
    """(family type, name, help, reading) of each series read from an engine at scrape."""
    g, c = GaugeMetricFamily, CounterMetricFamily
    return [
        (g, "vllm:num_requests_running", "Number of requests in model execution batches.",
         lambda e: e.stats.num_running),
        (g, "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
         lambda e: e.stats.num_waiting),
        (g, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
         lambda e: e.pool.counts().active / e.pool.num_blocks),
        (c, "vllm:prefix_cache_queries",
         "Prefix cache queries, in terms of number of queried tokens.",
         lambda e: e.stats.prefix_query_tokens),
        (c, "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
         lambda e: e.stats.prefix_hit_tokens),
        (c, "vllm:num_preemptions", "Cumulative number of preemption from the engine.",
         lambda e: e.stats.preemptions),
        (c, "vllm:prompt_tokens", "Number of prefill tokens processed.",
         lambda e: e.stats.prompt_tokens),
        (c, "vllm:generation_tokens", "Number of generation tokens processed.",
         lambda e: e.stats.generation_tokens),
    ]  # fmt: skip


class _EngineStateCollector(Collector):
    """Gauges and cumulative counters read from the engines each time /metrics is scraped:
    one sample per ``(labels, core)`` in ``workers``."""

    def __init__(self, workers: list[tuple[dict[str, str], EngineCore]]) -> None:
        self.workers = workers
        self.names = list(workers[0][0])

    def collect(self) -> Iterator[Metric]:
        for family_type, name, doc, read in _state_series():
            family = family_type(name, doc, labels=self.names)
            for labels, core in self.workers:
                family.add_metric(list(labels.values()), read(core))
            yield family
        yield self._cache_config_info()
        blocks = GaugeMetricFamily(
            engine_metrics.KV_BLOCKS,
            "KV blocks by bucket: active (pinned by running requests), reclaimable "
            "(unpinned, still a prefix-cache hit), free (no valid data).",
            labels=[*self.names, "state"],
        )
        evictions = CounterMetricFamily(
            engine_metrics.PREFIX_EVICTIONS,
            "Cached blocks whose KV was overwritten to make room (prefix-cache evictions).",
            labels=self.names,
        )
        for labels, core in self.workers:
            counts = core.pool.counts()
            for state in ("active", "reclaimable", "free"):
                blocks.add_metric([*labels.values(), state], getattr(counts, state))
            evictions.add_metric(list(labels.values()), core.stats.evictions)
        yield blocks
        yield evictions
        model = GaugeMetricFamily(
            CACHE_MODEL_INFO,
            "The prefix cache the engine keeps (blocks, radix[:PAGE] or slots:N), as a label.",
            labels=[*self.names, "cache_model"],
        )
        for labels, core in self.workers:
            model.add_metric([*labels.values(), str(core.cache_model)], 1.0)
        yield model
        yield from self._tiers()

    def _tiers(self) -> Iterator[Metric]:
        """Prefix-cache hits by the tier that held them (gpu, cpu: the offload tier) and
        the blocks moved between the two."""
        hits = CounterMetricFamily(
            OFFLOAD_HITS,
            "Prompt tokens served from the prefix cache, by tier (gpu; cpu: loaded back).",
            labels=[*self.names, "tier"],
        )
        moved = CounterMetricFamily(
            OFFLOAD_BLOCKS,
            "KV blocks moved to (store) and from (load) the CPU offload tier.",
            labels=[*self.names, "direction"],
        )
        for labels, core in self.workers:
            offload = getattr(core.pool, "offload", None)
            cpu = offload.hit_tokens if offload is not None else 0
            values = list(labels.values())
            hits.add_metric([*values, "gpu"], core.pool.hit_tokens - cpu)
            hits.add_metric([*values, "cpu"], cpu)
            if offload is not None:
                moved.add_metric([*values, "store"], offload.stored_blocks)
                moved.add_metric([*values, "load"], offload.loaded_blocks)
        yield hits
        yield moved

    def _cache_config_info(self) -> GaugeMetricFamily:
        family: GaugeMetricFamily | None = None
        for labels, core in self.workers:
            cfg = core.config
            info = {
                "block_size": str(cfg.block_size),
                "cache_dtype": "auto",
                "enable_prefix_caching": str(cfg.enable_prefix_caching),
                "engine": labels["engine"],
                "gpu_memory_utilization": str(cfg.gpu_memory_utilization),
                "num_cpu_blocks": str(core.offload_blocks or None),
                "num_gpu_blocks": str(core.num_gpu_blocks),
                "num_gpu_blocks_override": str(cfg.num_gpu_blocks),
            }
            if "role" in labels:
                info["role"] = labels["role"]
            if family is None:
                family = GaugeMetricFamily(
                    "vllm:cache_config_info",
                    "Information of the LLMEngine CacheConfig",
                    labels=list(info),
                )
            family.add_metric(list(info.values()), 1.0)
        assert family is not None
        return family


class ServerMetrics:
    """One server's metrics: the registry, the scrape-time collector and the histograms.

    A disaggregated server passes ``workers``, one ``(labels, core)`` per engine core
    (labels ``engine`` and ``role``): each gets its own state series and step histograms,
    and the client-facing request histograms carry ``client_labels``. Step lateness is a
    single engine's (``step_late``, told by its ``RealTimeDriver``): a disaggregated
    server has no such histogram rather than an empty one.
    """

    def __init__(
        self,
        core: EngineCore | None,
        config: EngineConfig,
        *,
        workers: list[tuple[dict[str, str], EngineCore]] | None = None,
        client_labels: dict[str, str] | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        base = {"model_name": config.model_name, "engine": ENGINE_LABEL}
        single = workers is None
        if workers is None:
            assert core is not None
            workers = [({}, core)]
        worker_labels = [base | extra for extra, _ in workers]
        self.registry.register(
            _EngineStateCollector(
                [(labels, w) for labels, (_, w) in zip(worker_labels, workers, strict=True)]
            )
        )
        labels = base | (client_labels or {})

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

        def by_kind(name: str, doc: str, buckets: tuple[float, ...]) -> list[dict[str, Histogram]]:
            names = [*worker_labels[0], "kind"]
            family = Histogram(name, doc, names, buckets=buckets, registry=self.registry)
            return [
                {kind: family.labels(**w, kind=kind) for kind in STEP_KINDS} for w in worker_labels
            ]

        self._step_seconds = by_kind(
            engine_metrics.STEP_SECONDS,
            "Wall time of one engine step by kind (prefill only, decode only, mixed).",
            STEP_SECONDS_BUCKETS,
        )
        self._step_tokens = by_kind(
            engine_metrics.STEP_TOKENS,
            "Tokens scheduled in one engine step (prompt + decode) by kind.",
            TOKEN_BUCKETS,
        )
        self._lateness: Histogram | None = None
        if single:
            self._lateness = histogram(
                engine_metrics.STEP_LATENESS,
                "Seconds each engine step ended after its modelled end (the machine's "
                "stalls, not the modelled engine's time).",
                LATENESS_BUCKETS,
            )

    def on_step(self, result: StepResult, t_start: float, t_end: float, worker: int = 0) -> None:
        """Record one finished engine step (the driver's hook); idle steps are not steps.
        ``worker`` is the index into ``workers`` of the core that ran it."""
        if result.kind not in STEP_KINDS:
            return
        tokens = result.prefill_tokens + result.decode_tokens
        self.iteration_tokens.observe(tokens)
        self._step_seconds[worker][result.kind].observe(t_end - t_start)
        self._step_tokens[worker][result.kind].observe(tokens)

    def step_late(self, seconds: float) -> None:
        """Record how late one timed step ended (the real-time driver's ``on_late``)."""
        if self._lateness is not None:
            self._lateness.observe(seconds)

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
