"""The probes against the embedded engine: what /metrics says equals the engine's truth.

The engine's own counters (``core.stats``) and block pool (``core.pool.counts()``) are
the ground truth; the scraper's canonical series over a real shared-prefix run over
loopback must reproduce them, and the server's TTFT sits next to the client's.
"""

from __future__ import annotations

import asyncio

import httpx
from probe_servers import stream_completion

from perfmodel.config import EngineConfig
from probes.canonical import Provenance
from probes.normalise import ServerSeries
from probes.scraper import MetricsScraper
from probes.server_summary import server_summary
from runfmt.codec import encode
from runfmt.rundir import RunDir
from runfmt.tables import RunTables
from runtime.clock import RunClock
from simengine.embedded import EmbeddedServer

PREFIX = list(range(100, 100 + 512))


def prompts(count: int) -> list[list[int]]:
    """A 512-token shared prefix (32 blocks of 16) and a distinct 40-token suffix each."""
    return [PREFIX + [5000 + i] * 40 for i in range(count)]


async def shared_prefix_run(url: str, model: str, run: RunDir) -> tuple[MetricsScraper, list]:
    clock = RunClock()
    async with (
        MetricsScraper(url, clock, run, interval_s=0.05) as scraper,
        httpx.AsyncClient(timeout=60) as client,
    ):
        first, *rest = prompts(8)
        results = [await stream_completion(client, url, model, first, 16)]
        results += await asyncio.gather(
            *(stream_completion(client, url, model, p, 16) for p in rest)
        )
    return scraper, results


def test_canonical_series_equal_the_engines_truth(tmp_path):
    run = RunDir(tmp_path / "run", create=True)
    with EmbeddedServer(EngineConfig(fixed_step_s=0.005)) as server:
        scraper, results = asyncio.run(shared_prefix_run(server.url, server.config.model_name, run))
        stats = server.server.core.stats
        counts = server.server.core.pool.counts()
        truth = {
            "prefix_hits": stats.prefix_hit_tokens,
            "prefix_queries": stats.prefix_query_tokens,
            "prompt_tokens": stats.prompt_tokens,
            "generation_tokens": stats.generation_tokens,
            "preemptions": stats.preemptions,
        }
    run.close()
    assert scraper.status.state == "ok"
    series = ServerSeries.from_samples(RunTables(run).server_metrics)
    assert series.flavour == "embedded"
    for name, value in truth.items():
        assert series.increase(name).value == value, name
    # Seven later requests each reuse the 32 cached prefix blocks.
    assert truth["prefix_hits"] == 7 * 512 == sum(cached or 0 for _, cached in results)
    # The pool after the run, bucket by bucket, measured.
    last = {
        name: series.frame[name][-1] for name in ("pool_active", "pool_reclaimable", "pool_free")
    }
    assert (last["pool_active"], last["pool_reclaimable"], last["pool_free"]) == (
        counts.active,
        counts.reclaimable,
        counts.free,
    )
    assert counts.reclaimable > 0
    assert {series.provenance[c] for c in ("pool_active", "pool_reclaimable", "pool_free")} == {
        Provenance.MEASURED
    }
    summary = encode(server_summary(series, RunTables(run).requests))
    assert summary["prefix"]["observed_hit_rate"]["value"] == (
        truth["prefix_hits"] / truth["prefix_queries"]
    )
    # Server TTFT next to the client's: the same 8 requests, and the server's clock
    # starts after the client's, so its mean cannot exceed the client's.
    client_ttft = [ttft for ttft, _ in results]
    assert summary["ttft_s"]["count"] == 8
    assert 0 < summary["ttft_s"]["mean"] <= sum(client_ttft) / len(client_ttft)
    assert summary["itl_s"]["count"] > 0
