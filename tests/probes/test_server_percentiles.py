"""Server percentiles from histogram buckets: bounds, the method, and the client's maximum.

A histogram only counts observations per bucket, so a quantile inside a wide bucket is an
interpolation. Known input: ten requests whose E2E the client saw between 4.0 and 5.79 s,
and a vLLM E2E histogram of the same ten with seven in the 5–10 s bucket — interpolation
puts the p50 at 6.4 s, beyond anything the client saw. Then a real bench run against the
embedded engine, whose every server quantile must stay within the client's maximum.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_support import bench, read_json
from run_shapes import scrape_rows
from rundirs import write_run

from loadgen.records import ChunkEvent, RequestRecord
from prefillscope.report.content import latency_table
from probes.server_summary import server_summary
from probes.timeline import server_series
from runfmt.codec import encode
from runfmt.rundir import RunDir
from runfmt.summary import Summary
from runfmt.tables import RunTables

BOUNDS = ("1.0", "2.5", "5.0", "10.0", "20.0", "+Inf")


def e2e_exposition(counts: tuple[int, ...], total_s: float) -> str:
    name = "vllm:e2e_request_latency_seconds"
    lines = [f"# TYPE {name} histogram"]
    lines += [
        f'{name}_bucket{{le="{le}",model_name="m"}} {n}'
        for le, n in zip(BOUNDS, counts, strict=True)
    ]
    lines += [
        f'{name}_sum{{model_name="m"}} {total_s}',
        f'{name}_count{{model_name="m"}} {counts[-1]}',
    ]
    return "\n".join(lines) + "\n"


def e2e_run(path: Path, ends: list[float]) -> RunDir:
    """Ten requests whose client E2E are ``ends``; the server's histogram: 3 in 2.5–5 s,
    7 in 5–10 s."""
    records = [
        RequestRecord(id=f"r{i}", intended_s=0.0, sent_s=0.0, first_token_s=0.5, end_s=e,
                      output_tokens=2)
        for i, e in enumerate(ends)
    ]  # fmt: skip
    chunks = [ChunkEvent(f"r{i}", t, 1) for i, e in enumerate(ends) for t in (0.5, e)]
    empty = e2e_exposition((0, 0, 0, 0, 0, 0), 0.0)
    full = e2e_exposition((0, 0, 3, 10, 10, 10), sum(ends))
    samples = scrape_rows(empty, 0.0) + scrape_rows(full, 6.0)
    return RunDir(write_run(path, records, chunks, samples=samples))


@pytest.fixture
def wide_bucket_run(tmp_path: Path) -> RunDir:
    """Client E2E 4.0 … 5.79 s; the server's histogram: 3 in 2.5–5 s, 7 in 5–10 s."""
    return e2e_run(tmp_path / "run", [4.0, 4.4, 4.8, 5.1, 5.2, 5.3, 5.4, 5.5, 5.6, 5.79])


def assert_self_consistent(block: dict) -> int:
    """The one rule of ``probes.server_summary``: bounds[0] ≤ value ≤ bounds[1] ≤ the
    client's maximum, each bound the bucket's end cut at that maximum; the value at a
    bound exactly when clamped or a floor. Returns the quantiles checked."""
    client_max = block["client_max_s"]
    for q, detail in block["quantiles"].items():
        low, high = detail["bounds"]
        lower, upper = detail["bucket"]
        assert block[q] == detail["value"], q
        assert low == min(lower, client_max) and high == min(upper or high, client_max), q
        assert low <= detail["value"] <= high <= client_max, (q, detail, client_max)
        assert detail["method"] in ("interpolated", "clamped", "floor"), q
        if client_max < lower:
            assert detail["method"] == "clamped" and "above the client" in detail["note"], q
    return len(block["quantiles"])


