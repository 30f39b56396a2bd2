"""The report of a real ``prefillscope bench`` run: the embedded engine over loopback,
planted with an oversized chunk budget.

The report is checked against what bench really writes (run.json, the tables, the
client and server summaries), not against a hand-made run directory. With a budget of
8192 tokens a long prompt's prefill takes a whole step, every decode waits for it, and
the report has to show those stalls where they happened.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from prefillscope.report.data import ReportData, load_report_data
from prefillscope.report.figures import TIMELINE_WINDOWS, windowed_percentiles
from prefillscope.report.html import render_html
from prefillscope.report.terminal import render_terminal

LONG_PROMPTS = 3
CLI = Path(sys.executable).with_name("prefillscope")


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> ReportData:
    out = tmp_path_factory.mktemp("engine") / "run"
    bench = [
        str(CLI), "bench", "--workload", "interference", "--num-requests", str(LONG_PROMPTS),
        "--rate", "2", "--concurrency", "4", "--seed", "3",
        "--set", "stream_requests=1", "--set", "stream_output_len=200",
        "--set", "long_prompt_len=8192", "--engine", "max_num_batched_tokens=8192",
        "--metrics-interval", "0.1", "--gpu-telemetry", "off", "--out", str(out), "--json",
    ]  # fmt: skip
    done = subprocess.run(bench, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
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
    assert "server ITL (histogram buckets), per" in page
    assert "workload</dt><dd>interference</dd>" in page
    assert "flavour</dt><dd>embedded</dd>" in page
    assert "max_num_batched_tokens=8192" in page  # the planted cause is in the header
    assert "the gpu probe was off" in page


def test_terminal_report_of_a_real_run(report: ReportData) -> None:
    console = Console(file=io.StringIO(), record=True, width=80)
    render_terminal(report, console)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "ITL p99 over time" in text and "srv ITL" in text
