"""The probes as ``bench`` wires them: scraping on or off, the GPU probe, Prometheus.

A probe that cannot run never costs the run: it is recorded in ``run.json`` with its
state and reason, and the summary's ``server`` section says ``unknown`` with that reason.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import fault_server
import pytest
from bench_support import bench, bench_cli, read_json
from probe_servers import PrometheusServer, free_port

from perfmodel.config import EngineConfig
from probes.probe_process import ProbeProcess
from runfmt.tables import RunTables
from session import bench_runner
from simengine.embedded import EmbeddedServer

SMALL = {"num_requests": 12, "rate": 20}
FAST = ("fixed_step_s=0.002",)


def test_without_server_metrics_the_oracle_uses_the_engine_config(tmp_path: Path) -> None:
    run = tmp_path / "run"
    outcome = bench("system-prompt", run, engine=FAST, overrides=SMALL, server_metrics=False)
    assert outcome.status == "complete"
    info = read_json(run, "run.json")
    metrics = info["probes"]["server_metrics"]
    assert metrics["url"] is None and metrics["status"]["state"] == "off"
    assert info["oracle"]["source"] == "engine config" and info["oracle"]["num_blocks"] > 0
    assert RunTables(run).server_metrics.empty
    server = outcome.summary.to_json()["server"]
    assert server["available"] is False and "--no-server-metrics" in server["reason"]
    assert (
        outcome.summary.to_json()["prefix"]["observed_hit_rate"] is not None
    )  # from the responses


def test_gpu_probe_state_is_recorded(tmp_path: Path) -> None:
    outcome = bench("system-prompt", tmp_path / "off", engine=FAST, overrides=SMALL)
    assert read_json(outcome.run_dir, "run.json")["probes"]["gpu"]["status"]["state"] == "off"
    auto = bench("system-prompt", tmp_path / "auto", engine=FAST, overrides=SMALL, gpu="auto")
    gpu = read_json(auto.run_dir, "run.json")["probes"]["gpu"]["status"]
    if shutil.which("nvidia-smi") is None:
        assert gpu["state"] == "unavailable" and gpu["reason"]
        assert RunTables(auto.run_dir).gpu.empty  # no zeros pretending
    else:
        assert gpu["state"] == "ok"
        assert not RunTables(auto.run_dir).gpu.empty


def test_a_prometheus_that_is_down_is_recorded_and_the_run_goes_on(tmp_path: Path) -> None:
    run = tmp_path / "run"
    outcome = bench(
        "system-prompt",
        run,
        engine=FAST,
        overrides=SMALL,
        prometheus=f"http://127.0.0.1:{free_port()}",
    )
    assert outcome.status == "complete" and outcome.summary.to_json()["requests"]["completed"] == 12
    status = read_json(run, "run.json")["probes"]["prometheus"]["status"]
    assert status["state"] == "failed" and "unreachable" in status["reason"]
    assert outcome.summary.to_json()["server"]["available"] is True  # the direct scrape
    assert outcome.summary.to_json()["server_prometheus"]["available"] is False


@pytest.fixture
def engine() -> Iterator[EmbeddedServer]:
    with EmbeddedServer(EngineConfig(fixed_step_s=0.004)) as server:
        yield server


@pytest.mark.slow  # Prometheus applies new scrape targets only every 5 s
@pytest.mark.prometheus
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="no prometheus binary")
def test_server_section_from_prometheus(tmp_path: Path, engine: EmbeddedServer) -> None:
    with PrometheusServer(
        shutil.which("prometheus") or "", [engine.url.removeprefix("http://")], tmp_path
    ) as prom:
        prom.wait_for('count(up{job="target"} == 1)', 1)
        run = tmp_path / "run"
        done = bench_cli(
            "--workload", "system-prompt", "--num-requests", "40", "--rate", "10",
            "--endpoint", engine.url, "--vocab-size", "32000", "--no-server-metrics",
            "--prometheus", prom.url, "--gpu-telemetry", "off", "--json", "--out", str(run),
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    info = read_json(run, "run.json")
    assert info["probes"]["prometheus"]["status"]["state"] == "ok"
    server = read_json(run, "summary.json")["server"]
    assert server["source"] == "prometheus" and server["available"] is True
    assert server["flavour"] == "embedded"
    # What Prometheus had scraped by the end of the run (it scrapes every second): the 40
    # measured requests, and bench's one smoke request before the clock when a scrape
    # taken before it falls inside the window.
    assert 20 <= server["ttft_s"]["count"] <= 40 + 1
    assert server["prefix"]["hits"]["value"] > 0


#: A user's mapping for "their own engine": here the embedded engine's metrics, named
#: explicitly (no ``extends``), so that only what the file says is read.
OWN_MAPPING = """
flavour = "ownengine"
description = "a user's engine"
detect = ["vllm:num_requests_running"]

[series.running]
metric = "vllm:num_requests_running"

[series.prefix_queries]
metric = "vllm:prefix_cache_queries_total"

[series.prefix_hits]
metric = "vllm:prefix_cache_hits_total"

