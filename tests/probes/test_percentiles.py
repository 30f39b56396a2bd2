"""``probes.percentiles``: vLLM's ``--percentile-metrics``/``--metric-percentiles``."""

from __future__ import annotations

from dataclasses import asdict

import pandas as pd
import pytest

from loadgen.records import ChunkEvent, RequestRecord, Status
from probes.percentiles import label, parse_metrics, parse_percentiles, picked_percentiles
from workloads.errors import InputError


def test_metric_names_are_vllms_and_unknown_ones_are_refused_naming_the_flag():
    assert parse_metrics(" TTFT, itl ,") == ("ttft", "itl")
    with pytest.raises(InputError) as err:
        parse_metrics("ttft,latency")
    assert err.value.field == "--percentile-metrics" and "'latency'" in err.value.problem
    with pytest.raises(InputError):
        parse_metrics(" , ")


def test_percentiles_must_be_numbers_in_zero_exclusive_to_hundred():
    assert parse_percentiles("50, 99.9,100") == (50.0, 99.9, 100.0)
    for bad in ("0", "101", "fifty", ""):
        with pytest.raises(InputError) as err:
            parse_percentiles(bad)
        assert err.value.field == "--metric-percentiles"


def test_labels_are_the_shortest_form_of_the_number():
    assert [label(p) for p in (50.0, 99.9, 100)] == ["p50", "p99.9", "p100"]


def _record(rid: str, ttft: float, **fields) -> RequestRecord:
    return RequestRecord(
        rid, intended_s=0.0, sent_s=0.0, first_token_s=ttft, end_s=ttft + 1.0, output_tokens=3,
        **fields,
    )  # fmt: skip


def test_picked_percentiles_use_only_completed_measured_requests():
    # measured and ok: TTFT 0.1 .. 0.5 -> p50 = 0.3, p90 = 0.4 + 0.6 * 0.1 = 0.46 (linear)
    records = [_record(f"r{i}", 0.1 * i) for i in range(1, 6)]
    records += [
        _record("warm", 9.0, warmup=True),
        _record("failed", 8.0, status=Status.ERROR, error_kind="timeout"),
    ]
    # ITL per token: r1 tokens at 1, 1.1, 1.3 (gaps 0.1, 0.2); the failed one's gap is out
    chunks = [ChunkEvent("r1", t, 1) for t in (1.0, 1.1, 1.3)]
    chunks += [ChunkEvent("failed", t, 1) for t in (1.0, 6.0)]
    requests = pd.DataFrame([r.to_row() for r in records])
    chunk_frame = pd.DataFrame([asdict(c) for c in chunks])
    out = picked_percentiles(requests, chunk_frame, ("ttft", "itl"), (50.0, 90.0))
    assert out["ttft_sent_s"] == pytest.approx({"p50": 0.3, "p90": 0.46})  # vLLM's: from send
    assert out["itl_s"] == pytest.approx({"p50": 0.15, "p90": 0.19})


def test_a_metric_without_samples_is_none_not_zero():
    requests = pd.DataFrame([_record("a", 0.1).to_row()])  # 3 tokens but no chunk events
    chunks = pd.DataFrame(columns=["request_id", "t_s", "n_tokens"])
    assert picked_percentiles(requests, chunks, ("itl",), (99.0,)) == {"itl_s": {"p99": None}}
