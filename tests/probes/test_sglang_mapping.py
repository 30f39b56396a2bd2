"""The SGLang mapping against a page SGLang's own collectors wrote.

``tests/fixtures/sglang/metrics-collectors.prom`` was rendered by SGLang 0.5.23's collector
classes in its multiprocess mode, fed the figures of ``sglang_metrics_fixture.FED`` (a
prefill server of a P/D pair with the hierarchical cache on; the fixture README says how).
Every canonical series the mapping names must read back what was fed — the hits by
tier, the host pool, the page geometry, the KV-transfer histograms — and the older
counters the mapping falls back on must give the same numbers where the newer are gone.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from repo_paths import FIXTURES
from sglang_metrics_fixture import FED

from probes.canonical import Provenance
from probes.exposition import parse_exposition
from probes.mapping import builtin_mapping, detect_flavour
from probes.pool import pool_breakdown

PAGE = FIXTURES / "sglang" / "metrics-collectors.prom"
CACHED = FED["cached_device"] + FED["cached_host"] + FED["cached_storage"]
TIERS = {
    "hits_tier_device": FED["cached_device"],
    "hits_tier_host": FED["cached_host"],
    "hits_tier_storage": FED["cached_storage"],
}


def snapshot(text: str):
    exposition = parse_exposition(text)
    assert detect_flavour(exposition) == "sglang"
    return builtin_mapping("sglang").snapshot(exposition)


def without(*names: str) -> str:
    """The page less every line (samples, HELP and TYPE) of the named metrics."""

    def metric(line: str) -> str:
        return line.split()[2] if line.startswith("#") else line

    lines = PAGE.read_text().splitlines(keepends=True)
    return "".join(line for line in lines if not metric(line).startswith(names))


def test_every_mapped_series_reads_what_sglang_was_fed() -> None:
    snap = snapshot(PAGE.read_text())
    expected = {
        "running": FED["num_running_reqs"],
        "waiting": FED["num_queue_reqs"],
        "kv_usage": FED["token_usage"],
        "prefix_hits": CACHED,
        "prefix_queries": CACHED + FED["prefill_compute_tokens"],
        "prompt_tokens": FED["prompt_tokens"],
        "generation_tokens": FED["generation_tokens"],
        "block_size": FED["page_size"],
        "num_blocks": FED["num_pages"],
        "host_pool_used_tokens": FED["hicache_host_used_tokens"],
        "host_pool_tokens": FED["hicache_host_total_tokens"],
        **TIERS,
    }
    for name, value in expected.items():
        assert snap.series[name].value == value, (name, snap.series[name])
    for name in TIERS:
        assert snap.series[name].provenance is Provenance.MEASURED
        assert "sglang:prefill_effective_tokens_total" in snap.series[name].source
    # the tiers add up to the hits; cache_hit_rate (0.9, one batch) is no hit count
    assert sum(snap.series[name].value for name in TIERS) == snap.series["prefix_hits"].value
    assert snap.series["prefix_queries"].provenance is Provenance.DERIVED
    assert snap.series["preemptions"].value == FED["retracted_reqs"]


def test_the_kv_transfer_histograms_hold_each_transfer() -> None:
    snap = snapshot(PAGE.read_text())
    latencies = [t[0] for t in FED["kv_transfers"]]
    speeds = [t[2] for t in FED["kv_transfers"]]
    for name, observed in (
        ("kv_transfer_latency_ms", latencies),
        ("kv_transfer_speed_gb_s", speeds),
    ):
        hist = snap.histograms[name]
        assert snap.histogram_sources[name] == f"sglang:{name}"
        assert hist.count == len(observed) and hist.sum == pytest.approx(sum(observed))
        # SGLang's buckets: 40 ms and 160 ms land in (25, 50] and (100, 250]
        low, high = hist.bucket(1.0)
        assert low < max(observed) <= high
    assert snap.histograms["kv_transfer_latency_ms"].bucket(0.25) == (25.0, 50.0)


def test_the_token_pool_is_measured() -> None:
    pool = pool_breakdown(snapshot(PAGE.read_text()))
    assert pool.unit == "tokens"
    assert pool.active.value.value == FED["kv_used_tokens"]
    assert pool.total.value == FED["max_total_num_tokens"]
    assert pool.total.provenance is Provenance.MEASURED


def test_older_counters_give_the_same_hits() -> None:
    """Without prefill_effective_tokens_total the tiers come from cached_tokens_total's
    cache_source; without realtime_tokens_total the hits are its sum over the sources."""
    snap = snapshot(without("sglang:prefill_effective_tokens", "sglang:realtime_tokens"))
    for name, value in TIERS.items():
        assert snap.series[name].value == value
        assert f'cache_source="{name.rsplit("_", 1)[1]}"' in snap.series[name].source
    assert snap.series["prefix_hits"].value == CACHED
    assert snap.series["prefix_queries"].value == FED["prompt_tokens"]  # the stand-in


def test_a_server_without_hierarchical_cache_has_no_host_tier() -> None:
    snap = snapshot(without("sglang:hicache_", "sglang:prefill_effective_tokens"))
    assert snap.series["host_pool_used_tokens"].provenance is Provenance.UNKNOWN
    assert snap.series["hits_tier_device"].value == FED["cached_device"]


def test_probe_reports_the_tiers_and_transfers() -> None:
    command = [sys.executable, "-c", "from prefillscope.cli import main; main()", "probe"]
    done = subprocess.run(
        [*command, "--file", str(PAGE), "--json"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["flavour"] == "sglang"
    assert report["series"]["hits_tier_host"]["value"] == FED["cached_host"]
    assert report["histograms"]["kv_transfer_latency_ms"]["count"] == 2
