"""The run timeline and the ``server`` summary section over a run directory.

The server side is the real tiny-llama vLLM captures taken before and after its probe
(stored by the scraper's own row writer); the client side is a handful of request
records whose prompt and oracle totals match what that server counted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from repo_paths import FIXTURES
from rundirs import write_run

from loadgen.records import ChunkEvent, ErrorKind, RequestRecord, Status
from probes.exposition import parse_exposition
from probes.gpu import GPU_TABLE
from probes.normalise import ServerSeries
from probes.scraper import SERVER_METRICS_TABLE, sample_rows
from probes.server_summary import server_summary
from probes.timeline import Timeline, client_events, server_series
from runfmt.codec import encode
from runfmt.names import RUN_JSON
from runfmt.run_sections import ProbeState
from runfmt.rundir import RunDir
from runfmt.tables import RunTables


def capture(name: str):
    return parse_exposition((FIXTURES / name).read_text())


def tiny_llama_run(path: Path) -> RunDir:
    """The run the module doc describes, written by the tests' one fabricator."""
    scrapes = [
        (0.0, "vllm-cpu/tiny-metrics-before.prom"),
        (4.0, "vllm-cpu/tiny-metrics-before.prom"),
        (10.0, "vllm-cpu/tiny-metrics-after.prom"),
    ]
    samples = [row for t_s, name in scrapes for row in sample_rows(t_s, capture(name))]
    # Five requests: 21700 prompt tokens, 2432 expected cached — what the server counted.
    prompts = [5000, 5000, 5000, 5000, 1700]
    expected = [0, 1024, 1024, 384, 0]
    records, chunks = [], []
    for i, (prompt, cached) in enumerate(zip(prompts, expected, strict=True)):
        failed = i == 4
        records.append(
            RequestRecord(
                id=f"r{i}",
                intended_s=1.0 + i,
                sent_s=1.0 + i + 0.001,
                first_token_s=None if failed else 1.5 + i,
                end_s=2.5 + i,
                prompt_tokens=prompt,
                expected_cached_tokens=cached,
                status=Status.ERROR if failed else Status.OK,
                error_kind=ErrorKind.HTTP_5XX if failed else None,
            )
        )
        if not failed:
            chunks += [ChunkEvent(f"r{i}", 1.5 + i + 0.25 * k, 2) for k in range(4)]
    gpu = [
        {"t_s": t_s, "gpu": g, "utilisation_pct": 40.0 + 20 * g, "memory_used_bytes": 1e9}
        for t_s in (0.5, 5.5)
        for g in (0, 1)
    ]
    return RunDir(write_run(path, records, chunks, samples=samples, tables={GPU_TABLE: gpu}))


def test_client_events_in_order(tmp_path):
    run = tiny_llama_run(tmp_path / "run")
    events = client_events(RunTables(run).requests, RunTables(run).chunks)
    assert list(events["t_s"]) == sorted(events["t_s"])
    counts = events["kind"].value_counts().to_dict()
    assert counts == {"intended": 5, "sent": 5, "first_token": 4, "end": 5, "chunk": 16}
    failed_end = events[(events["kind"] == "end") & ~events["ok"].astype(bool)]
    assert list(failed_end["request_id"]) == ["r4"]


def test_timeline_windows_line_up_client_server_and_gpu(tmp_path):
    timeline = Timeline.from_run(tiny_llama_run(tmp_path / "run"))
    assert timeline.span == (0.0, 10.0)
    assert list(timeline.in_flight(np.array([0.5, 1.2, 2.6, 3.2, 7.0]))) == [0, 1, 1, 2, 0]
    bins = timeline.bins(5.0)
    assert list(bins["t_start"]) == [0.0, 5.0]
    assert bins["sent"].sum() == 5 and bins["completed"].sum() == 4 and bins["failed"].sum() == 1
    assert bins["tokens"].sum() == 32
    # The server's hits arrive between the scrapes at 4 s and 10 s: all in the 2nd bin.
    assert list(bins["prefix_hits_delta"]) == [0.0, 2432.0]
    assert list(bins["gpu_utilisation_pct"]) == [50.0, 50.0]  # mean of the two GPUs
    assert list(bins["gpu_memory_used_bytes"]) == [2e9, 2e9]  # summed over GPUs
    late = timeline.window(5.0, 10.0)
    assert set(late.events["request_id"]) == {"r3", "r4"}
    assert late.server.increase("prefix_hits").value == 2432.0  # baseline scrape kept
    assert list(late.gpu["t_s"]) == [5.5, 5.5]


