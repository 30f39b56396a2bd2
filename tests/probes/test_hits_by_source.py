"""The ``hits_by_source`` section of ``summary.json``: the server's own account of where its
cached prompt tokens came from, read from real scrapes — vLLM 0.32 splits them by tier
(``prompt_tokens_cached_by_source``: all 2432 from ``device`` in the capture, no connector)
and by source; llama.cpp says computed and cached but no tier, so none is listed."""

from __future__ import annotations

import pandas as pd
import pytest

from probes.exposition import parse_exposition
from probes.mapping import builtin_mapping
from probes.normalise import ServerSeries
from probes.server_summary import server_summary
from runfmt.codec import encode

SCRAPES = {
    "vllm": ("vllm-cpu/tiny-metrics-before.prom", "vllm-cpu/tiny-metrics-after.prom"),
    "llamacpp": ("llamacpp/metrics-before.txt", "llamacpp/metrics-after.txt"),
}


def _server(fixtures_dir, flavour: str, requests: pd.DataFrame | None = None) -> dict:
    texts = [(fixtures_dir / name).read_text() for name in SCRAPES[flavour]]
    mapping = builtin_mapping(flavour)
    series = ServerSeries.from_snapshots(
        [0.0, 30.0], [mapping.snapshot(parse_exposition(text)) for text in texts]
    )
    return encode(server_summary(series, pd.DataFrame() if requests is None else requests))


def test_a_first_scrape_after_the_first_send_is_no_baseline(fixtures_dir):
    """The same two scrapes (t=0 s and 30 s): with the first request sent at 5 s the first
    scrape is the counters' baseline; sent at -1 s (the load began while a stalling page's
    scrape was in flight) it is not, and every increase is unknown, saying why, rather
    than short of the first requests; a gauge's level stands."""
    on_time = _server(fixtures_dir, "vllm", pd.DataFrame({"sent_s": [5.0, 20.0]}))
    assert on_time["prefix"]["hits"]["value"] == 2432.0
    late = _server(fixtures_dir, "vllm", pd.DataFrame({"sent_s": [-1.0, 20.0]}))
    for counter in (late["prefix"]["hits"], late["prefix"]["queries"], late["prompt_tokens"]):
        assert counter["value"] is None
        assert "no baseline: the first scrape (t=0.00 s)" in counter["source"]
        assert "first request was sent (t=-1.00 s)" in counter["source"]
    assert late["hits_by_source"]["reported"] is False
    assert late["ttft_s"]["count"] is None and on_time["ttft_s"]["count"] > 0
    assert late["running"] == on_time["running"]  # a gauge needs no baseline


def test_vllm_reports_its_hits_by_tier_and_source(fixtures_dir):
    server = _server(fixtures_dir, "vllm")
    hits = server["hits_by_source"]
    assert hits["reported"]
    assert list(hits["tiers"]) == ["device", "host", "storage", "p2p", "external"]
    device = hits["tiers"]["device"]
    assert device["tokens"]["value"] == 2432.0 == server["prefix"]["hits"]["value"]
    assert device["tokens"]["provenance"] == "measured"
    assert device["tokens"]["source"].endswith(
        'prompt_tokens_cached_by_source_total{source="device"}'
    )
    assert device["share"]["value"] == 1.0 and device["share"]["provenance"] == "measured"
    assert hits["tiers"]["host"]["tokens"]["value"] == 0.0
    sources = {key: v["value"] for key, v in hits["sources"].items()}
    assert sources == {
        "computed": 19268.0,
        "local_cache": 2432.0,
        "external": 0.0,
        "cached": 2432.0,
    }
    assert sources["computed"] + sources["cached"] == server["prompt_tokens"]["value"]
    offload = hits["offload"]
    assert offload["external_prefix_hits"]["value"] == 0.0
    assert offload["offload_load_bytes"]["provenance"] == "unknown"  # no offload connector


def test_llamacpp_reports_sources_but_no_tier(fixtures_dir):
    server = _server(fixtures_dir, "llamacpp")
    hits = server["hits_by_source"]
    assert not hits["reported"] and hits["tiers"] == {}
    assert hits["sources"]["cached"]["value"] == server["prefix"]["hits"]["value"] > 0
    assert hits["sources"]["computed"]["provenance"] == "measured"
    assert server["max_sequence_tokens"]["max"] == 1510.0


def test_vllms_block_residency_histograms_from_a_real_evicting_pool(fixtures_dir):
    """``--kv-cache-metrics --kv-cache-metrics-sample 1.0`` with a 24-block pool: every
    evicted block is observed (``fixtures/vllm-cpu/SOURCES.md``)."""
    mapping = builtin_mapping("vllm")
    names = ("vllm-cpu/kv-cache-metrics-before.prom", "vllm-cpu/kv-cache-metrics-after.prom")
    snaps = [mapping.snapshot(parse_exposition((fixtures_dir / n).read_text())) for n in names]
    server = encode(server_summary(ServerSeries.from_snapshots([0.0, 60.0], snaps), pd.DataFrame()))
    residency = server["kv_block_residency_s"]
    counts = {name: block["count"] for name, block in residency.items()}
    assert counts == {
        "kv_block_lifetime": 32,
        "kv_block_idle_before_evict": 32,
        "kv_block_reuse_gap": 20,
    }
    lifetime = residency["kv_block_lifetime"]
    assert lifetime["unit"] == "s" and lifetime["source"] == "vllm:kv_block_lifetime_seconds"
    assert lifetime["mean"] == pytest.approx(79.567819678 / 32)
    # A block is idle at most as long as it lived.
    assert residency["kv_block_idle_before_evict"]["mean"] <= lifetime["mean"]
    assert server["hits_by_source"]["tiers"]["device"]["tokens"]["value"] == 6272.0 == 7 * 896