[histograms.ttft]
metric = "vllm:time_to_first_token_seconds"
"""


def test_a_user_mapping_file_reads_the_server(tmp_path: Path) -> None:
    own = tmp_path / "own.toml"
    own.write_text(OWN_MAPPING)
    run = tmp_path / "run"
    done = bench_cli(
        "--workload", "system-prompt", "--num-requests", "12", "--rate", "20",
        "--engine", "fixed_step_s=0.002", "--gpu-telemetry", "off", "--mapping", str(own),
        "--out", str(run), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    metrics = read_json(run, "run.json")["probes"]["server_metrics"]
    assert metrics["flavour"] == "ownengine" and metrics["mapping_file"] == str(own.resolve())
    assert metrics["status"]["state"] == "ok"
    server = read_json(run, "summary.json")["server"]
    assert server["available"] is True and server["flavour"] == "ownengine"
    assert server["ttft_s"]["count"] == 12  # the server's histogram, read through the file
    hits = server["prefix"]["observed_hit_rate"]
    assert hits["provenance"] == "measured" and 0 < hits["value"] < 1
    # what the file does not map is unknown, never 0
    assert server["preemptions"]["provenance"] == "unknown"
    assert server["preemptions"]["value"] is None


def test_a_mapping_file_with_an_unknown_key_fails_the_probe_not_the_run(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(OWN_MAPPING.replace('metric = "vllm:num_requests_running"', 'metrc = "x"'))
    run = tmp_path / "run"
    done = bench_cli(
        "--workload", "system-prompt", "--num-requests", "12", "--rate", "20",
        "--engine", "fixed_step_s=0.002", "--gpu-telemetry", "off", "--mapping", str(bad),
        "--out", str(run),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = read_json(run, "summary.json")
    assert summary["requests"]["completed"] == 12
    status = read_json(run, "run.json")["probes"]["server_metrics"]["status"]
    assert status["state"] == "failed"
    assert "series.running: metrc" in status["reason"] and str(bad) in status["reason"]
    assert summary["server"]["available"] is False and "metrc" in summary["server"]["reason"]
    assert not RunTables(run).server_metrics.empty  # raw samples kept
    # the end-of-run table says why, in full, on an 80-column pipe
    said = " ".join(done.stdout.split())
    assert "server metrics unknown: mapping file not used:" in said and "metrc" in said


def test_a_server_without_a_metrics_page_is_told_once_and_not_scraped(tmp_path: Path) -> None:
    """A plain OpenAI server answers detection's GET /metrics with 404: the run says so in
    run.json and the summary, starts no scraper (no failed scrapes journaled), and goes on."""
    proc, url = fault_server.start("none")
    run = tmp_path / "run"
    try:
        outcome = bench(
            "shared-prefix",
            run,
            endpoint=url,
            model=fault_server.MODEL,
            vocab_size=32000,
            cache_protocol="warm",
            overrides={"groups": 1, "prefix_len": 16, "suffix_len": 8, "output_len": 4},
        )
    finally:
        proc.kill()
        proc.wait()
    assert outcome.status == "complete"
    metrics = read_json(run, "run.json")["probes"]["server_metrics"]
    assert metrics["url"] == f"{url}/metrics"
    status = metrics["status"]
    assert status["state"] == "unavailable" and "HTTP 404" in status["reason"]
    assert (status["ok"], status["failed"]) == (0, 0)
    events = RunTables(run).probe_events
    assert events[["probe", "event"]].values.tolist() == [["server_metrics", "unavailable"]]
    assert RunTables(run).server_metrics.empty
    server = outcome.summary.to_json()["server"]
    assert server["available"] is False and "HTTP 404" in server["reason"]


def test_a_stalling_metrics_page_never_holds_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/metrics`` answers detection, then stalls every scrape (30 s timeout here): the
    load starts while the baseline scrape is still in flight (journaled ``late``), and at
    the run's end the stalled scrape is abandoned (journaled ``failed``). A 1-s run ends
    well within one scrape timeout; before, its start waited a whole timeout for the
    baseline and its end for the rest of the one in flight (≥ 60 s here, 10.8 s at 5 s)."""
    monkeypatch.setattr(bench_runner, "ProbeProcess", partial(ProbeProcess, timeout_s=30.0))
    proc, url = fault_server.start("stall-metrics")
    run = tmp_path / "run"
    began = time.monotonic()
    try:
        outcome = bench(
            "shared-prefix",
            run,
            endpoint=url,
            model=fault_server.MODEL,
            vocab_size=32000,
            cache_protocol="warm",
            overrides={"prefix_len": 16, "suffix_len": 8, "output_len": 4}
            | {"concurrency": 2, "duration": 1},
        )
    finally:
        took = time.monotonic() - began
        proc.kill()
        proc.wait()
    print(f"1-s bench against a stalling /metrics (30-s scrape timeout) took {took:.1f} s")
    assert outcome.status == "complete"
    assert took < 20.0  # one scrape timeout is 30 s; before, two of them
    requests = RunTables(run).requests
    assert len(requests) > 0 and requests["status"].eq("ok").all()
    status = read_json(run, "run.json")["probes"]["server_metrics"]["status"]
    assert status["state"] == "failed" and (status["ok"], status["failed"]) == (0, 1)
    assert "abandoned at the run's end" in status["reason"]
    events = RunTables(run).probe_events
    scraper = events[events["probe"] == "server_metrics"]
    assert scraper["event"].tolist() == ["late", "failed"]
    late_s, abandoned_s = scraper["t_s"].tolist()
    assert late_s < requests["sent_s"].min()  # the load did not wait for the baseline
    assert abandoned_s < requests["end_s"].max() + 10.0  # nor the end for the stalled scrape
    assert RunTables(run).server_metrics.empty
    server = outcome.summary.to_json()["server"]
    assert server["available"] is False and "abandoned" in server["reason"]
