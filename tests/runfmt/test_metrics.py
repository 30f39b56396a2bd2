"""runfmt.metrics: each reported metric declared once, and every reader agrees."""

from __future__ import annotations

import json

from repo_paths import FIXTURES

from diagnose.metrics import DEFAULT_METRICS, metric_spec
from prefillscope.report.content import latency_table
from runfmt.metrics import DISPATCH_LAG, THROUGHPUTS, by_key, latencies
from runfmt.names import CHUNKS_TABLE, REQUESTS_TABLE
from runfmt.summary import Summary
from runfmt.units import fmt_seconds
from runtime.quantiles import STATISTICS

SUMMARY = FIXTURES / "golden_v1" / "run" / "summary.json"


def test_every_metric_is_in_the_summary_a_run_writes() -> None:
    summary = json.loads(SUMMARY.read_text())
    for metric in latencies():
        assert set(STATISTICS) <= set(summary[metric.key]), metric.key
    for metric in THROUGHPUTS:
        assert summary["throughput"][metric.key] > 0, metric.key


def test_compare_names_and_directions_come_from_the_registry() -> None:
    for metric in latencies():
        for stat in STATISTICS:
            spec = metric_spec(f"{metric.prefix}_{stat}")
            assert (spec.source, spec.stat) == (metric.key, stat)
            assert spec.higher_is_better is metric.higher_is_better is False
    for metric in THROUGHPUTS:
        assert metric_spec(metric.key).higher_is_better is metric.higher_is_better is True
    assert all(metric_spec(name) for name in DEFAULT_METRICS)


def test_the_report_labels_the_reported_latencies_in_registry_order() -> None:
    rows = latency_table(Summary.from_json(json.loads(SUMMARY.read_text())))
    labels = [row[0] for row in rows][: sum(m.reported for m in latencies())]
    assert labels == [m.label for m in latencies() if m.reported]
    assert {m.table for m in (*latencies(), *THROUGHPUTS)} <= {REQUESTS_TABLE, CHUNKS_TABLE}


def test_a_metric_names_and_writes_its_statistics() -> None:
    itl, tokens = by_key("itl_s"), by_key("output_tokens_per_s")
    assert (itl.named("p999"), itl.named("p99", stat_first=True)) == ("ITL p99.9", "p99 ITL")
    assert itl.format(0.0123) == fmt_seconds(0.0123) == "12.3 ms"
    assert tokens.format(14390.2) == "14,390 tok/s" and tokens.format(12.34) == "12.3 tok/s"
    assert itl.format(None) == itl.format(float("nan")) == "\u2013"
    assert DISPATCH_LAG not in latencies() and by_key(DISPATCH_LAG.key) is DISPATCH_LAG


def test_the_reports_slo_row_names_each_bound_as_the_registry_does() -> None:
    from prefillscope.report.content import goodput_rows

    goodput = {"slo": {"ttft_s": 0.5, "itl_s": 0.05}, "share": 0.5, "requests_per_s": 2.0}
    (_, slo) = goodput_rows(Summary.from_json({"goodput": goodput}))[1]
    names = (by_key("ttft_s").short, by_key("itl_s").short)
    assert slo == f"{names[0]} \u2264 500 ms, {names[1]} \u2264 50 ms"


def test_stat_of_inverts_stat_name_for_every_latency_statistic() -> None:
    """``stat_of`` reads back what ``stat_name`` wrote, the longest prefix winning
    (``ttft_sent_p50`` is TTFT-as-sent's, not TTFT's); a throughput or an unknown name is
    no latency statistic."""
    import pytest

    from runfmt.metrics import (
        DISPATCH_LAG,
        OUTPUT_TOKENS_PER_S,
        STAT_LABELS,
        stat_name,
        stat_of,
    )

    for metric in (*latencies(), DISPATCH_LAG):
        for stat in STAT_LABELS:
            assert stat_of(stat_name(metric, stat)) == (metric, stat)
    for name in (OUTPUT_TOKENS_PER_S.key, "itl_p42", "warp_p99", "itl"):
        with pytest.raises(KeyError):
            stat_of(name)