def test_a_bucket_wholly_above_the_clients_maximum_bounds_and_clamps_alike(tmp_path):
    # The server's clock ran past the client's: every request the client saw took at most
    # 4.9 s, yet the server counted seven in its 5–10 s bucket (the p50's).
    run = e2e_run(tmp_path / "run", [4.0, 4.1, 4.2, 4.3, 4.4, 4.5, 4.6, 4.7, 4.8, 4.9])
    e2e = encode(server_summary(server_series(run), RunTables(run).requests))["e2e_s"]
    p50 = e2e["quantiles"]["p50"]
    assert p50["bucket"] == [5.0, 10.0]
    assert p50["bounds"] == [pytest.approx(4.9), pytest.approx(4.9)]
    assert p50["value"] == pytest.approx(4.9) and p50["method"] == "clamped"
    assert "above the client's maximum" in p50["note"]
    assert assert_self_consistent(e2e) == 5
    row = next(
        r for r in latency_table(Summary.from_json({"server": {"e2e_s": e2e}})) if "E2E" in r[0]
    )
    assert row[2] == "4.9 s*"  # the bound that holds, not a bucket the value lies under


def test_an_interpolation_beyond_the_clients_slowest_request_is_clamped_and_says_so(
    wide_bucket_run,
):
    run = wide_bucket_run
    summary = encode(server_summary(server_series(run), RunTables(run).requests))
    e2e = summary["e2e_s"]
    assert e2e["count"] == 10 and e2e["client_max_s"] == pytest.approx(5.79)
    p50 = e2e["quantiles"]["p50"]
    # interpolated: 5 + 5 × (5 − 3) / 7 = 6.43 s, above 5.79 s: clamped, and marked so
    assert p50["method"] == "clamped" and e2e["p50"] == p50["value"] == pytest.approx(5.79)
    assert p50["bucket"] == [5.0, 10.0] and p50["bounds"] == [5.0, pytest.approx(5.79)]
    for q, detail in e2e["quantiles"].items():
        assert e2e[q] == detail["value"] <= e2e["client_max_s"], q
    assert "interpolated" in e2e["quantile_method"]
    row = next(
        r
        for r in latency_table(Summary.from_json({"server": summary}))
        if r[0].startswith("server E2E")
    )
    assert row[0] == "server E2E (histogram buckets); * \u2264 client max"
    assert row[2] == "5 s\u20135.79 s*"  # p50: the bucket, its top cut at the client's max


def test_a_quantile_within_what_the_client_saw_is_interpolated_and_shown_as_its_bucket(
    wide_bucket_run,
):
    run = wide_bucket_run
    summary = encode(server_summary(server_series(run), RunTables(run).requests))
    p50 = summary["e2e_s"]["quantiles"]["p50"]
    # Without the client's maximum (no completed requests) nothing bounds the bucket.
    alone = encode(server_summary(server_series(run), RunTables(run).requests.iloc[:0]))
    loose = alone["e2e_s"]["quantiles"]["p50"]
    assert loose["method"] == "interpolated" and loose["value"] == pytest.approx(5 + 5 * 2 / 7)
    assert loose["bounds"] == loose["bucket"] == [5.0, 10.0]
    assert alone["e2e_s"]["client_max_s"] is None
    assert p50["value"] < loose["value"]
    row = next(
        r
        for r in latency_table(Summary.from_json({"server": alone}))
        if r[0].startswith("server E2E")
    )
    assert row[0] == "server E2E (histogram buckets)" and row[2] == "5 s\u201310 s"


def test_no_server_quantile_of_an_embedded_run_exceeds_the_clients_maximum(tmp_path):
    outcome = bench(
        "interference",
        tmp_path / "run",
        overrides={"num_requests": 3, "rate": 2.0, "concurrency": 4, "stream_requests": 1,
                   "stream_output_len": 100, "long_prompt_len": 8192},
        metrics_interval_s=0.1,
    )  # fmt: skip
    server = read_json(outcome.run_dir, "summary.json")["server"]
    assert server["available"]
    seen = 0
    for metric in ("ttft_s", "itl_s", "e2e_s"):
        block = server[metric]
        assert block["client_max_s"] > 0, metric
        seen += assert_self_consistent(block)  # also when the server's clock ran past
    assert seen == 15
