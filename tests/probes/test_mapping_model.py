"""``probes.mapping_model``: canonical values resolved against one hand-written scrape."""

from __future__ import annotations

import math

import pytest

from probes.canonical import HISTOGRAMS, Provenance
from probes.exposition import parse_exposition
from probes.mapping_model import HistogramSource, MetricMapping, PoolSpec, Source

SCRAPE = parse_exposition(
    """\
# TYPE eng_running gauge
eng_running{engine="0"} 3
eng_running{engine="1"} 4
# TYPE eng:waiting gauge
eng:waiting 2
# TYPE eng_cache_info gauge
eng_cache_info{block_size="16",prefix="True",blocks="None"} 1
# TYPE eng_ttft_seconds histogram
eng_ttft_seconds_bucket{engine="0",le="0.1"} 1
eng_ttft_seconds_bucket{engine="0",le="+Inf"} 2
eng_ttft_seconds_count{engine="0"} 2
eng_ttft_seconds_sum{engine="0"} 0.5
eng_ttft_seconds_bucket{engine="1",le="0.1"} 3
eng_ttft_seconds_bucket{engine="1",le="+Inf"} 3
eng_ttft_seconds_count{engine="1"} 3
eng_ttft_seconds_sum{engine="1"} 0.2
"""
)


def _mapping(**series: Source) -> MetricMapping:
    return MetricMapping(
        flavour="eng",
        description="test",
        detect=("eng_",),
        prefix_variants=("eng:", "eng_"),
        series=series,
        histograms={"ttft": HistogramSource(("eng:ttft_seconds",))},
        pool=PoolSpec(),
    )


def test_replicas_are_aggregated_as_the_source_says():
    mapping = _mapping()
    assert mapping.resolve(Source(("eng_running",)), SCRAPE).value == 7
    assert mapping.resolve(Source(("eng_running",), aggregate="max"), SCRAPE).value == 4
    assert mapping.resolve(Source(("eng_running",), aggregate="mean"), SCRAPE).value == 3.5
    only = mapping.resolve(Source(("eng_running",), labels=(("engine", "1"),)), SCRAPE)
    assert (only.value, only.provenance) == (4, Provenance.MEASURED)
    assert only.source == 'eng_running{engine="1"}'


def test_either_prefix_spelling_finds_the_metric():
    mapping = _mapping()
    assert mapping.spellings("eng_waiting") == ["eng:waiting", "eng_waiting"]
    assert mapping.spellings("other_waiting") == ["other_waiting"]
    assert mapping.resolve(Source(("eng_waiting",)), SCRAPE).value == 2
    names = _mapping(x=Source(("eng:waiting",))).metric_names()
    assert {
        "eng_waiting",
        "eng:waiting",
        "eng_ttft_seconds_bucket",
        "eng:ttft_seconds_sum",
    } <= names


def test_a_label_is_read_as_a_number_and_true_false_as_one_and_zero():
    mapping = _mapping()
    assert mapping.resolve(Source(("eng_cache_info",), label="block_size"), SCRAPE).value == 16
    assert mapping.resolve(Source(("eng_cache_info",), label="prefix"), SCRAPE).value == 1.0
    unknown = mapping.resolve(Source(("eng_cache_info",), label="blocks"), SCRAPE)
    assert not unknown.known and "carries no number" in unknown.source


def test_first_takes_the_first_exposed_option_and_derived_marks_it():
    mapping = _mapping()
    source = Source(first=(Source(("eng_absent",)), Source(("eng_waiting",))), derived=True)
    value = mapping.resolve(source, SCRAPE)
    assert (value.value, value.provenance) == (2, Provenance.DERIVED)
    none = mapping.resolve(Source(first=(Source(("a_x",)), Source(("b_y",)))), SCRAPE)
    assert none.source == "none of a_x / b_y is exposed"


def test_total_sums_its_parts_scaled_and_names_a_missing_part():
    mapping = _mapping()
    parts = (Source(("eng_running",)), Source(("eng_waiting",)))
    total = mapping.resolve(Source(total=parts, scale=10.0), SCRAPE)
    assert (total.value, total.provenance) == (90.0, Provenance.DERIVED)
    missing = mapping.resolve(Source(total=(parts[0], Source(("eng_gone",)))), SCRAPE)
    assert not missing.known and "eng_gone" in missing.source


def test_snapshot_sums_histogram_replicas_and_marks_unmapped_series_unknown():
    snap = _mapping(running=Source(("eng_running",))).snapshot(SCRAPE)
    assert snap.series["running"].value == 7
    assert not snap.series["waiting"].known
    assert snap.series["waiting"].source == "eng does not expose waiting"
    ttft = snap.histograms["ttft"]
    assert ttft.bounds == (0.1, math.inf) and ttft.cumulative == (4, 5)
    assert (ttft.count, ttft.sum) == (5, pytest.approx(0.7))
    assert snap.histogram_sources == dict.fromkeys(HISTOGRAMS) | {"ttft": "eng_ttft_seconds"}


def test_detection_needs_a_detect_prefix_among_the_names():
    assert _mapping().matches(SCRAPE)
    assert not MetricMapping("x", "", ("vllm:",), (), {}, {}, PoolSpec()).matches(SCRAPE)
