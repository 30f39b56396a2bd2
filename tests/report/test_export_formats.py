"""``prefillscope.report.export``: a run's requests as CSV and as the result file of
``vllm bench serve --save-result``, from three requests laid out by hand (and a warm-up),
written to a run directory and opened as every reader opens one (``runfmt.run``)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict

import pandas as pd
import pytest
from repo_paths import FIXTURES
from rundirs import write_run

from loadgen.records import ChunkEvent, RequestRecord, Status
from prefillscope.report.export import to_csv, to_vllm_json
from runfmt.run import Run, open_run
from workloads.spec import load_spec

RECORDS = [
    RequestRecord("a", intended_s=0.0, sent_s=0.0, first_token_s=0.1, end_s=0.5,
                  prompt_tokens=10, output_tokens=5),
    RequestRecord("b", intended_s=0.1, sent_s=0.2, first_token_s=0.4, end_s=1.0,
                  prompt_tokens=20, output_tokens=3),
    RequestRecord("c", intended_s=0.3, sent_s=0.3, end_s=0.35, status=Status.ERROR,
                  error_kind="http_5xx", error_message="boom"),
    RequestRecord("w", warmup=True, intended_s=-5.0, sent_s=-5.0, first_token_s=-4.0,
                  end_s=-3.0, prompt_tokens=10, output_tokens=2),
]  # fmt: skip
CHUNKS = [ChunkEvent("a", t, 1) for t in (0.1, 0.2, 0.5)] + [ChunkEvent("b", 0.4, 1),
                                                              ChunkEvent("b", 1.0, 2)]  # fmt: skip
INFO = {"target": {"api": "completions", "flavour": "vllm", "model": "m"},
        "workload": load_spec("random", {"rate": 4.0, "num_requests": 3}).to_dict(),
        "load": {"max_concurrency": 8}}  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return open_run(write_run(tmp_path_factory.mktemp("export") / "run", RECORDS, CHUNKS, INFO))


def _frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    return pd.DataFrame([r.to_row() for r in RECORDS]), pd.DataFrame([asdict(c) for c in CHUNKS])


def test_vllm_json_counts_and_rates_over_the_measured_requests(run: Run):
    doc = json.loads(to_vllm_json(run))
    assert (doc["num_prompts"], doc["completed"], doc["failed"]) == (3, 2, 1)
    assert (doc["total_input_tokens"], doc["total_output_tokens"]) == (30, 8)
    assert doc["duration"] == pytest.approx(1.0)
    assert doc["request_throughput"] == pytest.approx(2.0)
    assert doc["output_throughput"] == pytest.approx(8.0)
    assert (doc["request_rate"], doc["max_concurrency"], doc["backend"]) == (4.0, 8, "vllm")
    assert doc["errors"] == ["boom"]


def test_vllm_json_times_from_the_send_in_ms_and_itl_per_chunk(run: Run):
    doc = json.loads(to_vllm_json(run))
    assert doc["ttfts"] == pytest.approx([0.1, 0.2]) and doc["latencies"] == pytest.approx(
        [0.5, 0.8]
    )
    assert doc["itls"] == [pytest.approx([0.1, 0.3]), pytest.approx([0.6])]
    assert doc["mean_ttft_ms"] == pytest.approx(150.0)
    assert doc["mean_itl_ms"] == pytest.approx(1000.0 / 3)
    assert doc["mean_tpot_ms"] == pytest.approx(200.0)  # (0.4/4 + 0.6/2) / 2


def test_every_statistic_we_write_is_a_key_vllm_writes(run: Run):
    ours = json.loads(to_vllm_json(run))
    vllm = json.loads((FIXTURES / "vllm-cpu" / "bench-serve-tiny.json").read_text())
    scalars = {k for k, v in ours.items() if not isinstance(v, list) and "e2el" not in k}
    assert scalars <= set(vllm)


def test_csv_has_a_row_per_measured_request_in_milliseconds():
    rows = list(csv.DictReader(io.StringIO(to_csv(_frames()[0]))))
    assert [r["id"] for r in rows] == ["a", "b", "c"]
    b = rows[1]
    assert float(b["ttft_ms"]) == pytest.approx(300.0)
    assert float(b["ttft_from_send_ms"]) == pytest.approx(200.0)
    assert float(b["e2e_from_send_ms"]) == pytest.approx(800.0)
    assert rows[2]["ttft_ms"] == "" and rows[2]["error_message"] == "boom"


def test_vllm_json_peaks_and_queue_times_by_hand(run: Run):
    """One-second buckets from the first completed send (0.0): bucket 0 holds a's three
    tokens and b's first, bucket 1 b's two-token chunk at 1.0; a is active in bucket 0, b
    (0.2 to 1.0) in buckets 0 and 1. Queue time is the send's lateness, every request."""
    doc = json.loads(to_vllm_json(run))
    assert doc["max_output_tokens_per_s"] == 4.0
    assert doc["max_concurrent_requests"] == 2
    assert doc["queue_times"] == pytest.approx([0.0, 0.1, 0.0])
    assert doc["rtfx"] == 0.0


def test_we_write_every_key_a_vllm_result_has(run: Run):
    ours = json.loads(to_vllm_json(run))
    vllm = json.loads((FIXTURES / "vllm-cpu" / "bench-serve-tiny.json").read_text())
    assert set(vllm) - set(ours) == set()
