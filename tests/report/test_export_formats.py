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
from prefillscope.report.export import VllmJsonOptions, to_csv, to_vllm_json
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
    # per request, every measured one, as vLLM's lists: "" for a completed request
    assert doc["errors"] == ["", "", "boom"]
    assert doc["output_lens"] == [5, 3, 0] and doc["input_lens"] == [10, 20, 0]


def test_vllm_json_times_from_the_send_in_ms_and_itl_per_event(run: Run):
    doc = json.loads(to_vllm_json(run))
    # a failed request's TTFT and latency are 0 in vLLM's lists
    assert doc["ttfts"] == pytest.approx([0.1, 0.2, 0.0])
    assert doc["latencies"] == pytest.approx([0.5, 0.8, 0.0])
    assert doc["start_times"] == pytest.approx([0.0, 0.2, 0.3])
    # b's last read carried 2 tokens: two events read together, the second's gap 0
    assert doc["itls"] == [pytest.approx([0.1, 0.3]), pytest.approx([0.6, 0.0]), []]
    assert doc["mean_ttft_ms"] == pytest.approx(150.0)
    assert doc["mean_itl_ms"] == pytest.approx(1000.0 / 4)
    assert doc["mean_tpot_ms"] == pytest.approx(200.0)  # (0.4/4 + 0.6/2) / 2
    # vLLM's default statistics: ttft, tpot, itl at p99, no e2el
    assert "p99_ttft_ms" in doc and "mean_e2el_ms" not in doc


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


def test_we_write_the_keys_vllms_own_result_file_has(run: Run):
    """vLLM's default file (no --save-detailed) and ours asked the same: the same keys."""
    ours = json.loads(to_vllm_json(run, VllmJsonOptions(detailed=False)))
    vllm = json.loads((FIXTURES / "vllm-cpu" / "bench-serve-tiny.json").read_text())
    assert set(ours) == set(vllm)


def test_with_save_detailed_goodput_and_percentiles_the_keys_are_vllms(run: Run):
    """vLLM's file of --save-detailed --goodput ttft:500 tpot:50 --percentile-metrics
    ttft,tpot,itl,e2el --metric-percentiles 50,90,99 (recorded from the real target):
    ours, asked the same, has its keys; its goodput is computed, from the send."""
    asked = VllmJsonOptions(
        metrics=("ttft", "tpot", "itl", "e2el"), percentiles=(50.0, 90.0, 99.0),
        goodput_ms={"ttft": 150.0, "tpot": 500.0},
    )  # fmt: skip
    ours = json.loads(to_vllm_json(run, asked))
    vllm = json.loads((FIXTURES / "vllm-cpu" / "bench-serve-detailed.json").read_text())
    assert set(ours) == set(vllm)
    # a: TTFT 0.1 s, TPOT 0.1 s (good); b: TTFT 0.2 s > 150 ms (not good); window 1.0 s
    assert ours["request_goodput"] == pytest.approx(1.0)
    assert ours["p90_e2el_ms"] == pytest.approx(500 + 0.9 * 300)
    assert ours["generated_texts"] == [None, None, None]  # this run kept no text


def test_without_goodput_request_goodput_is_null_as_in_vllm(run: Run):
    assert json.loads(to_vllm_json(run, VllmJsonOptions()))["request_goodput"] is None
