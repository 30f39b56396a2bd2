"""The /metrics scraper against real captures served over loopback, and its failures."""

from __future__ import annotations

import asyncio
import json

from probe_servers import ReplayServer, free_port
from repo_paths import FIXTURES

from probes.normalise import ServerSeries
from probes.scraper import MetricsScraper
from runfmt.rundir import RunDir
from runfmt.tables import SERVER_METRICS, RunTables
from runtime.clock import RunClock

BEFORE = (FIXTURES / "vllm-cpu/tiny-metrics-before.prom").read_text()
AFTER = (FIXTURES / "vllm-cpu/tiny-metrics-after.prom").read_text()


async def scrape_while(url: str, run: RunDir | None, scrapes: int) -> tuple[MetricsScraper, int]:
    """Scrape every 50 ms while a stand-in for the load generator runs, until ``scrapes``
    attempts were made (the machine may be slow: attempts, not seconds, are counted);
    returns the scraper and how many ticks the other task made (it must not be held up)."""
    clock = RunClock()
    scraper = MetricsScraper(url, clock, run, interval_s=0.05, timeout_s=2.0)
    ticks = 0

    async def workload() -> None:
        nonlocal ticks
        while scraper.status.ok + scraper.status.failed < scrapes and clock.now() < 30:
            ticks += 1
            await asyncio.sleep(0.01)

    async with scraper:
        await workload()
    return scraper, ticks


def test_scrapes_land_in_long_format_on_the_run_clock(tmp_path):
    run = RunDir(tmp_path / "run", create=True)
    with ReplayServer([BEFORE, BEFORE, AFTER]) as server:
        scraper, _ = asyncio.run(scrape_while(server.url, run, 4))
    run.close()
    assert scraper.status.state == "ok" and scraper.status.failed == 0
    table = RunTables(run).server_metrics
    assert tuple(table.columns) == SERVER_METRICS.columns  # the run format's schema
    times = sorted(table["t_s"].unique())
    assert len(times) == scraper.status.ok >= 4  # one per scrape, plus the closing one
    assert 0 <= times[0] < times[-1] < 30  # seconds on the run clock
    assert not table["metric"].str.endswith("_created").any()
    row = table[table["metric"] == "vllm:prefix_cache_hits_total"].iloc[-1]
    assert json.loads(row["labels"]) == {"engine": "0", "model_name": "tiny-llama"}
    assert row["value"] == 2432.0
    series = ServerSeries.from_samples(table)
    assert series.flavour == "vllm"
    assert series.increase("prefix_hits").value == 2432.0
    assert series.histogram_increase("ttft").count == 29
    assert series.latest("block_size").value == 128.0


def test_server_restart_mid_run_is_a_counter_reset(tmp_path):
    run = RunDir(tmp_path / "run", create=True)
    with ReplayServer([BEFORE, AFTER, BEFORE, AFTER]) as server:
        scraper, _ = asyncio.run(scrape_while(server.url, run, 4))
    run.close()
    assert scraper.status.ok >= 4
    series = ServerSeries.from_samples(RunTables(run).server_metrics)
    # 0 → 2432, restart to 0, → 2432 again: two runs' worth of hits, not 2432 − 2432.
    assert series.increase("prefix_hits").value == 2 * 2432.0
    assert series.histogram_increase("ttft").count == 2 * 29


def test_endpoint_without_metrics_is_recorded_and_the_run_goes_on(tmp_path):
    run = RunDir(tmp_path / "run", create=True)
    with ReplayServer([404]) as server:
        scraper, ticks = asyncio.run(scrape_while(server.url, run, 3))
    run.close()
    assert scraper.status.state == "failed"
    assert "HTTP 404" in scraper.status.reason
    assert scraper.status.failed >= 3  # it kept trying on schedule
    assert ticks >= 3  # the other task was never held up
    assert RunTables(run).server_metrics.empty
    events = RunTables(run).probe_events
    assert set(events["probe"]) == {"server_metrics"}
    assert events["reason"].str.contains("404").all()


def test_malformed_scrape_is_one_failure_among_good_ones(tmp_path):
    broken = AFTER.replace("vllm:num_requests_running{", "vllm:num_requests_running{oops ", 1)
    run = RunDir(tmp_path / "run", create=True)
    with ReplayServer([BEFORE, broken, AFTER]) as server:
        scraper, _ = asyncio.run(scrape_while(server.url, run, 3))
    run.close()
    assert scraper.status.state == "partial"
    assert scraper.status.failed == 1
    assert "not valid exposition text" in scraper.status.reason
    assert "num_requests_running" in scraper.status.reason
    series = ServerSeries.from_samples(RunTables(run).server_metrics)
    assert series.increase("prefix_hits").value == 2432.0  # nothing else was lost


def test_server_down_is_recorded(tmp_path):
    run = RunDir(tmp_path / "run", create=True)
    url = f"http://127.0.0.1:{free_port()}"
    scraper, ticks = asyncio.run(scrape_while(url, run, 3))
    run.close()
    assert scraper.status.state == "failed"
    assert "ConnectionRefusedError" in scraper.status.reason
    assert ticks >= 3
