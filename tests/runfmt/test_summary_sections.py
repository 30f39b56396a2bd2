"""``Summary``: ``summary.json``'s sections as the frozen types declared once in runfmt
(``runfmt.summary_sections``, ``runfmt.summary_server``) read the figures the file holds,
any format version, and reading them changes nothing that is written back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repo_paths import FIXTURES

from runfmt.codec import decode, encode
from runfmt.names import SUMMARY_JSON
from runfmt.rundir import RunDir
from runfmt.summary import Summary
from runfmt.summary_sections import Stats
from runfmt.summary_server import Histogram, Reading, ServerSection


def _golden(version: str) -> Path:
    return FIXTURES / f"golden_{version}" / "run" / SUMMARY_JSON


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_golden_summary_reads_to_its_figures(version: str) -> None:
    doc = json.loads(_golden(version).read_text())
    typed = Summary.from_json(doc)
    assert (typed.requests.total, typed.requests.completed, typed.requests.failed) == (24, 24, 0)
    assert typed.requests.warmup_excluded == 0
    assert typed.throughput.window_s == doc["throughput"]["window_s"] > 4.0
    assert typed.throughput.requests_per_s == doc["throughput"]["requests_per_s"]
    assert typed.throughput.output_tokens_per_s == doc["throughput"]["output_tokens_per_s"]
    rates = (typed.prefix.expected_hit_rate, typed.prefix.observed_hit_rate)
    assert rates == (doc["prefix"]["expected_hit_rate"], doc["prefix"]["observed_hit_rate"])
    assert rates[0] == pytest.approx(0.7524, abs=1e-4)
    assert typed.prefix.reported_requests == 24
    assert typed.chunks.multi_token_share == doc["chunks"]["multi_token_share"]
    assert typed.client.dispatch_lag_p99_s == doc["client"]["dispatch_lag_p99_s"]
    assert typed.client.dispatch_lag is not None and typed.client.dispatch_lag.count == 24
    assert typed.client.limited is doc["client"]["limited"]
    assert typed.client.reasons == tuple(doc["client"]["reasons"])
    assert typed.client.concurrency_wait is None  # no --max-concurrency cap
    assert typed.goodput is None  # the runs had no SLO
    ttft = typed.latency("ttft_s")
    assert ttft is not None and ttft.get("p99") == doc["ttft_s"]["p99"] and ttft.count == 24
    assert isinstance(ttft, Stats) and ttft.max == doc["ttft_s"].get("max")
    assert ttft.quantiles is None  # the client's own samples, not a histogram
    assert typed.latency("no_such_s") is None


def test_the_two_versions_differ_where_their_files_do() -> None:
    old, new = (Summary.read(RunDir(_golden(v).parent)) for v in ("v1", "v2"))
    assert old.requests.by_kind == {} and new.requests.by_kind == {"shared-prefix": 24}
    assert old.client.limited is True and "dispatch lag" in old.client.reasons[0]
    assert new.client.limited is False and new.client.reasons == ()
    assert old.error_messages == new.error_messages == ()  # v2 writes an empty list


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_golden_server_section_reads_with_its_provenance(version: str) -> None:
    doc = json.loads(_golden(version).read_text())
    server = Summary.from_json(doc).server
    assert server is not None and server.available is True and server.flavour == "embedded"
    running = server.running
    assert running is not None and running.level and running.max == doc["server"]["running"]["max"]
    assert (running.provenance, running.source) == ("measured", "vllm:num_requests_running")
    blocks = server.num_blocks
    assert blocks is not None and not blocks.level
    assert blocks.value == doc["server"]["num_blocks"]["value"] > 0
    assert server.prefix.expected_hit_rate is not None
    assert server.prefix.expected_hit_rate.provenance == "derived"
    itl = server.latency("itl_s")
    assert itl is not None and itl.per == doc["server"]["itl_s"]["per"]
    details = doc["server"]["itl_s"].get("quantiles")  # v1 was written before they existed
    assert (itl.quantiles is None) is (details is None)
    if details is not None:
        assert itl.quantiles is not None and set(itl.quantiles) == set(details)
        assert itl.quantiles["p50"].high == details["p50"]["bounds"][1]
    assert server.hits_by_source is None  # written before the section existed


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_reading_the_typed_sections_writes_the_file_back_byte_for_byte(
    version: str, tmp_path: Path
) -> None:
    text = _golden(version).read_text()
    summary = Summary.read(RunDir(_golden(version).parent))
    assert summary.server is not None and summary.server.available is True
    out = RunDir(tmp_path / "out", create=True)
    out.write_json(SUMMARY_JSON, summary.as_read())
    assert (out.path / SUMMARY_JSON).read_text() == text


def test_a_version_1_summary_with_sections_missing_reads_as_none_and_empty() -> None:
    typed = Summary.from_json({"requests": {"total": 3}})
    assert typed.requests.total == 3 and typed.requests.completed is None
    assert typed.requests.by_kind == {}
    assert typed.throughput.window_s is None and typed.throughput.requests_per_s is None
    assert typed.prefix.observed_hit_rate is None and typed.prefix.expected_hit_rate_by_tier is None
    assert typed.chunks.multi_token_share is None
    assert typed.client.limited is None and typed.client.reasons == ()
    assert typed.client.dispatch_lag is None and typed.client.cpu_sustained_max is None
    assert typed.goodput is None and typed.server is None and typed.stalls is None
    assert typed.errors == {} and typed.error_messages == () and typed.percentiles is None
    assert typed.usage_suspect.requests is None and typed.latency("ttft_s") is None
    assert typed.as_read() == {"requests": {"total": 3}}  # nothing absent is written back


def test_a_section_of_the_wrong_shape_reads_as_absent() -> None:
    doc = {"requests": [], "client": "x", "goodput": None, "error_messages": {}}
    assert Summary.from_json(doc) == Summary()
    assert decode(ServerSection, {"available": False, "reason": "off"}) == ServerSection(
        available=False, reason="off"
    )


def test_unknown_keys_stay_in_extra_and_in_the_written_summary() -> None:
    doc = {
        "format_version": 2,
        "prefix": {"expected_hit_rate": 0.5, "later_key": [1, 2]},
        "server": {"available": True, "running": {"mean": 1.0, "max": 2.0, "new": 3}},
        "later_section": {"x": 1},
    }
    summary = Summary.from_json(doc)
    assert summary.prefix.extra["later_key"] == [1, 2] and summary.extra["later_section"] == {
        "x": 1
    }
    running = summary.server.running if summary.server else None
    assert running is not None and running.extra["new"] == 3
    assert summary.to_json() == doc


def test_a_latency_key_no_section_declares_is_a_latency() -> None:
    """The registry names the latencies (a metric declared in any module is one more key):
    every top-level ``*_s`` object reads as a distribution, in place, and writes back so."""
    toy = {"mean": 0.5, "p50": 0.5, "count": 2, "max": 0.75}
    doc = {"requests": {"total": 2}, "ttft_s": {"p50": 1.0}, "toy_wait_s": toy, "chunks": {}}
    summary = Summary.from_json(doc)
    assert list(summary.latencies) == ["ttft_s", "toy_wait_s"]
    assert summary.statistic("toy_wait_s", "p50") == 0.5 and summary.latency("toy_wait_s").max
    assert list(summary.as_read()) == list(doc) and summary.as_read() == doc


def test_the_server_splits_hits_by_tier_and_says_how_each_quantile_was_made() -> None:
    tokens = {"value": 300.0, "provenance": "measured", "source": "hits_tier_device"}
    share = {"value": 0.75, "provenance": "measured", "source": "Δ / Δ"}
    bounds = {"value": 5.5, "bucket": [5.0, 10.0], "bounds": [5.0, 5.79]}
    raw = {
        "available": True,
        "e2e_s": {"count": 4, "p50": 5.5, "quantiles": {"p50": bounds}},
        "hits_by_source": {
            "reported": True,
            "tiers": {"device": {"tokens": tokens, "share": share}, "host": {}},
        },
        "waiting": {"provenance": "unknown", "samples": 0, "scrapes": 3, "max": None},
    }
    server = decode(ServerSection, raw)
    assert server.hits_by_source is not None
    device = server.hits_by_source.tiers["device"]
    assert (device.tokens.value, device.share.value) == (300.0, 0.75)
    assert server.hits_by_source.tiers["host"].tokens == Reading()  # a tier with no figures
    e2e = server.latency("e2e_s")
    assert isinstance(e2e, Histogram) and e2e.quantiles is not None
    p50 = e2e.quantiles["p50"]
    assert (p50.low, p50.high, p50.bucket_high, p50.cut) == (5.0, 5.79, 10.0, True)
    assert server.waiting is not None and server.waiting.level and server.waiting.max is None
    assert encode(server) == raw
