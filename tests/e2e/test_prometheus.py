"""The Prometheus source against a real Prometheus server scraping two embedded engines.

Two embedded-engine replicas serve a shared-prefix load; a third target, a small
prometheus_client exporter, stands in for a DCGM exporter with one GPU. Prometheus
scrapes all three every second; the canonical series read back through PromQL must
equal the engines' own counters and pools, summed over the replicas.
Needs Debian's ``prometheus`` binary: skipped when it is missing, except that with
``PREFILLSCOPE_REQUIRE_PROMETHEUS=1`` (CI) a missing binary is a failure.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator

import httpx
import pytest
from probe_servers import PrometheusServer, free_port, stream_completion
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from perfmodel.config import EngineConfig
from probes.canonical import Provenance
from probes.mapping import builtin_mapping
from probes.prometheus_source import PrometheusSource
from runtime.clock import RunClock
from simengine.embedded import EmbeddedServer

pytestmark = pytest.mark.prometheus

# Stored names may be vllm_… when a scrape negotiates OpenMetrics (prometheus_client
# escapes ':'): the probe maps both spellings, and the test waits on either.
HITS = 'sum({__name__=~"vllm[:_]prefix_cache_hits_total"})'
GENERATED = 'sum({__name__=~"vllm[:_]generation_tokens_total"})'


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        message = "the prometheus binary is missing (apt-get install -y prometheus)"
        if os.environ.get("PREFILLSCOPE_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(message + " and PREFILLSCOPE_REQUIRE_PROMETHEUS=1")
        pytest.skip(message)
    return binary


@pytest.fixture
def engines() -> Iterator[list[EmbeddedServer]]:
    with (
        EmbeddedServer(EngineConfig(fixed_step_s=0.005)) as a,
        EmbeddedServer(EngineConfig(fixed_step_s=0.005, num_gpu_blocks=4000)) as b,
    ):
        yield [a, b]


@pytest.fixture
def dcgm() -> Iterator[str]:
    """A DCGM-exporter-shaped target: one GPU's utilisation, memory, clock and power."""
    registry = CollectorRegistry()
    for name, value in (
        ("DCGM_FI_DEV_GPU_UTIL", 42),
        ("DCGM_FI_DEV_FB_USED", 1024),
        ("DCGM_FI_DEV_FB_FREE", 3072),
        ("DCGM_FI_DEV_SM_CLOCK", 1410),
        ("DCGM_FI_DEV_POWER_USAGE", 250.5),
    ):
        gauge = Gauge(name, name, ["gpu", "Hostname", "modelName"], registry=registry)
        gauge.labels("0", "node-a", "Test GPU").set(value)
    server, _ = start_http_server(free_port(), addr="127.0.0.1", registry=registry)
    yield f"127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


async def shared_prefix_load(engines: list[EmbeddedServer]) -> None:
    """Per engine: one request, then three sharing its 256-token prefix."""
    prefix = list(range(100, 356))
    async with httpx.AsyncClient(timeout=60) as client:
        for engine in engines:
            name = engine.config.model_name
            await stream_completion(client, engine.url, name, [*prefix, 1], 8)
            await asyncio.gather(
                *(
                    stream_completion(client, engine.url, name, [*prefix, 2 + i], 8)
                    for i in range(3)
                )
            )


@pytest.mark.slow  # Prometheus applies new scrape targets only every 5 s
def test_canonical_series_from_prometheus_match_the_engines(
    prometheus_binary, engines, dcgm, tmp_path
):
    targets = [e.url.removeprefix("http://") for e in engines] + [dcgm]
    with PrometheusServer(prometheus_binary, targets, tmp_path) as prom:
        prom.wait_for('count(up{job="target"} == 1)', 3)
        prom.wait_for(HITS, 0)
        clock = RunClock()
        asyncio.run(shared_prefix_load(engines))
        stats = [e.server.core.stats for e in engines]
        pools = [e.server.core.pool.counts() for e in engines]
        hits = sum(s.prefix_hit_tokens for s in stats)
        prom.wait_for(HITS, hits)
        # hits count at prefill, output tokens later: a scrape can hold all of the former
        # and not yet all of the latter
        prom.wait_for(GENERATED, sum(s.generation_tokens for s in stats))
        end = clock.now() + 1.0
        source = PrometheusSource(prom.url)
        series = source.server_series(clock, -2.0, end, step_s=0.5)
        gpu = source.gpu_rows(clock, -2.0, end, step_s=0.5)
    assert source.status.state == "ok"
    assert source.mapping().flavour == "embedded"  # detected from the names Prometheus holds
    assert hits == 2 * 3 * 256  # three requests per engine reuse 16 blocks of 16
    assert series.increase("prefix_hits").value == hits
    assert series.increase("prefix_queries").value == sum(s.prefix_query_tokens for s in stats)
    assert series.increase("prompt_tokens").value == sum(s.prompt_tokens for s in stats)
    assert series.increase("generation_tokens").value == sum(s.generation_tokens for s in stats)
    assert series.latest("num_blocks").value == sum(p.total for p in pools)
    for bucket in ("active", "reclaimable", "free"):
        assert series.latest(f"pool_{bucket}").value == sum(getattr(p, bucket) for p in pools)
        assert series.provenance[f"pool_{bucket}"] is Provenance.MEASURED
    assert series.histogram_increase("ttft").count == 8
    # DCGM: one GPU, not summed, memory total = used + free.
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