def test_server_summary_observed_vs_expected(tmp_path):
    run = tiny_llama_run(tmp_path / "run")
    series = server_series(run)
    summary = encode(server_summary(series, RunTables(run).requests, probe={"state": "ok"}))
    assert summary["available"] and summary["flavour"] == "vllm"
    prefix = summary["prefix"]
    assert prefix["hits"]["value"] == 2432.0
    assert prefix["observed_hit_rate"]["value"] == pytest.approx(2432 / 21700)
    assert prefix["observed_hit_rate"]["provenance"] == "measured"
    assert prefix["expected_hit_rate"]["value"] == pytest.approx(2432 / 21700)
    assert prefix["expected_hit_rate"]["provenance"] == "derived"
    assert prefix["observed_minus_expected"] == pytest.approx(0.0)
    assert summary["ttft_s"]["count"] == 29
    assert summary["ttft_s"]["p50"] < summary["ttft_s"]["p99"]
    assert summary["itl_s"]["per"] == "event"
    assert summary["preemptions"]["value"] == 0.0
    assert summary["waiting"]["max"] == 0.0 and summary["waiting"]["provenance"] == "measured"
    assert summary["kv_usage"]["p50"] == 0.0
    assert summary["block_size"]["value"] == 128.0
    pool = summary["pool"]
    assert pool["unit"] == "blocks"
    assert pool["active_blocks"]["max"] == 0.0
    assert pool["active_blocks"]["provenance"] == "derived"
    # Pinned at 0 while nothing was computed (2 scrapes), unknown after the run.
    reclaimable = pool["reclaimable_blocks"]
    assert (reclaimable["samples"], reclaimable["scrapes"]) == (2, 3)
    assert reclaimable["provenance"] == "derived" and reclaimable["max"] == 0.0


def test_server_summary_without_server_metrics():
    requests = pd.DataFrame({"prompt_tokens": [100, 300], "expected_cached_tokens": [0, 100]})
    summary = encode(
        server_summary(
            None, requests, probe=ProbeState(state="failed", reason="GET x answered HTTP 404")
        )
    )
    assert summary["available"] is False
    assert summary["probe"] == {"state": "failed", "reason": "GET x answered HTTP 404",
                                "ok": 0, "failed": 0}  # fmt: skip
    assert summary["reason"] == "GET x answered HTTP 404"
    assert summary["prefix"]["observed_hit_rate"]["provenance"] == "unknown"
    assert summary["prefix"]["expected_hit_rate"]["value"] == 0.25


def test_run_json_flavour_is_used(tmp_path):
    run = RunDir(tmp_path / "run", create=True)
    for t_s, name in ((0.0, "llamacpp/metrics-during.txt"), (1.0, "llamacpp/metrics-after.txt")):
        run.table(SERVER_METRICS_TABLE).append_many(sample_rows(t_s, capture(name)))
    run.close()
    assert server_series(run).flavour == "llamacpp"  # detected
    run.write_json(RUN_JSON, {"probes": {"server_metrics": {"flavour": "sglang"}}})
    series = server_series(run)  # as recorded: nothing of SGLang's is there
    assert series.flavour == "sglang"
    assert series.increase("generation_tokens").value is None
    assert isinstance(series, ServerSeries)
