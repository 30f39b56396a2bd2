"""The live view as a person sees it, and the plain lines a log gets instead.

``bench`` runs inside tmux at 80 and at 120 columns and the pane is captured mid-run:
every line must be one of the dashboard's own (a wrapped line would start with anything
else), the frame must appear once (no scrolling copies), and progress, errors by class
and rolling percentiles must be on it. Some prompts of the run are longer than the
engine's ``max_model_len``, so it has errors to show.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bench_support import bench_cli
from repo_paths import ROOT

from loadgen.records import ChunkTimes, RequestRecord, Status
from prefillscope.dashboard import plain_line, render
from runtime.clock import RunClock
from session.live_stats import LIVE_LATENCIES, LiveStats

LINE_STARTS = (
    "prefillscope bench",
    "━",
    "requests",
    "rate",
    "errors",
    "last 10 s",
    *(metric.short for metric in LIVE_LATENCIES),  # the registry's names
    "client",
    "⚠ client-limited",
)
#: A duration as the dashboard prints it (``runfmt.units.fmt_seconds``): 850 µs, 1.52 s.
DURATION = re.compile(r"\d[\d.]* (?:µs|ms|s|min)(?!\S)")
RUN = (
    "--workload", "system-prompt", "--num-requests", "150", "--rate", "10",
    "--engine", "max_model_len=1800", "--gpu-telemetry", "off", "--allow-overlong",
)  # fmt: skip


def _capture(width: int, run: Path, until: str = "http_4xx", timeout_s: float = 90.0) -> str:
    """The pane once it shows ``until`` (a busy machine may take a while to get there)."""
    socket = f"prefillscope-test-{os.getpid()}-{width}"
    command = " ".join(
        [
            "env -u COLUMNS -u LINES",
            sys.executable,
            "-c 'from prefillscope.cli import main; main()' bench",
            *RUN,
            "--out",
            str(run),
            "; sleep 60",
        ]
    )
    tmux = ["tmux", "-L", socket]
    subprocess.run(
        [*tmux, "new-session", "-d", "-x", str(width), "-y", "30", command],
        check=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            time.sleep(0.5)
            pane = subprocess.run(
                [*tmux, "capture-pane", "-p"], capture_output=True, text=True, check=True
            ).stdout
            if until in pane or time.monotonic() > deadline:
                return pane
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)


@pytest.mark.slow  # two captures of a run
@pytest.mark.timing
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize("width", [80, 120])
def test_dashboard_in_a_terminal(tmp_path: Path, width: int) -> None:
    pane = _capture(width, tmp_path / "run")
    lines = [line.rstrip() for line in pane.splitlines() if line.strip()]
    assert 9 <= len(lines) <= 11, pane
    for line in lines:
        assert len(line) <= width and line.startswith(LINE_STARTS), pane
    assert sum(line.startswith("prefillscope bench") for line in lines) == 1, pane
    by_label = {line.split()[0]: line for line in lines}
    ttft, itl = (metric.short for metric in LIVE_LATENCIES[:2])
    assert "/150 done" in lines[1] and "%" in lines[1]
    assert "http_4xx" in by_label["errors"]  # errors by class
    assert "in flight" in by_label["requests"]
    for label in (ttft, itl):  # p50, p90, p99: durations in whatever unit fits
        assert len(DURATION.findall(by_label[label])) == 3, pane


def test_plain_progress_lines_without_a_terminal(tmp_path: Path) -> None:
    done = bench_cli(
        "--workload", "system-prompt", "--num-requests", "60", "--rate", "10",
        "--engine", "fixed_step_s=0.002", "--gpu-telemetry", "off", "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    progress = [line for line in done.stdout.splitlines() if line.startswith("bench: ")]
    assert len(progress) >= 2  # one every 5 s of a ~6 s run, and the last one
    assert "60/60 done" in progress[-1] and "TTFT p50" in progress[-1]
    assert "\x1b[" not in done.stdout.split("bench complete")[0]  # no cursor movement
    assert done.stderr == ""


def test_json_keeps_stdout_for_the_summary(tmp_path: Path) -> None:
    done = bench_cli(
        "--workload", "system-prompt", "--num-requests", "20", "--rate", "20",
        "--engine", "fixed_step_s=0.002", "--gpu-telemetry", "off", "--json",
        "--out", str(tmp_path / "r"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["requests"]["completed"] == 20
    # summary.json as written, with the run directory and its status in front (bench --json)
    assert summary.pop("run_dir") == str(tmp_path / "r")
    assert summary.pop("status") == "complete"
    assert summary == json.loads((tmp_path / "r" / "summary.json").read_text())
    assert "bench: 20 sent · 20/20 done" in done.stderr  # progress went to stderr


def _stats_with_traffic(sends: int = 4) -> LiveStats:
    clock = RunClock()
    stats = LiveStats(clock, total=10, target_rate=5.0)
    now = clock.now()
    for i in range(sends):
        record = RequestRecord(id=f"r{i}", intended_s=now - 1.0, sent_s=now - 0.99)
        stats.on_send(record)
        record.first_token_s = now - 0.9
        stats.on_first_token(record)
        chunks = ChunkTimes()
        stats.on_stream(record, chunks)
        for t, n in ((now - 0.9, 1), (now - 0.8, 4)):  # a four-token read 100 ms later
            chunks.t_s.append(t)
            chunks.n_tokens.append(n)
        if i < 3:
            if i == 2:
                record.status, record.error_kind = Status.ERROR, "timeout"
            stats.on_finish(record)
    return stats


def test_live_statistics_follow_the_summary_rules() -> None:
    snap = _stats_with_traffic().snapshot()
    assert (snap.sent, snap.finished, snap.ok, snap.in_flight) == (4, 3, 2, 1)
    assert snap.errors == {"timeout": 1}
    assert snap.ttft.p50 == pytest.approx(0.1) and snap.ttft.count == 4
    assert snap.itl.count == 16 and snap.itl.p50 == pytest.approx(0.025)  # per token
    assert snap.dispatch_lag.p99 == pytest.approx(0.01)
    assert snap.limited == []  # too few sends to judge
    busy = _stats_with_traffic(sends=12).snapshot()
    assert busy.limited == ["dispatch lag p99 10.0 ms > 5 ms"]


def test_frames_fit_the_width_they_are_drawn_for() -> None:
    from rich.console import Console

    snap = _stats_with_traffic().snapshot()
    title = "prefillscope bench · a-workload-with-a-long-name → http://example:8000 " * 3
    for width in (60, 80, 120):
        console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
        console.print(render(snap, title, 10.0, width))
        lines = console.export_text().splitlines()
        assert all(len(line) <= width for line in lines)
        assert len(lines) == 10  # one per figure, none wrapped
    line = plain_line(snap)
    assert "4/10" not in line and "3/10 done" in line and "timeout 1" in line


def test_the_dashboard_names_and_writes_figures_as_the_registry_does(monkeypatch) -> None:
    """Each latency row is labelled by its registry entry and its values are written in
    that entry's unit: renamed or re-united there, the frame and the log line follow."""
    import dataclasses

    import session.live_stats as live_stats

    renamed = tuple(
        dataclasses.replace(m, short=f"{m.prefix}!", unit="ms?") for m in LIVE_LATENCIES
    )
    monkeypatch.setattr(live_stats, "LIVE_LATENCIES", renamed)
    snap = _stats_with_traffic().snapshot()
    text = render(snap, "t", 10.0, 120)
    rows = {str(line).split()[0]: str(line) for line in text.renderables}
    for metric, q in snap.latencies():
        assert metric.short in rows and metric.format(q.p50) in rows[metric.short]
        assert metric.format(q.p50).endswith(" ms?")  # written in the registry entry's unit
    line = plain_line(snap)
    assert "ttft! p50 " in line and "itl! p50 " in line and "dispatch_lag!" not in line
