"""The report of a real run: the embedded engine over loopback, an oversized chunk budget.

The run is made of the real parts a bench run is made of — the interference workload's
plan, the load generator, the /metrics scraper, the latency and server summaries — so
the report is checked against what those really write, not against a hand-made table.
With a budget of 8192 tokens a long prompt's prefill takes a whole step, every decode
waits for it, and the report has to show those stalls where they happened.
"""

from __future__ import annotations

import asyncio
import io
import re
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from loadgen.clock import RunClock
from loadgen.detect import detect_target
from loadgen.run import LoadOptions, run_load
from loadgen.rundir import RunDir
from prefillscope.report.data import ReportData, load_report_data
from prefillscope.report.figures import TIMELINE_WINDOWS, windowed_percentiles
from prefillscope.report.html import render_html
from prefillscope.report.terminal import render_terminal
from probes.latency import summarize
from probes.scraper import MetricsScraper
from probes.server_summary import server_summary
from probes.timeline import server_series
from simengine.config import EngineConfig
from simengine.embedded import EmbeddedServer
from workloads.build import build_plan
from workloads.spec import load_spec

LONG_PROMPTS = 3


async def _record(url: str, out: Path) -> None:
    spec = load_spec(
        "interference",
        {
            "num_requests": LONG_PROMPTS,
            "rate": 2.0,
            "concurrency": 4,
            "stream_requests": 1,
            "stream_output_len": 200,
            "long_prompt_len": 8192,
            "seed": 3,
        },
    )
    target = await detect_target(url, vocab_size=4096)
    run, clock = RunDir(out, create=True), RunClock()
    async with MetricsScraper(url, clock, run, interval_s=0.1):
        result = await run_load(build_plan(spec), target, run, clock, LoadOptions())
    run.close()
    run.write_json(
        "run.json",
        {
            "target": target.describe(),
            "workload": spec.to_dict(),
            "clock": {"wall_t0": clock.wall_t0},
            "status": result.status,
        },
    )
    summary = summarize(run)
    summary["server"] = server_summary(server_series(run), run.read_table("requests"))
    run.write_json("summary.json", summary)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> ReportData:
    out = tmp_path_factory.mktemp("engine") / "run"
    config = EngineConfig(max_num_batched_tokens=8192, vocab_size=4096)
    with EmbeddedServer(config) as server:
        asyncio.run(_record(server.url, out))
    return load_report_data(out)


def test_stalls_behind_long_prefills_are_shown(report: ReportData) -> None:
    decode = report.gaps.gap_s[report.gap_kinds == "decode"]
    p50, worst = np.median(decode), decode.max()
    assert worst > 10 * p50  # the planted cause is in the data...
    t, gaps = report.gaps.t_s, report.gaps.gap_s
    centres, (p99,) = windowed_percentiles(t, gaps, (0.99,), TIMELINE_WINDOWS)
    # ...and the timeline's p99 line shows every stall in its window, however few tokens
    # that window saw (a stall is a window where few tokens arrive).
    half = (centres[1] - centres[0]) / 2
    stalls = np.flatnonzero(gaps > 10 * p50)
    assert stalls.size >= LONG_PROMPTS
    for i in stalls:
        window = np.argmin(np.abs(centres - t[i]))
        assert abs(centres[window] - t[i]) <= half * 1.0001
        assert p99[window] >= 0.5 * gaps[i], (t[i], gaps[i], p99[window])
    page = render_html(report)
    assert f"long-prompt arrivals ({LONG_PROMPTS})" in page
    assert int(report.requests["long_prompt"].sum()) == LONG_PROMPTS


def test_pool_and_server_figures_are_measured(report: ReportData) -> None:
    assert report.pool is not None and report.pool.flavour == "embedded"
    assert [(layer.name, layer.provenance) for layer in report.pool.layers] == [
        ("active", "measured"),
        ("reclaimable", "measured"),
        ("free", "measured"),
    ]
    assert report.pool.layers[0].values.max() > 0  # requests held blocks during the run
    page = render_html(report)
    row = re.search(r"<tr><td>running requests</td>(.*?)</tr>", page).group(1)
    assert "mean " in row and "<td>measured</td>" in row
    assert "server ITL (histogram), per" in page
    assert "workload</dt><dd>interference</dd>" in page
    assert "flavour</dt><dd>embedded</dd>" in page


def test_terminal_report_of_a_real_run(report: ReportData) -> None:
    console = Console(file=io.StringIO(), record=True, width=80)
    render_terminal(report, console)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "ITL p99 over time" in text and "srv ITL" in text
