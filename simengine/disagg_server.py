"""The embedded engine's HTTP server in P/D mode: one endpoint in front of the cluster.

The same routes and response shapes as the monolithic server (the proxy of a vLLM P/D
deployment looks like one server to a client), so ``bench`` needs nothing new. ``/metrics``
holds every worker's series, labelled ``role="prefill"|"decode"`` and ``engine`` (the
worker's index in its role); the client-facing request histograms carry ``role="decode"``,
where the tokens come from. The transfer series are named after vLLM's NIXL connector
(``vllm:nixl_xfer_time_seconds``, ``vllm:nixl_bytes_transferred``) and its external
prefix-cache counters, observed on the decode worker that received the KV, plus:

* ``prefillscope_engine_kv_transfer_seconds``: per request, the wait between its
  prefill's end and its KV being on the decode worker (0 when fully overlapped);
* ``prefillscope_engine_kv_transfer_bytes``: bytes sent over the link;
* ``prefillscope_engine_kv_transfer_queue_depth``: transfers on the link right now.
"""

from __future__ import annotations

from collections.abc import Iterator

from aiohttp import web
from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from runtime import engine_metrics
from simengine.core import StepResult
from simengine.disagg import DisaggCluster, KvJob, Worker, transfer_wait_s
from simengine.disagg_driver import RealTimeDisaggDriver
from simengine.kv_link import Transfer
from simengine.metrics import STEP_SECONDS_BUCKETS, ServerMetrics
from simengine.server import EngineServer, _json

#: vLLM's NIXL buckets: transfer seconds, and bytes (2 KiB … 8 GiB, ×4).
XFER_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
XFER_BYTES_BUCKETS = tuple(float(2 ** (10 + i)) for i in range(1, 25, 2))


def worker_labels(worker: Worker) -> dict[str, str]:
    return {"engine": str(worker.index), "role": worker.role}


class _LinkCollector(Collector):
    """The link's queue depth, read at scrape time."""

    def __init__(self, cluster: DisaggCluster, labels: dict[str, str]) -> None:
        self.cluster = cluster
        self.labels = labels

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            engine_metrics.KV_TRANSFER_QUEUE_DEPTH,
            "KV transfers on the prefill→decode link (sharing it or queued).",
            labels=list(self.labels),
        )
        family.add_metric(list(self.labels.values()), self.cluster.link.queue_depth)
        yield family


class KvTransferMetrics:
    """The transfer series of a P/D server, per decode worker."""

    def __init__(self, metrics: ServerMetrics, cluster: DisaggCluster, model_name: str) -> None:
        registry = metrics.registry
        names = ["model_name", "engine", "role"]
        self._labels = {
            w.index: {"model_name": model_name, **worker_labels(w)} for w in cluster.decode
        }
        registry.register(_LinkCollector(cluster, {"model_name": model_name}))

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, names, buckets=buckets, registry=registry)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, names, registry=registry)

        self.xfer_time = hist(
            "vllm:nixl_xfer_time_seconds",
            "Histogram of transfer duration for KV cache transfers (modelled link).",
            XFER_SECONDS_BUCKETS,
        )
        self.xfer_bytes = hist(
            "vllm:nixl_bytes_transferred",
            "Histogram of bytes transferred per KV cache transfer.",
            XFER_BYTES_BUCKETS,
        )
        self.wait = hist(
            engine_metrics.KV_TRANSFER_SECONDS,
            "Per request: seconds between its prefill's end and its KV on the decode worker.",
            STEP_SECONDS_BUCKETS,
        )
        self.bytes = counter(engine_metrics.KV_TRANSFER_BYTES, "KV bytes sent over the link.")
        self.external_queries = counter(
            "vllm:external_prefix_cache_queries",
            "External prefix cache queries from KV connector cross-instance cache sharing, "
            "in terms of number of queried tokens.",
        )
        self.external_hits = counter(
            "vllm:external_prefix_cache_hits",
            "External prefix cache hits from KV connector cross-instance cache sharing, "
            "in terms of number of cached tokens.",
        )

    def transfer_done(self, job: KvJob, transfer: Transfer) -> None:
        labels = self._labels[job.decoder.index]
        if transfer.seconds is not None:
            self.xfer_time.labels(**labels).observe(transfer.seconds)
        self.xfer_bytes.labels(**labels).observe(transfer.nbytes)
        self.bytes.labels(**labels).inc(transfer.nbytes)

    def admitted(self, job: KvJob, kv_bytes_per_token: int) -> None:
        labels = self._labels[job.decoder.index]
        self.wait.labels(**labels).observe(max(0.0, transfer_wait_s(job)))
        self.external_queries.labels(**labels).inc(len(job.prompt))
        self.external_hits.labels(**labels).inc(job.bytes // kv_bytes_per_token)


class DisaggEngineServer(EngineServer):
    """``EngineServer`` whose engine is a P/D cluster (``options.disagg``)."""

    def _build_engine(self) -> None:
        disagg = self.options.disagg
        assert disagg is not None
        cluster = DisaggCluster(
            self.config,
            disagg,
            on_step=self._on_worker_step,
            on_transfer=self._on_transfer,
            on_admit=self._on_admit,
        )
        self.cluster = cluster
        self._worker_index = {id(w): i for i, w in enumerate(cluster.workers)}
        #: The first prefill worker's core: what monolithic callers read (pool size).
        self.core = cluster.prefill[0].core
        self.metrics = ServerMetrics(
            None,
            self.config,
            workers=[(worker_labels(w), w.core) for w in cluster.workers],
            client_labels={"role": "decode"},
        )
        self.kv_metrics = KvTransferMetrics(self.metrics, cluster, self.config.model_name)
        self.driver = RealTimeDisaggDriver(cluster, self.config.time_scale)  # type: ignore[assignment]

    def _on_worker_step(self, worker: Worker, result: StepResult, start: float, end: float) -> None:
        to_loop = self.driver.loop_time  # type: ignore[attr-defined]
        t_start, t_end = to_loop(start), to_loop(end)
        self.metrics.on_step(result, t_start, t_end, self._worker_index[id(worker)])
        if worker.role == "prefill" and self._unscheduled:
            pending = self._unscheduled
            for seq in worker.core.scheduler.running:
                latency = pending.pop(seq.request.request_id, None)
                if latency is not None:
                    latency.scheduled = t_start

    def _on_admit(self, job: KvJob) -> None:
        self.kv_metrics.admitted(job, self.cluster.kv_bytes_per_token)

    def _on_transfer(self, job: KvJob, transfer: Transfer) -> None:
        self.kv_metrics.transfer_done(job, transfer)

    async def _reset_prefix_cache(self, _request: web.Request) -> web.StreamResponse:
        done = [w.core.reset_prefix_cache() for w in self.cluster.workers]
        return _json({"success": all(done)})
