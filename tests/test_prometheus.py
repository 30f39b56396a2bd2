"""The Prometheus source against a real Prometheus server scraping live exporters.

Two exporters stand for two replicas of a vLLM-named server (prometheus_client serving
real counters, gauges and a histogram the test moves), one of them also exposing
DCGM-exporter GPU series. Prometheus scrapes both every second; the canonical series
read back through PromQL must equal what the exporters counted, summed over replicas.
Needs Debian's ``prometheus`` binary: skipped when it is missing, except that with
``PREFILLSCOPE_REQUIRE_PROMETHEUS=1`` (CI) a missing binary is a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from probe_servers import PrometheusServer, free_port
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from loadgen.clock import RunClock
from probes.canonical import Provenance
from probes.mapping import builtin_mapping
from probes.prometheus_source import PrometheusSource

pytestmark = pytest.mark.prometheus

# prometheus_client escapes ':' to '_' when Prometheus negotiates OpenMetrics, so the
# stored names may be vllm_…: the probe maps both spellings, the test waits on either.
HITS = 'sum({__name__=~"vllm[:_]prefix_cache_hits_total"})'
RUNNING = 'sum({__name__=~"vllm[:_]num_requests_running"})'


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        message = "the prometheus binary is missing (apt-get install -y prometheus)"
        if os.environ.get("PREFILLSCOPE_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(message + " and PREFILLSCOPE_REQUIRE_PROMETHEUS=1")
        pytest.skip(message)
    return binary


@dataclass
class Replica:
    """One exporter: vLLM's metric names over a private registry on a free port."""

    registry: CollectorRegistry
    address: str
    running: Gauge
    kv_usage: Gauge
    queries: Counter
    hits: Counter
    prompt: Counter
    generated: Counter
    ttft: Histogram


def start_replica(engine: str, servers: list) -> Replica:
    reg = CollectorRegistry()
    labels = ["engine", "model_name"]

    def counter(name: str) -> Counter:
        return Counter(name, name, labels, registry=reg)

    replica = Replica(
        registry=reg,
        address="",
        running=Gauge("vllm:num_requests_running", "r", labels, registry=reg),
        kv_usage=Gauge("vllm:kv_cache_usage_perc", "kv", labels, registry=reg),
        queries=counter("vllm:prefix_cache_queries"),
        hits=counter("vllm:prefix_cache_hits"),
        prompt=counter("vllm:prompt_tokens"),
        generated=counter("vllm:generation_tokens"),
        ttft=Histogram(
            "vllm:time_to_first_token_seconds", "t", labels, buckets=(0.1, 1.0), registry=reg
        ),
    )
    Gauge("vllm:num_requests_waiting", "w", labels, registry=reg).labels(engine, "m").set(0)
    Counter("vllm:num_preemptions", "p", labels, registry=reg).labels(engine, "m")
    info = Gauge(
        "vllm:cache_config_info",
        "i",
        ["engine", "block_size", "num_gpu_blocks", "enable_prefix_caching"],
        registry=reg,
    )
    info.labels(engine, "16", "1000", "True").set(1)
    for metric in (replica.queries, replica.hits, replica.prompt, replica.generated):
        metric.labels(engine, "m")
    replica.ttft.labels(engine, "m")
    replica.running.labels(engine, "m").set(0)
    replica.kv_usage.labels(engine, "m").set(0)
    server, _ = start_http_server(free_port(), addr="127.0.0.1", registry=reg)
    servers.append(server)
    replica.address = f"127.0.0.1:{server.server_port}"
    return replica


@pytest.fixture
def replicas() -> Iterator[list[Replica]]:
    servers: list = []
    pair = [start_replica("0", servers), start_replica("1", servers)]
    dcgm = [
        Gauge(name, name, ["gpu", "Hostname", "modelName"], registry=pair[0].registry)
        for name in (
            "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_DEV_FB_USED",
            "DCGM_FI_DEV_FB_FREE",
            "DCGM_FI_DEV_SM_CLOCK",
            "DCGM_FI_DEV_POWER_USAGE",
        )
    ]
    for gauge, value in zip(dcgm, (42, 1024, 3072, 1410, 250.5), strict=True):
        gauge.labels("0", "node-a", "Test GPU").set(value)
    yield pair
    for server in servers:
        server.shutdown()
        server.server_close()


def test_canonical_series_from_prometheus_summed_over_replicas(
    prometheus_binary, replicas, tmp_path
):
    a, b = replicas
    with PrometheusServer(prometheus_binary, [r.address for r in replicas], tmp_path) as prom:
        prom.wait_for('count(up{job="target"} == 1)', 2)
        prom.wait_for(HITS, 0)
        clock = RunClock()
        # The "run": what two engines count while serving.
        for replica, engine, hits, queries, ttfts in (
            (a, "0", 300, 1000, (0.05, 0.05, 0.05)),
            (b, "1", 200, 500, (0.5, 0.5)),
        ):
            replica.hits.labels(engine, "m").inc(hits)
            replica.queries.labels(engine, "m").inc(queries)
            replica.prompt.labels(engine, "m").inc(queries)
            replica.generated.labels(engine, "m").inc(64)
            for value in ttfts:
                replica.ttft.labels(engine, "m").observe(value)
        a.running.labels("0", "m").set(3)
        b.running.labels("1", "m").set(2)
        a.kv_usage.labels("0", "m").set(0.2)
        b.kv_usage.labels("1", "m").set(0.4)
        prom.wait_for(HITS, 500)
        prom.wait_for(RUNNING, 5)
        end = clock.now() + 0.5
        source = PrometheusSource(prom.url, builtin_mapping("vllm"))
        series = source.server_series(clock, -1.0, end, step_s=0.5)
        gpu = source.gpu_rows(clock, -1.0, end, step_s=0.5)
        detected = PrometheusSource(prom.url).mapping().flavour
    assert source.status.state == "ok"
    assert detected == "vllm"
    assert series.flavour == "vllm"
    assert series.increase("prefix_hits").value == 500.0
    assert series.increase("prefix_queries").value == 1500.0
    assert series.increase("generation_tokens").value == 128.0
    assert series.increase("preemptions").value == 0.0
    assert series.latest("running").value == 5.0
    assert series.latest("kv_usage").value == pytest.approx(0.3)  # mean of the replicas
    assert series.latest("block_size").value == 16.0
    assert series.latest("num_blocks").value == 2000.0  # one pool per engine
    assert series.provenance["prefix_hits"] is Provenance.MEASURED
    ttft = series.histogram_increase("ttft")
    assert ttft.count == 5
    assert ttft.quantile(0.5) <= 0.1 < ttft.quantile(0.9) <= 1.0
    # DCGM: one GPU, not summed, memory total = used + free.
    assert gpu, source.status.reason
    assert {row["gpu"] for row in gpu} == {"node-a/0"}
    last = gpu[-1]
    assert last["utilisation_pct"] == 42.0
    assert last["memory_total_bytes"] == 4096 * 1024 * 1024
    assert last["power_w"] == 250.5
    assert last["name"] == "Test GPU"


def test_prometheus_down_is_a_recorded_failure():
    source = PrometheusSource(f"http://127.0.0.1:{free_port()}", builtin_mapping("vllm"))
    clock = RunClock()
    assert source.server_series(clock, 0.0, 1.0) is None
    assert source.status.state == "failed"
    assert "unreachable" in source.status.reason
    assert source.gpu_rows(clock, 0.0, 1.0) == []
    assert source.status.failed == 2
